"""The gateway's resources as typed, read-only records (the schemas of openapi.yaml).

Each record keeps the fields this client knows as attributes and the whole JSON object in
``raw``, so fields a newer gateway adds (``env``, ``timeout_s``… of a session) are at hand
before this client names them. Times are RFC 3339 strings as the gateway sends them.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

T = TypeVar("T")


def _from(cls: type[T], d: dict[str, Any]) -> T:
    names = {f.name for f in dataclasses.fields(cast(Any, cls))}
    kw = {k: v for k, v in d.items() if k in names and k != "raw"}
    return cls(raw=d, **kw)  # type: ignore[call-arg]


@dataclass(frozen=True)
class Session:
    """A session (sandbox): ``GET /v1/sessions/{id}``. ``state`` is none, running, paused, parked or destroy_failed.

    ``env_names``, ``expires_at``, ``on_expiry``, ``cpu`` and ``memory_mb`` come from gateways
    with issue 37's session options (None otherwise)."""

    id: str
    profile: str = ""
    provider: str = ""
    scope: str = ""
    status: str = ""
    state: str = ""
    default: bool = False
    name: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    created_at: str = ""
    last_used_at: str = ""
    shared: bool | None = None
    owner: str | None = None
    sandbox_id: str | None = None
    paused_at: str | None = None
    parked_snapshot: str | None = None
    warnings: list[str] | None = None
    env_names: list[str] | None = None
    expires_at: str | None = None
    on_expiry: str | None = None
    cpu: float | None = None
    memory_mb: int | None = None
    secrets: list[str] | None = None  # names of the bound secrets (issue 39), never values
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Session:
        return _from(cls, d)


@dataclass(frozen=True)
class RichResult:
    """One rich result of code, a MIME bundle: ``data`` maps MIME types to representations.

    Text types are strings; ``image/png``, ``image/jpeg`` and ``application/pdf`` are base64
    (``png``/``jpeg``/``pdf`` decode them); ``application/json`` is any JSON value. ``dropped``
    (``{"types": [...], "bytes": n}``) is set instead of ``data`` for one that did not fit the
    output limit.
    """

    data: dict[str, Any] = field(default_factory=dict)
    is_main_result: bool = False
    dropped: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RichResult:
        return _from(cls, d)

    def formats(self) -> list[str]:
        """The MIME types it has."""
        return list(self.data)

    def _bytes(self, mime: str) -> bytes | None:
        v = self.data.get(mime)
        return base64.b64decode(v) if isinstance(v, str) else None

    @property
    def text(self) -> str | None:
        return self.data.get("text/plain")

    @property
    def html(self) -> str | None:
        return self.data.get("text/html")

    @property
    def markdown(self) -> str | None:
        return self.data.get("text/markdown")

    @property
    def svg(self) -> str | None:
        return self.data.get("image/svg+xml")

    @property
    def json(self) -> Any:
        return self.data.get("application/json")

    @property
    def png(self) -> bytes | None:
        """The PNG image's bytes (decoded from base64), or None."""
        return self._bytes("image/png")

    @property
    def jpeg(self) -> bytes | None:
        return self._bytes("image/jpeg")

    @property
    def pdf(self) -> bytes | None:
        return self._bytes("application/pdf")


@dataclass(frozen=True)
class ExecutionResult:
    """What an execution gave (``ExecutionResult``): ``exit_code`` is None when it timed out.

    ``status`` is completed (whatever the exit code), timed_out or cancelled. ``stdout`` and
    ``stderr`` are text; when the program wrote bytes that are no UTF-8 the gateway sends
    them base64 (``encoding``), and ``stdout_raw()``/``stderr_raw()`` decode either form;
    ``stdout_bytes``/``stderr_bytes`` count every byte written, kept or not.
    ``results`` are the rich results of code.
    """

    status: str
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    signal: str | None = None
    oom_killed: bool | None = None
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    encoding: str = "utf-8"
    duration_ms: int = 0
    session_id: str = ""
    task_id: str | None = None
    notice: str | None = None
    warnings: list[str] = field(default_factory=list)
    output_dropped: bool | None = None
    results: list[RichResult] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ExecutionResult:
        d2 = dict(d)
        d2["results"] = [RichResult.from_json(r) for r in d.get("results") or []]
        r = _from(cls, d2)
        return dataclasses.replace(r, raw=d)

    def stdout_raw(self) -> bytes:
        return base64.b64decode(self.stdout) if self.encoding == "base64" else self.stdout.encode()

    def stderr_raw(self) -> bytes:
        return base64.b64decode(self.stderr) if self.encoding == "base64" else self.stderr.encode()

    @property
    def ok(self) -> bool:
        """Completed with exit code 0."""
        return self.status == "completed" and self.exit_code == 0

    @property
    def main_result(self) -> RichResult | None:
        """The value of the code's last expression, if it had one."""
        return next((r for r in self.results if r.is_main_result), None)

    @property
    def text(self) -> str | None:
        """``text/plain`` of the main result (as a notebook's ``Out``)."""
        m = self.main_result
        return m.text if m else None


@dataclass(frozen=True)
class TaskInfo:
    """A task (``Task``): an execution, in the foreground or as a background process."""

    id: str
    session_id: str = ""
    profile: str = ""
    operation: str = ""
    status: str = ""
    submitted_at: str = ""
    started_at: str | None = None
    finished_at: str | None = None
    expires_at: str | None = None
    notice: str | None = None
    error: str | None = None
    error_type: str | None = None
    result: ExecutionResult | None = None
    program: str | None = None
    background: bool | None = None
    pid: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TaskInfo:
        d2 = dict(d)
        if d.get("result") is not None:
            d2["result"] = ExecutionResult.from_json(d["result"])
        return dataclasses.replace(_from(cls, d2), raw=d)

    @property
    def finished(self) -> bool:
        return self.status not in ("pending", "running")


@dataclass(frozen=True)
class ProcessInfo:
    """A background process of a session (``Process``); its id is its task id."""

    id: str
    session_id: str = ""
    command: str = ""
    status: str = ""
    pid: int | None = None
    submitted_at: str = ""
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    notice: str | None = None
    error: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProcessInfo:
        return _from(cls, d)


@dataclass(frozen=True)
class FileEntry:
    """One entry of a folder listing; ``type`` is file, dir, symlink or other."""

    name: str
    path: str
    type: str = "file"
    size: int = 0
    mode: str = ""
    modified_at: str = ""
    path_escaped: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FileEntry:
        return _from(cls, d)


@dataclass(frozen=True)
class FileWritten:
    """A written file: its ``size`` in bytes and ``sha256`` (hex) as stored."""

    session_id: str
    path: str
    size: int
    sha256: str
    path_escaped: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FileWritten:
        return _from(cls, d)


@dataclass(frozen=True)
class Snapshot:
    """A snapshot of a session's workspace; ``kind`` is user or idle."""

    id: str
    session_id: str = ""
    profile: str = ""
    provider: str = ""
    kind: str = ""
    size_bytes: int = 0
    created_at: str = ""
    name: str | None = None
    owner: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Snapshot:
        return _from(cls, d)


@dataclass(frozen=True)
class Context:
    """A stateful code context of a session; ``language`` is python or bash."""

    name: str
    language: str = "python"
    created_at: str = ""
    executions: int = 0
    alive: bool = True
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Context:
        return _from(cls, d)


@dataclass(frozen=True)
class PortLink:
    """A link to a port of a sandbox that works without a bearer token until ``expires_at``."""

    url: str
    session_id: str = ""
    port: int = 0
    personal: bool = False
    expires_at: str = ""
    open_by: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PortLink:
        return _from(cls, d)


@dataclass(frozen=True)
class OutputChunk:
    """A piece of ``stream`` (stdout or stderr) output at byte ``offset`` of that stream."""

    stream: Literal["stdout", "stderr"]
    offset: int
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Event:
    """One event of an execution's stream: ``type`` is task, stdout, stderr, gap,
    rich_result, result or error; ``id`` the resume position (output events only)."""

    type: str
    data: Any
    id: str | None = None

    def json(self) -> str:
        return json.dumps(self.data)
