"""The asynchronous client. The synchronous client (_sync_client.py) is generated from this
file by scripts/unasync.py: edit this one and run the script (tests/test_generated.py checks)."""

from __future__ import annotations

import inspect
from contextlib import asynccontextmanager
from typing import IO, Any, AsyncIterable, AsyncIterator, Callable, Iterable, List, Literal, overload

import httpx

from . import _config
from ._common import (
    STREAM_READ_TIMEOUT_S,
    USER_AGENT,
    asleep,
    decode_event,
    drop_none,
    matches,
    problem_of,
    retry_after_s,
)
from ._errors import ProblemError, StreamError, problem_error
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
from ._ops import Request, request_for
from ._sse import SSEParser

OutputCallback = Callable[[str], Any]
ResultCallback = Callable[[RichResult], Any]
FileData = bytes | str | IO[bytes] | Iterable[bytes] | AsyncIterable[bytes]


async def _call(cb: Callable[..., Any] | None, *args: Any) -> None:
    """Calls cb (a function, or in the async client also a coroutine function)."""
    if cb is None:
        return
    r = cb(*args)
    if inspect.isawaitable(r):
        await r


async def _read_chunks(f: IO[bytes]) -> AsyncIterator[bytes]:
    while True:
        b = f.read(1 << 16)
        if not b:
            break
        yield b


async def _iter_chunks(it: Iterable[bytes]) -> AsyncIterator[bytes]:
    for b in it:
        yield b


class AsyncGateway:
    """A connection to a Sandgate gateway: authentication, retries and every operation of its
    API that is not about one sandbox (those are on AsyncSandbox).

    ``url``, ``token`` and ``api_key`` default as ``sandgate._config`` says ($SANDGATE_URL,
    $SANDGATE_TOKEN, $SANDGATE_API_KEY, the CLI's cached login). Calls that are safe to repeat
    (reads, deletes, file writes of bytes, cancels) are sent again after a 429 or 503, waiting
    what ``Retry-After`` says (at most ``max_retry_wait`` seconds per wait, ``max_retries``
    times); the others raise at once. ``timeout`` bounds each request in seconds (streams are
    bounded per read instead). ``transport`` is an httpx transport (tests, proxies).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        api_key: str | None = None,
        timeout: float = 300.0,
        max_retries: int = 3,
        max_retry_wait: float = 60.0,
        max_resumes: int = 5,
        transport: httpx.AsyncBaseTransport | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        creds = _config.resolve(url, token, api_key)
        self.url = creds.url
        self._token = creds.token
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self.max_resumes = max_resumes
        self._http = httpx.AsyncClient(
            base_url=self.url,
            timeout=httpx.Timeout(timeout, connect=30.0),
            transport=transport,
            headers={"User-Agent": USER_AGENT, **(headers or {})},
            follow_redirects=False,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncGateway:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- transport -------------------------------------------------------------------------

    def _build(self, req: Request, accept: str, timeout: httpx.Timeout | None = None) -> httpx.Request:
        headers = {"Accept": accept, "Authorization": "Bearer " + self._token(), **req.headers}
        kw: dict[str, Any] = {}
        if timeout is not None:
            kw["timeout"] = timeout
        return self._http.build_request(
            req.method, req.path, params=tuple(req.params), json=req.json, content=req.content, headers=headers, **kw
        )

    async def _send(self, req: Request, *, accept: str = "application/json", stream: bool = False) -> httpx.Response:
        """Sends req, retrying as the class says; raises the problem of an answer >= 400."""
        repeatable = req.retryable and (req.content is None or isinstance(req.content, bytes))
        timeout = httpx.Timeout(None, connect=30.0, read=STREAM_READ_TIMEOUT_S) if accept == "text/event-stream" else None
        attempt = 0
        while True:
            try:
                resp = await self._http.send(self._build(req, accept, timeout), stream=True)
            except (httpx.ConnectError, httpx.ConnectTimeout):
                if not repeatable or attempt >= self.max_retries:
                    raise
                attempt += 1
                await asleep(min(2.0**attempt / 4, self.max_retry_wait))
                continue
            if resp.status_code in (429, 503) and repeatable and attempt < self.max_retries:
                wait = retry_after_s(resp)
                if wait is None:
                    wait = min(2.0**attempt / 2, self.max_retry_wait)
                if wait <= self.max_retry_wait:
                    await resp.aclose()
                    attempt += 1
                    await asleep(wait)
                    continue
            if resp.status_code >= 400:
                await resp.aread()
                await resp.aclose()
                raise problem_of(resp)
            if not stream:
                await resp.aread()
                await resp.aclose()
            return resp

    async def _json(self, req: Request) -> dict[str, Any]:
        """The JSON object answered to req ({} for an empty answer)."""
        resp = await self._send(req)
        body: dict[str, Any] = resp.json() if resp.content else {}
        return body

    @asynccontextmanager
    async def _stream(self, req: Request, accept: str) -> AsyncIterator[httpx.Response]:
        resp = await self._send(req, accept=accept, stream=True)
        try:
            yield resp
        finally:
            await resp.aclose()

    async def _pages(self, op: str, key: str, query: list[tuple[str, Any]], limit: int | None = None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        cursor = ""
        while True:
            q = query + ([("cursor", cursor)] if cursor else []) + [("limit", 500)]
            page = await self._json(request_for(op, query=q))
            out.extend(page.get(key) or [])
            cursor = page.get("next_cursor") or ""
            if not cursor or (limit is not None and len(out) >= limit):
                return out[:limit] if limit is not None else out

    async def events(self, first: Request, *, task_id: str | None = None, last_event_id: str | None = None) -> AsyncIterator[Event]:
        """The events of an execution's stream, opened by ``first`` (a POST with
        ``Accept: text/event-stream`` or ``GET /v1/tasks/{id}/output``). A connection that
        drops (or sends nothing for 45 s) before the ``result`` is reopened with
        ``GET /v1/tasks/{id}/output`` and ``Last-Event-ID``, up to ``max_resumes`` times in a
        row, so no event is lost or repeated. Ends after the ``result`` event; an ``error``
        event raises its problem."""
        req = first
        resumes = 0
        last = last_event_id
        while True:
            try:
                async with self._stream(req, "text/event-stream") as resp:
                    parser = SSEParser()
                    async for line in resp.aiter_lines():
                        raw = parser.feed(line)
                        if raw is None:
                            continue
                        resumes = 0
                        if raw.id:
                            last = raw.id
                        ev = decode_event(raw)
                        if ev.type == "task" and isinstance(ev.data, dict):
                            task_id = ev.data.get("id") or task_id
                        if ev.type == "error" and isinstance(ev.data, dict):
                            raise problem_error(ev.data, int(ev.data.get("status") or 500))
                        yield ev
                        if ev.type == "result":
                            return
                    raw = parser.feed("")
                    if raw is not None and raw.event == "result":
                        yield decode_event(raw)
                        return
                raise httpx.RemoteProtocolError("the event stream ended before its result")
            except httpx.TransportError as e:
                if task_id is None:
                    raise StreamError(f"the event stream broke before it named its task, so it cannot be resumed: {e}") from e
                resumes += 1
                if resumes > self.max_resumes:
                    raise StreamError(f"the event stream of task {task_id} broke {resumes} times in a row: {e}") from e
                await asleep(min(0.25 * 2**resumes, 5.0))
                req = request_for("getTaskOutput", {"task_id": task_id}, headers={"Last-Event-ID": last} if last else None)

    async def _execute(
        self,
        first: Request,
        on_stdout: OutputCallback | None,
        on_stderr: OutputCallback | None,
        on_result: ResultCallback | None = None,
        on_event: Callable[[Event], Any] | None = None,
        task_id: str | None = None,
        last_event_id: str | None = None,
    ) -> ExecutionResult:
        """Follows an execution's events to its result, calling the callbacks on the way."""
        async for ev in self.events(first, task_id=task_id, last_event_id=last_event_id):
            await _call(on_event, ev)
            if isinstance(ev.data, OutputChunk):
                await _call(on_stdout if ev.type == "stdout" else on_stderr, ev.data.text)
            elif ev.type == "rich_result" and isinstance(ev.data, dict):
                await _call(on_result, RichResult.from_json(ev.data))
            elif ev.type == "result" and isinstance(ev.data, dict):
                return ExecutionResult.from_json(ev.data)
        raise StreamError("the event stream ended without a result")

    # -- account and deployment ------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        """``GET /healthz``: ``{"status": "ok", "version": …}``."""
        return await self._json(request_for("getHealth"))

    async def ready(self) -> dict[str, Any]:
        """``GET /readyz``: 200 once the gateway takes work (raises UnavailableError otherwise)."""
        return await self._json(request_for("getReady"))

    async def me(self) -> dict[str, Any]:
        """``GET /v1/me``: the caller (a Principal) with its quotas and their use."""
        return await self._json(request_for("getMe"))

    async def profiles(self) -> list[dict[str, Any]]:
        """``GET /v1/profiles``: the profiles the caller may use, with policy and capabilities."""
        profiles: list[dict[str, Any]] = (await self._json(request_for("listProfiles")))["profiles"]
        return profiles

    async def agent_tools(self, format: Literal["mcp", "openai", "anthropic"] = "mcp") -> dict[str, Any]:
        """``GET /v1/agent/tools``: ``{format, guidance, tool_output_max_chars, tools}``."""
        return await self._json(request_for("getAgentTools", query={"format": format}))

    async def audit(self, **filters: Any) -> list[dict[str, Any]]:
        """``GET /v1/audit`` (every page): filters principal, session_id, kind, api_key_id,
        since, until (RFC 3339)."""
        return await self._pages("listAuditEvents", "events", list(drop_none(filters).items()))

    # -- API keys ----------------------------------------------------------------------------

    async def create_api_key(self, name: str, *, ttl_s: int | None = None, profiles: list[str] | None = None) -> dict[str, Any]:
        """``POST /v1/api-keys``: the key with its ``secret`` (shown this once)."""
        return await self._json(request_for("createAPIKey", body={"name": name, "ttl_s": ttl_s, "profiles": profiles}))

    async def api_keys(self, *, all: bool | None = None) -> list[dict[str, Any]]:
        return await self._pages("listAPIKeys", "api_keys", [("all", all)] if all is not None else [])

    async def get_api_key(self, key_id: str) -> dict[str, Any]:
        return await self._json(request_for("getAPIKey", {"key_id": key_id}))

    async def revoke_api_key(self, key_id: str) -> dict[str, Any]:
        return await self._json(request_for("revokeAPIKey", {"key_id": key_id}))

    # -- secrets (write-only: a value is set, never read back) --------------------------------

    async def set_secret(self, name: str, value: str, hosts: list[str]) -> dict[str, Any]:
        """``PUT /v1/secrets/{name}``: creates or replaces the secret ``name``, sent by the egress
        proxy only to ``hosts``. The answer (name, hosts, times) never carries the value."""
        return await self._json(request_for("putSecret", {"name": name}, body={"value": value, "hosts": hosts}))

    async def secrets(self) -> list[dict[str, Any]]:
        """``GET /v1/secrets``: the caller's secrets by name (never their values)."""
        listed: list[dict[str, Any]] = (await self._json(request_for("listSecrets")))["secrets"]
        return listed

    async def delete_secret(self, name: str) -> None:
        """``DELETE /v1/secrets/{name}``; an unknown (or another principal's) secret raises NotFound."""
        await self._send(request_for("deleteSecret", {"name": name}))

    # -- sessions ------------------------------------------------------------------------------

    async def create_session(
        self,
        *,
        profile: str | None = None,
        name: str | None = None,
        labels: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        timeout_s: int | None = None,
        on_expiry: Literal["destroy", "pause"] | None = None,
        cpu: float | None = None,
        memory_mb: int | None = None,
        from_snapshot: str | None = None,
        secrets: list[str] | None = None,
    ) -> Session:
        """``POST /v1/sessions``. ``env`` (variables of every execution; never shown again:
        ``env_names`` lists them), ``timeout_s`` (a lifetime in seconds, ended as ``on_expiry``
        says), ``cpu`` and ``memory_mb`` (within the profile's policy) need a gateway with the
        session options of issue 37; they are sent only when given. ``secrets`` names stored
        secrets (``set_secret``) to bind: programs see ``SANDGATE_SECRET_<NAME>`` holding a
        placeholder the egress proxy replaces with the value (issue 39's gateways)."""
        body = {
            "profile": profile,
            "name": name,
            "labels": labels,
            "env": env,
            "timeout_s": timeout_s,
            "on_expiry": on_expiry,
            "cpu": cpu,
            "memory_mb": memory_mb,
            "from_snapshot": from_snapshot,
            "secrets": secrets,
        }
        return Session.from_json(await self._json(request_for("createSession", body=body)))

    async def sessions(
        self,
        *,
        labels: dict[str, str] | None = None,
        profile: str | None = None,
        status: str | None = None,
        conversation: str | None = None,
        all: bool | None = None,
    ) -> list[Session]:
        """``GET /v1/sessions`` (every page), newest first. ``labels`` selects sessions that
        carry every one of them (``?label=k=v``, repeated; also checked here, for gateways that
        do not filter by label)."""
        q: list[tuple[str, Any]] = [("profile", profile), ("status", status), ("conversation", conversation), ("all", all)]
        q += [("label", f"{k}={v}") for k, v in (labels or {}).items()]
        rows = await self._pages("listSessions", "sessions", [(k, v) for k, v in q if v is not None])
        return [Session.from_json(s) for s in rows if matches(s.get("labels"), labels)]

    async def get_session(self, session_id: str, *, profile: str | None = None) -> Session:
        return Session.from_json(await self._json(request_for("getSession", {"session_id": session_id}, query={"profile": profile})))

    async def update_session(
        self,
        session_id: str,
        *,
        name: str | None = None,
        labels: dict[str, str | None] | None = None,
        timeout_s: int | None = None,
    ) -> Session:
        """``PATCH /v1/sessions/{id}`` (a JSON merge patch; needs issue 37's gateway): ``name``
        replaces the name ("" clears it), ``labels`` merge into the labels (a value of None
        removes that label), ``timeout_s`` sets the lifetime anew from now (0: none). What is
        not given is kept."""
        body = {"name": name, "labels": labels, "timeout_s": timeout_s}
        req = request_for("updateSession", {"session_id": session_id}, body=body, headers={"Content-Type": "application/merge-patch+json"})
        return Session.from_json(await self._json(req))

    async def delete_session(self, session_id: str) -> dict[str, Any]:
        """``DELETE /v1/sessions/{id}``: ``{"session_id", "destroyed"}`` (false: removal retried)."""
        return await self._json(request_for("deleteSession", {"session_id": session_id}))

    # -- one-off runs, tasks, snapshots ------------------------------------------------------

    async def run(
        self,
        command: str | None = None,
        *,
        code: str | None = None,
        language: str | None = None,
        profile: str | None = None,
        envs: dict[str, str] | None = None,
        stdin: str | None = None,
        timeout: float | None = None,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> ExecutionResult:
        """``POST /v1/runs``: a command or code in a fresh sandbox of a ``per_call`` profile,
        used once and destroyed; output streams to the callbacks as it comes."""
        if (command is None) == (code is None):
            raise ValueError("give exactly one of command and code")
        body = {"profile": profile, "command": command, "code": code, "language": language, "env": envs, "stdin": stdin, "timeout_s": timeout}
        return await self._execute(request_for("createRun", body=body), on_stdout, on_stderr)

    def task(self, task_id: str, *, session_id: str | None = None, background: bool = False) -> AsyncTask:
        """A handle on task ``task_id`` (no request is made)."""
        return AsyncTask(self, task_id, session_id=session_id, background=background)

    async def tasks(self, *, status: str | None = None, session_id: str | None = None, labels: dict[str, str] | None = None) -> list[TaskInfo]:
        """``GET /v1/tasks`` (every page), newest first; ``labels`` selects the tasks of
        sessions carrying all of them (a gateway with issue 37's label selectors)."""
        q: list[tuple[str, Any]] = [(k, v) for k, v in (("status", status), ("session_id", session_id)) if v]
        q += [("label", f"{k}={v}") for k, v in (labels or {}).items()]
        rows = await self._pages("listTasks", "tasks", q)
        return [TaskInfo.from_json(t) for t in rows]

    async def snapshots(self, *, session_id: str | None = None, all: bool | None = None) -> list[Snapshot]:
        rows = await self._pages("listSnapshots", "snapshots", [(k, v) for k, v in (("session_id", session_id), ("all", all)) if v is not None])
        return [Snapshot.from_json(s) for s in rows]

    async def get_snapshot(self, snapshot_id: str) -> Snapshot:
        return Snapshot.from_json(await self._json(request_for("getSnapshot", {"snapshot_id": snapshot_id})))

    async def delete_snapshot(self, snapshot_id: str) -> None:
        await self._send(request_for("deleteSnapshot", {"snapshot_id": snapshot_id}))

    async def open_preview_link(
        self, link: str, *, method: Literal["GET", "POST"] = "GET", content: bytes | None = None, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        """Fetches a port link's URL (``/preview/{token}/{path}``): no bearer token is sent."""
        u = httpx.URL(link)
        rest = u.path.removeprefix("/preview/")
        token, _, path = rest.partition("/")
        req = request_for("previewLinkGet" if method == "GET" else "previewLinkPost", {"token": token, "path": path}, content=content)
        return await self._http.request(req.method, str(u.copy_with(path=req.path)), content=content, headers=headers)


class AsyncTask:
    """A task: an execution, in the foreground or as a background process of its session.

    ``wait`` follows its output to the result (resuming after dropped connections), ``follow``
    yields its events, ``cancel``/``kill`` stop it, ``send_stdin`` feeds a task started with
    ``stdin_open`` (or a terminal), ``resize`` changes a terminal's size."""

    def __init__(self, gateway: AsyncGateway, task_id: str, *, session_id: str | None = None, background: bool = False, pid: int | None = None) -> None:
        self.gateway = gateway
        self.id = task_id
        self.session_id = session_id
        self.background = background
        self.pid = pid

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id}>"

    async def info(self) -> TaskInfo:
        """``GET /v1/tasks/{id}``."""
        return TaskInfo.from_json(await self.gateway._json(request_for("getTask", {"task_id": self.id})))

    async def follow(self, *, last_event_id: str | None = None) -> AsyncIterator[Event]:
        """The task's events from the start (or after ``last_event_id``) to its result."""
        req = request_for("getTaskOutput", {"task_id": self.id}, headers={"Last-Event-ID": last_event_id} if last_event_id else None)
        async for ev in self.gateway.events(req, task_id=self.id, last_event_id=last_event_id):
            yield ev

    async def wait(
        self,
        *,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
        on_result: ResultCallback | None = None,
    ) -> ExecutionResult:
        """Waits for the end and answers the result; output so far and to come goes to the
        callbacks (replayed from the start)."""
        req = request_for("getTaskOutput", {"task_id": self.id})
        return await self.gateway._execute(req, on_stdout, on_stderr, on_result, task_id=self.id)

    async def cancel(self) -> TaskInfo:
        """``POST /v1/tasks/{id}/cancel``: stops the execution (a no-op once it finished)."""
        return TaskInfo.from_json(await self.gateway._json(request_for("cancelTask", {"task_id": self.id})))

    async def kill(self) -> None:
        """Stops it: a background process with ``DELETE …/processes/{id}``, else a cancel."""
        if self.background and self.session_id:
            await self.gateway._send(request_for("stopProcess", {"session_id": self.session_id, "process_id": self.id}))
        else:
            await self.cancel()

    async def send_stdin(self, data: bytes | str, *, eof: bool = False) -> int:
        """Appends ``data`` to its standard input (``eof`` closes it after); answers the bytes taken."""
        blob = data.encode() if isinstance(data, str) else data
        req = request_for(
            "writeTaskStdin", {"task_id": self.id}, query={"eof": True if eof else None}, content=blob,
            headers={"Content-Type": "application/octet-stream"},
        )
        return int((await self.gateway._json(req))["bytes"])

    async def close_stdin(self) -> None:
        await self.send_stdin(b"", eof=True)

    async def resize(self, rows: int, cols: int) -> None:
        """Resizes the terminal of a task started with ``pty``."""
        await self.gateway._send(request_for("resizeTaskTerminal", {"task_id": self.id}, body={"rows": rows, "cols": cols}))


AsyncCommandHandle = AsyncTask


class AsyncCommands:
    """``sbx.commands``: shell commands (``/bin/sh -c``) in the sandbox's workspace."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._s = sandbox

    @overload
    async def run(
        self, cmd: str, *, background: Literal[False] = False, on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None, timeout: float | None = None, cwd: str | None = None,
        envs: dict[str, str] | None = None, stdin: str | None = None, stdin_open: Literal[False] = False,
    ) -> ExecutionResult: ...

    @overload
    async def run(
        self, cmd: str, *, background: Literal[True], on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None, timeout: float | None = None, cwd: str | None = None,
        envs: dict[str, str] | None = None, stdin: str | None = None, stdin_open: bool = False,
    ) -> AsyncTask: ...

    @overload
    async def run(
        self, cmd: str, *, background: bool = False, on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None, timeout: float | None = None, cwd: str | None = None,
        envs: dict[str, str] | None = None, stdin: str | None = None, stdin_open: Literal[True],
    ) -> AsyncTask: ...

    async def run(
        self,
        cmd: str,
        *,
        background: bool = False,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
        timeout: float | None = None,
        cwd: str | None = None,
        envs: dict[str, str] | None = None,
        stdin: str | None = None,
        stdin_open: bool = False,
    ) -> ExecutionResult | AsyncTask:
        """Runs ``cmd`` and answers its result (exit_code, stdout, stderr; a non-zero exit is
        no error), streaming its output to ``on_stdout``/``on_stderr`` as it comes.

        ``background=True`` starts it as a background process of the session (a server, a
        watcher) and answers its AsyncTask at once (``timeout`` is then its lifetime);
        ``stdin_open=True`` answers the AsyncTask of a foreground run whose input you feed with
        ``send_stdin``. ``timeout`` (seconds) lowers the profile's timeout, ``cwd`` is relative
        to the workspace, ``envs`` adds environment variables, ``stdin`` is its input."""
        body = {
            "command": cmd, "cwd": cwd, "env": envs, "stdin": stdin, "timeout_s": timeout,
            "background": True if background else None, "stdin_open": True if stdin_open else None,
        }
        if background:
            p = ProcessInfo.from_json(await self._s.gateway._json(self._s._req("runCommand", body=body)))
            return AsyncTask(self._s.gateway, p.id, session_id=p.session_id, background=True, pid=p.pid)
        if stdin_open:
            body["wait_s"] = 0
            # 202 with the task; 200 with the result (its task_id) if it had already ended.
            d = await self._s.gateway._json(self._s._req("runCommand", body=body))
            return AsyncTask(self._s.gateway, str(d.get("id") or d.get("task_id")), session_id=d.get("session_id"))
        return await self._s.gateway._execute(self._s._req("runCommand", body=body), on_stdout, on_stderr)

    async def list(self) -> list[ProcessInfo]:
        """The session's background processes (``GET …/processes``)."""
        return [ProcessInfo.from_json(p) for p in (await self._s.gateway._json(self._s._req("listProcesses")))["processes"]]

    async def get(self, process_id: str) -> ProcessInfo:
        return ProcessInfo.from_json(await self._s.gateway._json(self._s._req("getProcess", process_id=process_id)))

    async def kill(self, process_id: str) -> None:
        """Stops a background process (``DELETE …/processes/{id}``)."""
        await self._s.gateway._send(self._s._req("stopProcess", process_id=process_id))

    def connect(self, process_id: str) -> AsyncTask:
        """A handle on a running background process (its id is its task id)."""
        return AsyncTask(self._s.gateway, process_id, session_id=self._s.id, background=True)


class AsyncFiles:
    """``sbx.files``: the workspace's files, byte-exact; paths are relative to the workspace."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._s = sandbox

    async def write(self, path: str, data: FileData) -> FileWritten:
        """Writes ``data`` (bytes, str as UTF-8, a binary file object or an iterable of bytes,
        streamed) to ``path``, making parent folders; answers size and SHA-256 as stored."""
        content: Any
        if isinstance(data, str):
            content = data.encode()
        elif isinstance(data, (bytes, bytearray, memoryview)):
            content = bytes(data)
        elif hasattr(data, "read"):
            content = _read_chunks(data)  # type: ignore[arg-type]
        elif isinstance(data, AsyncIterable):
            content = data
        else:
            content = _iter_chunks(data)
        req = self._s._req("writeFile", path=path, content=content, headers={"Content-Type": "application/octet-stream"})
        return FileWritten.from_json(await self._s.gateway._json(req))

    @overload
    async def read(self, path: str, format: Literal["text"] = "text") -> str: ...

    @overload
    async def read(self, path: str, format: Literal["bytes"]) -> bytes: ...

    async def read(self, path: str, format: Literal["text", "bytes"] = "text") -> str | bytes:
        """The file's bytes (``format="bytes"``) or its text (UTF-8)."""
        resp = await self._s.gateway._send(self._s._req("readFile", path=path), accept="*/*")
        return resp.content if format == "bytes" else resp.content.decode()

    async def read_stream(self, path: str, chunk_size: int = 1 << 16) -> AsyncIterator[bytes]:
        """The file's bytes as they arrive, for files too large to hold."""
        async with self._s.gateway._stream(self._s._req("readFile", path=path), "*/*") as resp:
            async for chunk in resp.aiter_bytes(chunk_size):
                yield chunk

    async def list(self, dir: str = ".") -> list[FileEntry]:
        """The entries of folder ``dir`` (default the workspace root), sorted by name."""
        return [FileEntry.from_json(e) for e in (await self._s.gateway._json(self._s._req("listFiles", query={"dir": dir})))["entries"]]

    async def remove(self, path: str) -> None:
        await self._s.gateway._send(self._s._req("deleteFile", path=path))

    async def exists(self, path: str) -> bool:
        from ._errors import NotFoundError

        try:
            await self._s.gateway._send(self._s._req("readFile", path=path, headers={"Range": "bytes=0-0"}), accept="*/*")
        except NotFoundError:
            return False
        except ProblemError as e:
            if e.status == 416:  # an empty file
                return True
            raise
        return True


class AsyncPorts:
    """``sbx.ports``: servers listening on the sandbox's loopback, reached through the gateway."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._s = sandbox

    async def link(self, port: int, *, ttl_s: int | None = None, personal: bool | None = None) -> PortLink:
        """A link that works without a bearer token (``POST …/ports/{port}/links``)."""
        return PortLink.from_json(await self._s.gateway._json(self._s._req("createPortLink", port=port, body={"ttl_s": ttl_s, "personal": personal})))

    async def request(
        self,
        port: int,
        path: str = "",
        *,
        method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "GET",
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
    ) -> httpx.Response:
        """Sends a request to ``port`` inside the sandbox (``params`` is the server's query
        string) and answers its response as is, whatever its status."""
        op = {"GET": "previewPortGet", "POST": "previewPortPost", "PUT": "previewPortPut", "PATCH": "previewPortPatch", "DELETE": "previewPortDelete"}[method]
        req = request_for(op, {"session_id": self._s.id, "port": port, "path": path.lstrip("/")})
        h = {"Authorization": "Bearer " + self._s.gateway._token(), **(headers or {})}
        return await self._s.gateway._http.request(req.method, req.path, params=params, content=content, headers=h)


class AsyncSandbox:
    """A sandbox: one session of the gateway, E2B-style.

    Make one with ``await AsyncSandbox.create(...)``, reach an existing one with
    ``await AsyncSandbox.connect(id)``; ``async with`` kills it on exit. ``commands``,
    ``files`` and ``ports`` act in it; ``run_code`` runs code with rich results."""

    def __init__(self, gateway: AsyncGateway, info: Session, *, owns_gateway: bool = False) -> None:
        self.gateway = gateway
        self.info = info
        self.id = info.id
        self._profile_q = info.profile if info.id == "default" else None
        self._owns = owns_gateway
        self.commands = AsyncCommands(self)
        self.files = AsyncFiles(self)
        self.ports = AsyncPorts(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id} profile={self.info.profile!r}>"

    def _req(self, op: str, *, query: dict[str, Any] | None = None, **kw: Any) -> Request:
        params = {"session_id": self.id}
        for k in ("process_id", "context_name", "port", "path"):
            if k in kw:
                params[k] = kw.pop(k)
        q = {"profile": self._profile_q, **(query or {})}
        return request_for(op, params, query=q, **kw)

    @classmethod
    async def create(
        cls,
        profile: str | None = None,
        *,
        name: str | None = None,
        labels: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        timeout: int | None = None,
        on_expiry: Literal["destroy", "pause"] | None = None,
        cpu: float | None = None,
        memory_mb: int | None = None,
        from_snapshot: str | None = None,
        secrets: list[str] | None = None,
        gateway: AsyncGateway | None = None,
        **connection: Any,
    ) -> AsyncSandbox:
        """Creates a session (``POST /v1/sessions``). ``profile`` defaults to the gateway's
        default; ``env`` applies to every execution; ``timeout`` is the session's lifetime in
        seconds (then ``on_expiry``: destroy or pause); ``cpu``/``memory_mb`` size its sandbox
        within the profile's policy (the last five need issue 37's gateway); ``secrets`` binds
        stored secrets by name (programs see only placeholders). ``connection``
        (url, token, api_key, …) makes an AsyncGateway unless ``gateway`` is given."""
        g = gateway or AsyncGateway(**connection)
        try:
            info = await g.create_session(
                profile=profile, name=name, labels=labels, env=env, timeout_s=timeout, on_expiry=on_expiry,
                cpu=cpu, memory_mb=memory_mb, from_snapshot=from_snapshot, secrets=secrets,
            )
        except BaseException:
            if gateway is None:
                await g.aclose()
            raise
        return cls(g, info, owns_gateway=gateway is None)

    @classmethod
    async def connect(cls, session_id: str, *, profile: str | None = None, gateway: AsyncGateway | None = None, **connection: Any) -> AsyncSandbox:
        """An existing session (``default`` is the caller's default session of ``profile``)."""
        g = gateway or AsyncGateway(**connection)
        try:
            info = await g.get_session(session_id, profile=profile)
        except BaseException:
            if gateway is None:
                await g.aclose()
            raise
        s = cls(g, info, owns_gateway=gateway is None)
        if session_id == "default":
            s.id, s._profile_q = "default", profile or info.profile
        return s

    @classmethod
    async def list(cls, *, labels: dict[str, str] | None = None, gateway: AsyncGateway | None = None, **filters: Any) -> list[Session]:
        """The caller's sessions carrying every label of ``labels`` (and ``filters``: profile,
        status, conversation, all)."""
        conn = {k: filters.pop(k) for k in ("url", "token", "api_key") if k in filters}
        if gateway is not None:
            return await gateway.sessions(labels=labels, **filters)
        async with AsyncGateway(**conn) as g:
            return await g.sessions(labels=labels, **filters)

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.kill()

    async def close(self) -> None:
        """Closes the connection this sandbox made (the session stays)."""
        if self._owns:
            await self.gateway.aclose()

    async def kill(self) -> bool:
        """Destroys the session and its sandbox; False when it was already gone."""
        from ._errors import NotFoundError

        try:
            await self.gateway.delete_session(self.id)
            return True
        except NotFoundError:
            return False
        finally:
            await self.close()

    async def get_info(self) -> Session:
        """The session as it is now (``GET /v1/sessions/{id}``)."""
        self.info = Session.from_json(await self.gateway._json(self._req("getSession")))
        return self.info

    async def update(self, *, name: str | None = None, labels: dict[str, str | None] | None = None) -> Session:
        """Renames or relabels the session (``PATCH``, merged: a label set to None is
        removed; needs issue 37's gateway)."""
        self.info = await self.gateway.update_session(self.id, name=name, labels=labels)
        return self.info

    async def set_timeout(self, timeout: int) -> Session:
        """Sets the session's lifetime to ``timeout`` seconds from now, extending it (0: no
        lifetime; ``PATCH``, issue 37's gateway)."""
        self.info = await self.gateway.update_session(self.id, timeout_s=timeout)
        return self.info

    async def pause(self) -> Session:
        """Freezes the sandbox (files, processes and memory kept); see ``resume``."""
        self.info = Session.from_json(await self.gateway._json(self._req("pauseSession")))
        return self.info

    async def resume(self) -> Session:
        self.info = Session.from_json(await self.gateway._json(self._req("resumeSession")))
        return self.info

    async def snapshot(self, name: str | None = None) -> Snapshot:
        """Captures the workspace; ``AsyncSandbox.create(from_snapshot=snap.id)`` forks it."""
        return Snapshot.from_json(await self.gateway._json(self._req("createSnapshot", body={"name": name})))

    async def snapshots(self) -> List[Snapshot]:
        return await self.gateway.snapshots(session_id=self.id)

    async def run_code(
        self,
        code: str,
        *,
        language: str | None = None,
        context: str | None = None,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
        on_result: ResultCallback | None = None,
        envs: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> ExecutionResult:
        """Runs code (Python by default) and answers its result with ``results``, the rich
        results (MIME bundles: the last expression's value, displays, matplotlib figures);
        ``on_result`` gets each as it is produced. ``context`` names a stateful context
        (variables kept between runs); stateful profiles use ``default`` for Python."""
        body = {"code": code, "language": language, "context": context, "env": envs, "timeout_s": timeout}
        return await self.gateway._execute(self._req("runCode", body=body), on_stdout, on_stderr, on_result)

    async def create_code_context(self, name: str, *, language: Literal["python", "bash"] | None = None) -> Context:
        return Context.from_json(await self.gateway._json(self._req("createContext", body={"name": name, "language": language})))

    async def list_code_contexts(self) -> List[Context]:
        return [Context.from_json(c) for c in (await self.gateway._json(self._req("listContexts")))["contexts"]]

    async def restart_code_context(self, name: str) -> Context:
        return Context.from_json(await self.gateway._json(self._req("restartContext", context_name=name)))

    async def remove_code_context(self, name: str) -> None:
        await self.gateway._send(self._req("deleteContext", context_name=name))

    async def tasks(self, *, status: str | None = None) -> List[TaskInfo]:
        return await self.gateway.tasks(status=status, session_id=self.id)
