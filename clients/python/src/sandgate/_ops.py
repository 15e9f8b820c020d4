"""The operations of openapi.yaml this client calls: id → (method, path, body fields it sends).

Every request goes through ``request_for(op, ...)``, so this table is what the contract test
(tests/test_contract.py) holds against openapi.yaml: each operation present with its method
and path, and each JSON body field the contract names known here (an unknown one is a
bug of the caller and raises). ``RETRYABLE`` lists the operations safe to send again after a
429 or 503 (reads, deletes, idempotent writes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

_CREATE_SESSION = ("from_snapshot", "profile", "name", "labels", "env", "timeout_s", "on_expiry", "cpu", "memory_mb", "secrets")
_EXEC_COMMON = ("env", "timeout_s", "wait_s", "output", "stdin", "stdin_open")

OPERATIONS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "getHealth": ("GET", "/healthz", ()),
    "getReady": ("GET", "/readyz", ()),
    "getMe": ("GET", "/v1/me", ()),
    "listProfiles": ("GET", "/v1/profiles", ()),
    "listAPIKeys": ("GET", "/v1/api-keys", ()),
    "createAPIKey": ("POST", "/v1/api-keys", ("name", "ttl_s", "profiles")),
    "getAPIKey": ("GET", "/v1/api-keys/{key_id}", ()),
    "revokeAPIKey": ("DELETE", "/v1/api-keys/{key_id}", ()),
    "listSecrets": ("GET", "/v1/secrets", ()),
    "putSecret": ("PUT", "/v1/secrets/{name}", ("value", "hosts")),
    "deleteSecret": ("DELETE", "/v1/secrets/{name}", ()),
    "listSessions": ("GET", "/v1/sessions", ()),
    "createSession": ("POST", "/v1/sessions", _CREATE_SESSION),
    "getSession": ("GET", "/v1/sessions/{session_id}", ()),
    "updateSession": ("PATCH", "/v1/sessions/{session_id}", ("name", "labels", "timeout_s")),
    "deleteSession": ("DELETE", "/v1/sessions/{session_id}", ()),
    "runCommand": ("POST", "/v1/sessions/{session_id}/commands", ("command", "cwd", "pty", "background", *_EXEC_COMMON)),
    "runCode": ("POST", "/v1/sessions/{session_id}/code", ("code", "language", "context", *_EXEC_COMMON)),
    "listProcesses": ("GET", "/v1/sessions/{session_id}/processes", ()),
    "getProcess": ("GET", "/v1/sessions/{session_id}/processes/{process_id}", ()),
    "stopProcess": ("DELETE", "/v1/sessions/{session_id}/processes/{process_id}", ()),
    "listContexts": ("GET", "/v1/sessions/{session_id}/contexts", ()),
    "createContext": ("POST", "/v1/sessions/{session_id}/contexts", ("name", "language")),
    "deleteContext": ("DELETE", "/v1/sessions/{session_id}/contexts/{context_name}", ()),
    "restartContext": ("POST", "/v1/sessions/{session_id}/contexts/{context_name}/restart", ()),
    "pauseSession": ("POST", "/v1/sessions/{session_id}/pause", ()),
    "resumeSession": ("POST", "/v1/sessions/{session_id}/resume", ()),
    "createSnapshot": ("POST", "/v1/sessions/{session_id}/snapshots", ("name",)),
    "listSnapshots": ("GET", "/v1/snapshots", ()),
    "getSnapshot": ("GET", "/v1/snapshots/{snapshot_id}", ()),
    "deleteSnapshot": ("DELETE", "/v1/snapshots/{snapshot_id}", ()),
    "createPortLink": ("POST", "/v1/sessions/{session_id}/ports/{port}/links", ("ttl_s", "personal")),
    "previewPortGet": ("GET", "/v1/sessions/{session_id}/ports/{port}/{path}", ()),
    "previewPortPost": ("POST", "/v1/sessions/{session_id}/ports/{port}/{path}", ()),
    "previewPortPut": ("PUT", "/v1/sessions/{session_id}/ports/{port}/{path}", ()),
    "previewPortPatch": ("PATCH", "/v1/sessions/{session_id}/ports/{port}/{path}", ()),
    "previewPortDelete": ("DELETE", "/v1/sessions/{session_id}/ports/{port}/{path}", ()),
    "previewLinkGet": ("GET", "/preview/{token}/{path}", ()),
    "previewLinkPost": ("POST", "/preview/{token}/{path}", ()),
    "createRun": ("POST", "/v1/runs", ("kind", "profile", "command", "code", "language", "env", "stdin", "timeout_s", "wait_s", "output")),
    "listFiles": ("GET", "/v1/sessions/{session_id}/files", ()),
    "writeFile": ("PUT", "/v1/sessions/{session_id}/files/{path}", ()),
    "readFile": ("GET", "/v1/sessions/{session_id}/files/{path}", ()),
    "deleteFile": ("DELETE", "/v1/sessions/{session_id}/files/{path}", ()),
    "listTasks": ("GET", "/v1/tasks", ()),
    "getTask": ("GET", "/v1/tasks/{task_id}", ()),
    "getTaskOutput": ("GET", "/v1/tasks/{task_id}/output", ()),
    "cancelTask": ("POST", "/v1/tasks/{task_id}/cancel", ()),
    "writeTaskStdin": ("POST", "/v1/tasks/{task_id}/stdin", ()),
    "resizeTaskTerminal": ("POST", "/v1/tasks/{task_id}/resize", ("rows", "cols")),
    "getAgentTools": ("GET", "/v1/agent/tools", ()),
    "listAuditEvents": ("GET", "/v1/audit", ()),
}

# Operations of issue 37's API changes that older gateways lack; the contract test accepts
# their absence from openapi.yaml.
OPTIONAL_OPERATIONS = frozenset({"updateSession"})

_PAGE = ("limit", "cursor")

# The query parameters each operation may be sent (gateways answer 400 to others). Every
# operation on a session also takes `profile` (to address the `default` session).
QUERY: dict[str, tuple[str, ...]] = {
    "listSessions": ("profile", "status", "conversation", "all", "label", *_PAGE),
    "listTasks": ("status", "session_id", "label", *_PAGE),
    "listSnapshots": ("session_id", "all", *_PAGE),
    "listAPIKeys": ("all", *_PAGE),
    "listAuditEvents": ("principal", "session_id", "kind", "api_key_id", "since", "until", *_PAGE),
    "getAgentTools": ("format",),
    "listFiles": ("profile", "dir"),
    "writeTaskStdin": ("eof",),
}
for _op, (_method, _path, _fields) in OPERATIONS.items():
    # A preview's query string is the sandbox server's, passed through as is.
    if _path.startswith("/v1/sessions/{session_id}") and "/ports/{port}/{path}" not in _path and _op not in QUERY:
        QUERY[_op] = ("profile",)

# Query parameters of issue 37 (label selectors) that older contracts lack.
OPTIONAL_QUERY = frozenset({("listSessions", "label"), ("listTasks", "label")})

RETRYABLE = frozenset(
    op for op, (method, _, _) in OPERATIONS.items() if method in ("GET", "PUT", "DELETE")
) | {"cancelTask", "pauseSession", "resumeSession", "restartContext", "resizeTaskTerminal"}

# Path parameters that may hold slashes (a file path, the rest of a preview URL).
_SLASHED = frozenset({"path"})


@dataclass
class Request:
    op: str
    method: str
    path: str
    params: list[tuple[str, str]] = field(default_factory=list)
    json: dict[str, Any] | None = None
    content: Any = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def retryable(self) -> bool:
        return self.op in RETRYABLE


def _escape(v: str, slashed: bool) -> str:
    """A path parameter, percent-encoded; in one that may hold slashes, dot segments are
    encoded too, so that URL normalization cannot turn ``a/../b`` into another path: the
    gateway sees the path as given (and refuses one that leaves the workspace)."""
    if not slashed:
        return quote(v, safe="")
    return "/".join(s.replace(".", "%2E") if s in (".", "..") else quote(s, safe="") for s in v.split("/"))


def _q(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def request_for(
    op: str,
    path_params: dict[str, Any] | None = None,
    *,
    query: dict[str, Any] | list[tuple[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
    content: Any = None,
    headers: dict[str, str] | None = None,
) -> Request:
    """The request of operation ``op``: path parameters escaped, None values left out of the
    query and the body; a body field the operation does not take raises ValueError."""
    method, template, fields = OPERATIONS[op]
    path = template
    for k, v in (path_params or {}).items():
        path = path.replace("{" + k + "}", _escape(str(v), k in _SLASHED))
    if "{" in path:
        raise ValueError(f"{op}: path parameters missing in {path}")
    items = query.items() if isinstance(query, dict) else (query or [])
    params = [(k, _q(v)) for k, v in items if v is not None]
    unknown_q = {k for k, _ in params} - set(QUERY.get(op, ()))
    if unknown_q:
        raise ValueError(f"{op} takes no query parameter {sorted(unknown_q)}")
    js = None
    if body is not None:
        unknown = set(body) - set(fields)
        if unknown:
            raise ValueError(f"{op} takes no body field {sorted(unknown)}")
        js = {k: v for k, v in body.items() if v is not None}
    return Request(op, method, path, params, js, content, dict(headers or {}))
