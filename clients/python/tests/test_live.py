"""Live tests against a real gateway (see conftest.py): each test makes what it uses and
destroys it."""

from __future__ import annotations

import io
import json
import os
import re
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import yaml

import sandgate
from sandgate._config import _parse_time
from sandgate.agent import AgentTools, AsyncAgentTools

from .conftest import require

CONTRACT = yaml.safe_load((Path(__file__).resolve().parents[3] / "openapi.yaml").read_text())


def contract_has(schema: str, prop: str) -> bool:
    return prop in CONTRACT["components"]["schemas"][schema].get("properties", {})


def test_session_labels_and_commands(gateway: sandgate.Gateway) -> None:
    tag = uuid.uuid4().hex
    with sandgate.Sandbox.create(name="py-labels", labels={"suite": tag}, gateway=gateway) as sbx:
        assert sbx.info.labels == {"suite": tag} and sbx.info.name == "py-labels"
        r = sbx.commands.run("echo hi; echo oops >&2; exit 3")
        assert (r.status, r.exit_code, r.stdout, r.stderr) == ("completed", 3, "hi\n", "oops\n")
        assert sbx.commands.run("pwd; echo $GREETING", cwd=".", envs={"GREETING": "hello"}).stdout.endswith("hello\n")
        assert [s.id for s in sandgate.Sandbox.list(labels={"suite": tag}, gateway=gateway)] == [sbx.id]
        assert sandgate.Sandbox.list(labels={"suite": tag + "-other"}, gateway=gateway) == []
        again = sandgate.Sandbox.connect(sbx.id, gateway=gateway)
        assert again.commands.run("echo same").stdout == "same\n"
    with pytest.raises(sandgate.NotFoundError):
        gateway.get_session(sbx.id)


def test_streamed_output_reaches_the_callbacks(sbx: sandgate.Sandbox) -> None:
    out: list[str] = []
    err: list[str] = []
    r = sbx.commands.run("for i in 1 2 3; do echo step $i; echo e$i >&2; done", on_stdout=out.append, on_stderr=err.append)
    assert "".join(out) == r.stdout == "step 1\nstep 2\nstep 3\n"
    assert "".join(err) == r.stderr == "e1\ne2\ne3\n"


class CutOnce(httpx.HTTPTransport):
    """Drops the first event stream's connection right after its first stdout event, as a
    network would, and records the requests that follow."""

    def __init__(self) -> None:
        super().__init__()
        self.cut = False
        self.last_id = ""  # the id of the last event delivered before the cut
        self.requests: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        resp = super().handle_request(request)
        if self.cut or request.headers.get("Accept") != "text/event-stream":
            return resp
        self.cut = True
        inner = resp.stream
        transport = self

        class Stream(httpx.SyncByteStream):
            def __iter__(self) -> Iterator[bytes]:
                seen = b""
                for chunk in inner:  # type: ignore[union-attr]
                    seen += chunk
                    i = seen.find(b"event: stdout")
                    if i >= 0 and b"\n\n" in seen[i:]:
                        delivered = seen[: seen.index(b"\n\n", i) + 2]
                        ids = re.findall(rb"^id: (\S+)", delivered.replace(b"\r", b""), re.M)
                        transport.last_id = ids[-1].decode() if ids else ""
                        yield delivered
                        raise httpx.ReadError("connection dropped (test)")
                    yield chunk
                    seen = b""

            def close(self) -> None:
                inner.close()  # type: ignore[union-attr]

        return httpx.Response(resp.status_code, headers=resp.headers, stream=Stream(), extensions=resp.extensions, request=request)


def test_a_dropped_stream_resumes_without_loss_or_repeat() -> None:
    require(bool(os.environ.get("SANDGATE_URL")), "SANDGATE_URL is not set")
    cut = CutOnce()
    with sandgate.Sandbox.create(gateway=sandgate.Gateway(transport=cut)) as sbx:
        out: list[str] = []
        r = sbx.commands.run("echo one; sleep 0.3; echo two; sleep 0.3; echo three", on_stdout=out.append)
        assert cut.cut
        assert "".join(out) == r.stdout == "one\ntwo\nthree\n"
        resumed = [q for q in cut.requests if q.url.path.endswith("/output")]
        assert cut.last_id and len(resumed) == 1 and resumed[0].headers["Last-Event-ID"] == cut.last_id


def test_code_keeps_state_and_gives_rich_results(sbx: sandgate.Sandbox) -> None:
    sbx.run_code("x = 41")
    r = sbx.run_code("x + 1")
    assert r.text == "42" and r.main_result is not None and r.main_result.is_main_result
    sbx.create_code_context("scratch")
    sbx.run_code("x = 'other'", context="scratch")
    assert sbx.run_code("x", context="scratch").text == "'other'"
    assert "scratch" in [c.name for c in sbx.list_code_contexts()]
    sbx.remove_code_context("scratch")
    r = sbx.run_code("echo from bash", language="bash")
    assert r.stdout == "from bash\n"


def test_matplotlib_chart_is_a_png(gateway: sandgate.Gateway, docker_profile: str) -> None:
    with sandgate.Sandbox.create(docker_profile, gateway=gateway) as sbx:
        live: list[sandgate.RichResult] = []
        r = sbx.run_code(
            "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()\n'done'",
            on_result=live.append,
        )
        pngs = [x.png for x in r.results if x.png]
        assert pngs and pngs[0].startswith(b"\x89PNG\r\n\x1a\n")
        assert any(x.png == pngs[0] for x in live), "the chart came live as a rich_result event too"
        assert r.text == "'done'"


def test_files_round_trip(sbx: sandgate.Sandbox) -> None:
    blob = bytes(range(256)) * 64
    w = sbx.files.write("data/blob.bin", blob)
    assert w.size == len(blob)
    assert sbx.files.read("data/blob.bin", format="bytes") == blob
    assert b"".join(sbx.files.read_stream("data/blob.bin", chunk_size=1000)) == blob
    sbx.files.write("notes/ü.txt", "héllo\n")
    assert sbx.files.read("notes/ü.txt") == "héllo\n"
    sbx.files.write("from-file.bin", io.BytesIO(blob))
    sbx.files.write("from-iter.txt", (f"line {i}\n".encode() for i in range(3)))
    assert sbx.files.read("from-iter.txt") == "line 0\nline 1\nline 2\n"
    assert sbx.commands.run("sha256sum from-file.bin data/blob.bin | cut -d' ' -f1 | uniq | wc -l").stdout.strip() == "1"
    names = {e.name: e for e in sbx.files.list()}
    assert names["data"].type == "dir" and names["from-file.bin"].size == len(blob)
    assert [e.name for e in sbx.files.list("notes")] == ["ü.txt"]
    assert sbx.files.exists("from-iter.txt")
    sbx.files.remove("from-iter.txt")
    assert not sbx.files.exists("from-iter.txt")
    with pytest.raises(sandgate.NotFoundError) as e:
        sbx.files.read("from-iter.txt")
    assert e.value.status == 404 and e.value.kind == "not-found"
    with pytest.raises(sandgate.PolicyError):
        sbx.files.read("../outside")


def test_background_process_wait_and_kill(sbx: sandgate.Sandbox) -> None:
    h = sbx.commands.run("for i in 1 2 3; do echo tick $i; done", background=True)
    assert isinstance(h, sandgate.Task) and h.background
    ticks: list[str] = []
    r = h.wait(on_stdout=ticks.append)
    assert r.stdout == "".join(ticks) == "tick 1\ntick 2\ntick 3\n" and r.exit_code == 0

    server = sbx.commands.run("sleep 300", background=True)
    assert server.id in [p.id for p in sbx.commands.list()]
    assert sbx.commands.get(server.id).status == "running"
    server.kill()
    r = server.wait()
    assert r.status == "cancelled"
    assert sbx.commands.get(server.id).status == "cancelled"


def test_task_stdin_and_cancel(sbx: sandgate.Sandbox) -> None:
    t = sbx.commands.run("cat", stdin_open=True)
    assert t.send_stdin("hello\n") == 6
    t.send_stdin(b"bytes\n", eof=True)
    r = t.wait()
    assert (r.exit_code, r.stdout) == (0, "hello\nbytes\n")
    assert t.info().status == "succeeded"

    t = sbx.commands.run("sleep 300", stdin_open=True)
    t.cancel()
    assert t.wait().status == "cancelled"
    assert sbx.gateway.task(t.id).info().status == "cancelled"
    assert t.id in [x.id for x in sbx.tasks()]


def test_problems_are_typed(gateway: sandgate.Gateway) -> None:
    with pytest.raises(sandgate.NotFoundError) as e:
        sandgate.Sandbox.connect("0" * 32, gateway=gateway)
    p = e.value
    assert (p.status, p.type, p.title) == (404, "https://sandgate.dev/problems/not-found", "Not found")
    assert p.detail and p.request_id
    with pytest.raises(sandgate.NotFoundError):
        gateway.task("0" * 32).info()
    with pytest.raises(sandgate.ValidationError) as v:
        gateway.create_session(labels={"x": "y" * 500})
    assert v.value.status == 400 and v.value.kind == "validation"
    with pytest.raises(sandgate.ConflictError):
        gateway.create_session(profile="oneshot")  # per_call profiles take runs, not sessions
    with pytest.raises(sandgate.AuthenticationError):
        sandgate.Gateway(token="not-a-token").me()


def test_one_off_run(gateway: sandgate.Gateway) -> None:
    out: list[str] = []
    r = gateway.run("echo once", profile="oneshot", on_stdout=out.append)
    assert r.stdout == "once\n" == "".join(out)
    assert gateway.run(code="print(6*7)", profile="oneshot").stdout == "42\n"


def test_retry_after_is_honoured() -> None:
    url = os.environ.get("SANDGATE_TEST_RATE_LIMITED_URL", "")
    require(bool(url), "no rate-limited gateway (SANDGATE_TEST_RATE_LIMITED_URL): the Go test starts one")
    tok = os.environ["SANDGATE_TEST_RATE_LIMITED_TOKEN"]
    # The gateway grants a burst of 2 and one request every 2 s.
    with sandgate.Gateway(url, token=tok, max_retries=0) as impatient:
        with pytest.raises(sandgate.QuotaError) as e:
            for _ in range(20):
                impatient.me()
        assert e.value.status == 429 and e.value.retry_after and e.value.retry_after > 0
    with sandgate.Gateway(url, token=tok) as patient:
        for _ in range(3):
            assert patient.me()["subject"] == "py-limited"


def test_pause_resume_and_snapshots(gateway: sandgate.Gateway, docker_profile: str) -> None:
    with sandgate.Sandbox.create(docker_profile, gateway=gateway) as sbx:
        sbx.files.write("keep.txt", "kept\n")
        assert sbx.pause().state == "paused"
        with pytest.raises(sandgate.PausedError):
            sbx.commands.run("true")
        assert sbx.resume().state == "running"
        snap = sbx.snapshot("py-snap")
        assert snap.session_id == sbx.id and snap.kind == "user"
        assert snap.id in [s.id for s in sbx.snapshots()]
        with sandgate.Sandbox.create(from_snapshot=snap.id, gateway=gateway) as fork:
            assert fork.files.read("keep.txt") == "kept\n"
        gateway.delete_snapshot(snap.id)
        with pytest.raises(sandgate.NotFoundError):
            gateway.get_snapshot(snap.id)


@pytest.mark.skipif(not contract_has("CreateSessionRequest", "env"), reason="needs the session options of issue 37 (branch ergo-api)")
def test_env_and_timeout_at_create(gateway: sandgate.Gateway) -> None:
    with sandgate.Sandbox.create(env={"TEAM": "ml"}, timeout=600, gateway=gateway) as sbx:
        assert sbx.info.env_names == ["TEAM"] and sbx.info.expires_at and sbx.info.on_expiry == "destroy"
        assert "ml" not in str(sbx.get_info().raw), "values are never shown"
        assert sbx.commands.run("echo $TEAM").stdout == "ml\n"
        assert sbx.commands.run("echo $TEAM", envs={"TEAM": "ops"}).stdout == "ops\n"
        assert sbx.run_code("import os; os.environ['TEAM']").text == "'ml'"


@pytest.mark.skipif(not contract_has("CreateSessionRequest", "secrets"), reason="needs issue 39's secrets")
def test_secrets_are_write_only_and_bound_by_name(gateway: sandgate.Gateway) -> None:
    name = "py-" + uuid.uuid4().hex[:8]
    made = gateway.set_secret(name, "sk-py-NEVER-SHOWN", ["api.example.com"])
    assert made["name"] == name and made["hosts"] == ["api.example.com"] and "value" not in made
    assert [s["name"] for s in gateway.secrets() if s["name"] == name] == [name]
    assert "NEVER-SHOWN" not in json.dumps(gateway.secrets())
    with pytest.raises(sandgate.NotFoundError):
        gateway.create_session(secrets=["py-nosuch"])
    sbx = sandgate.Sandbox.create(secrets=[name], gateway=gateway)
    try:
        assert sbx.info.secrets == [name]
        with pytest.raises(sandgate.PolicyError):  # a local sandbox has no egress proxy: refused
            sbx.commands.run("env")
    finally:
        sbx.kill()
    gateway.delete_secret(name)
    with pytest.raises(sandgate.NotFoundError):
        gateway.delete_secret(name)


@pytest.mark.skipif(not any(o.get("patch", {}).get("operationId") == "updateSession" for o in CONTRACT["paths"].values()),
                    reason="needs PATCH /v1/sessions/{id} of issue 37 (branch ergo-api)")
def test_relabel(sbx: sandgate.Sandbox) -> None:
    tag = uuid.uuid4().hex
    first = sbx.info.labels
    assert sbx.update(name="renamed", labels={"suite": tag}).labels == {**first, "suite": tag}
    assert [s.name for s in sandgate.Sandbox.list(labels={"suite": tag}, gateway=sbx.gateway)] == ["renamed"]
    assert sbx.update(labels={k: None for k in first}).labels == {"suite": tag}
    assert sbx.set_timeout(3600).expires_at
    assert sbx.set_timeout(0).expires_at is None
    sbx.commands.run("true")
    assert {t.session_id for t in sbx.gateway.tasks(labels={"suite": tag})} == {sbx.id}


def test_agent_tools_openai_and_anthropic(gateway: sandgate.Gateway, sbx: sandgate.Sandbox) -> None:
    with AgentTools(gateway) as tools:
        openai = tools.openai_tools()
        names = {t["function"]["name"] for t in openai}
        assert {"run_code", "run_command", "write_sandbox_file", "read_sandbox_file"} <= names
        assert all(t["type"] == "function" and "parameters" in t["function"] for t in openai)
        assert {t["name"] for t in tools.anthropic_tools()} == names
        assert tools.guidance()
        # A model's OpenAI tool call, as the SDK returns it (arguments are JSON text).
        msgs = tools.execute_openai([{
            "id": "call_1", "type": "function",
            "function": {"name": "run_command", "arguments": f'{{"command": "echo agent > a.txt; cat a.txt", "sandbox_session_id": "{sbx.id}"}}'},
        }])
        assert msgs[0]["role"] == "tool" and msgs[0]["tool_call_id"] == "call_1" and "agent" in msgs[0]["content"]
        assert sbx.files.read("a.txt") == "agent\n"
        blocks = tools.execute_anthropic([
            {"type": "text", "text": "Let me read it."},
            {"type": "tool_use", "id": "toolu_1", "name": "read_sandbox_file", "input": {"path": "a.txt", "sandbox_session_id": sbx.id}},
            {"type": "tool_use", "id": "toolu_2", "name": "read_sandbox_file", "input": {"path": "missing.txt", "sandbox_session_id": sbx.id}},
        ])
        assert [b["tool_use_id"] for b in blocks] == ["toolu_1", "toolu_2"]
        assert "agent" in blocks[0]["content"] and not blocks[0]["is_error"]
        assert blocks[1]["is_error"]
        r = tools.call("run_code", {"code": "print(6*7)", "sandbox_session_id": sbx.id})
        assert not r.is_error and r.structured and "42" in str(r.structured.get("stdout"))


@pytest.mark.asyncio
async def test_async_sandbox() -> None:
    require(bool(os.environ.get("SANDGATE_URL")), "SANDGATE_URL is not set")
    async with await sandgate.AsyncSandbox.create(labels={"async": "yes"}) as sbx:
        got: list[str] = []

        async def collect(s: str) -> None:
            got.append(s)

        r = await sbx.commands.run("echo a; echo b", on_stdout=collect)
        assert r.stdout == "a\nb\n" == "".join(got)
        await sbx.files.write("x.bin", b"\x00\xff")
        assert await sbx.files.read("x.bin", format="bytes") == b"\x00\xff"
        assert [c async for c in sbx.files.read_stream("x.bin")] == [b"\x00\xff"]
        assert (await sbx.run_code("1 + 1")).text == "2"
        h = await sbx.commands.run("echo bg", background=True)
        assert (await h.wait()).stdout == "bg\n"
        events = [e.type async for e in h.follow()]
        assert events[-1] == "result" and "stdout" in events
        assert sbx.id in [s.id for s in await sandgate.AsyncSandbox.list(labels={"async": "yes"}, gateway=sbx.gateway)]
        async with AsyncAgentTools(sbx.gateway) as tools:
            r2 = await tools.call("run_command", {"command": "echo via-mcp", "sandbox_session_id": sbx.id})
            assert "via-mcp" in r2.text
    with pytest.raises(sandgate.NotFoundError):
        await sandgate.AsyncSandbox.connect(sbx.id)


def test_threads_share_a_gateway(gateway: sandgate.Gateway, sbx: sandgate.Sandbox) -> None:
    results: list[Any] = []

    def work(i: int) -> None:
        results.append(sbx.commands.run(f"echo {i}").stdout)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [f"{i}\n" for i in range(4)]


def test_cached_login_is_used_and_refreshed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The token `sandgate login` caches is used without SANDGATE_TOKEN, refreshed with its
    refresh token once expired, and saved back for the user alone."""
    issuer = os.environ.get("SANDGATE_TEST_ISSUER", "")
    require(bool(issuer), "no development issuer (SANDGATE_TEST_ISSUER): the Go test names its gateway's")
    client_id = os.environ["SANDGATE_TEST_CLIENT_ID"]
    url = os.environ["SANDGATE_URL"]
    # The device flow, as `sandgate login --flow device` and a user at the form do it.
    dev = httpx.post(issuer + "/device_authorization", data={"client_id": client_id, "scope": "openid offline_access"}).json()
    approve = httpx.post(issuer + "/device", data={"user_code": dev["user_code"], "sub": "py-cached", "groups": "dev"})
    assert approve.status_code == 200
    tok = httpx.post(issuer + "/token", data={
        "grant_type": "urn:ietf:params:oauth:grant-type:device_code", "device_code": dev["device_code"], "client_id": client_id,
    }).json()
    assert tok.get("refresh_token"), tok
    cache = tmp_path / "sandgate" / "credentials.json"
    cache.parent.mkdir(mode=0o700)
    cache.write_text(json.dumps({"current": url, "servers": {url: {
        "issuer": issuer, "client_id": client_id, "token_url": issuer + "/token", "scopes": ["openid", "offline_access"],
        "bearer": tok["id_token"], "refresh_token": tok["refresh_token"], "expiry": "2020-01-01T00:00:00Z", "subject": "py-cached",
    }}}))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("SANDGATE_TOKEN")
    monkeypatch.delenv("SANDGATE_URL")  # the gateway signed in to last
    with sandgate.Gateway() as g:
        assert g.url == url
        assert g.me()["subject"] == "py-cached"
    saved = json.loads(cache.read_text())["servers"][url]
    assert _parse_time(saved["expiry"]) > time.time() + 3600, "the refreshed token's expiry is saved"
    assert saved["refresh_token"] and saved["bearer"]
    assert cache.stat().st_mode & 0o777 == 0o600
    # Both variables set: refused, as the CLI refuses it.
    monkeypatch.setenv("SANDGATE_TOKEN", "a")
    monkeypatch.setenv("SANDGATE_API_KEY", "sgk_b")
    with pytest.raises(sandgate.ConfigurationError):
        sandgate.Gateway()


def test_ports_and_links(sbx: sandgate.Sandbox) -> None:
    """A server the sandbox runs, reached through the gateway and through a link."""
    import socket

    with socket.socket() as sock:  # a free port: local sandboxes share the host's network
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    sbx.files.write("site/hello.txt", "hello from the sandbox\n")
    server = sbx.commands.run(f"python3 -m http.server {port} --bind 127.0.0.1 --directory site", background=True)
    try:
        resp = None
        for _ in range(240):  # until it listens (at most a minute)
            resp = sbx.ports.request(port, "hello.txt")
            if resp.status_code == 200:
                break
            time.sleep(0.25)
        assert resp is not None and resp.status_code == 200 and resp.text == "hello from the sandbox\n"
        link = sbx.ports.link(port, ttl_s=600)
        assert link.port == port and link.url
        via = sbx.gateway.open_preview_link(link.url.rstrip("/") + "/hello.txt")
        assert via.status_code == 200 and via.text == "hello from the sandbox\n"
    finally:
        server.kill()
