"""Sandgate's Python client: sandboxes for AI agents behind a Sandgate gateway.

    from sandgate import Sandbox

    with Sandbox.create(labels={"team": "ml"}) as sbx:
        print(sbx.commands.run("echo hi").stdout)

Sync (``Sandbox``, ``Gateway``) and async (``AsyncSandbox``, ``AsyncGateway``) clients with the
same methods; ``sandgate.agent`` turns the gateway's agent tools into OpenAI or Anthropic
tool definitions and runs a model's tool calls.
"""

from ._async_client import (
    AsyncCommandHandle,
    AsyncCommands,
    AsyncFiles,
    AsyncGateway,
    AsyncPorts,
    AsyncSandbox,
    AsyncTask,
)
from ._config import credentials_path
from ._errors import (
    AuthenticationError,
    CapabilityError,
    ConfigurationError,
    ConflictError,
    ForbiddenError,
    InternalError,
    MethodNotAllowedError,
    NotFoundError,
    PausedError,
    PolicyError,
    ProblemError,
    QuotaError,
    RangeNotSatisfiableError,
    RateLimitedError,
    SandgateError,
    StreamError,
    TimeoutError,
    TooLargeError,
    UnavailableError,
    UnsupportedMediaTypeError,
    UpstreamError,
    ValidationError,
    WorkspaceFullError,
)
from ._models import (
    Context,
    Event,
    ExecutionResult,
    FileEntry,
    FileWritten,
    OutputChunk,
    PortLink,
    ProcessInfo,
    RichResult,
    Session,
    Snapshot,
    TaskInfo,
)
from ._sync_client import CommandHandle, Commands, Files, Gateway, Ports, Sandbox, Task

CommandResult = ExecutionResult
Execution = ExecutionResult

__version__ = "0.1.0"

__all__ = [
    "AsyncCommandHandle", "AsyncCommands", "AsyncFiles", "AsyncGateway", "AsyncPorts", "AsyncSandbox", "AsyncTask",
    "AuthenticationError", "CapabilityError", "CommandHandle", "CommandResult", "Commands", "ConfigurationError",
    "ConflictError", "Context", "Event", "Execution", "ExecutionResult", "FileEntry", "FileWritten", "Files",
    "ForbiddenError", "Gateway", "InternalError", "MethodNotAllowedError", "NotFoundError", "OutputChunk",
    "PausedError", "PolicyError", "PortLink", "Ports", "ProblemError", "ProcessInfo", "QuotaError",
    "RangeNotSatisfiableError", "RateLimitedError", "RichResult", "Sandbox", "SandgateError", "Session", "Snapshot",
    "StreamError", "Task", "TaskInfo", "TimeoutError", "TooLargeError", "UnavailableError",
    "UnsupportedMediaTypeError", "UpstreamError", "ValidationError", "WorkspaceFullError", "credentials_path",
]
