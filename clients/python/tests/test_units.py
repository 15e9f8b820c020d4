"""The parts that need no gateway: the SSE parser, request building, Retry-After, credentials."""

from __future__ import annotations

import email.utils
import time

import httpx
import pytest

import sandgate
from sandgate import _config
from sandgate._common import decode_event, retry_after_s
from sandgate._ops import request_for
from sandgate._sse import SSEParser


def feed(p: SSEParser, text: str) -> list[tuple[str, str, str | None]]:
    out = []
    for line in text.splitlines():
        ev = p.feed(line)
        if ev:
            out.append((ev.event, ev.data, ev.id))
    return out


def test_sse_events_ids_and_comments() -> None:
    p = SSEParser()
    got = feed(p, ": keepalive\n\nevent: task\ndata: {\"id\":\"t\"}\n\nid: 4-0\r\nevent: stdout\r\ndata: {\"offset\":0,\r\ndata: \"data\":\"x\"}\r\n\r\ndata:plain\n\n")
    assert got == [("task", '{"id":"t"}', None), ("stdout", '{"offset":0,\n"data":"x"}', "4-0"), ("message", "plain", None)]
    assert p.last_id == "4-0"


def test_output_chunks_decode_text_and_base64() -> None:
    from sandgate._sse import RawEvent

    ev = decode_event(RawEvent("stderr", '{"offset":3,"data":"/w==","encoding":"base64"}', "0-4"))
    assert isinstance(ev.data, sandgate.OutputChunk) and (ev.data.stream, ev.data.offset, ev.data.data) == ("stderr", 3, b"\xff")
    assert decode_event(RawEvent("stdout", '{"offset":0,"data":"é","encoding":"utf-8"}', "2-0")).data.text == "é"


def test_paths_are_escaped_and_fields_checked() -> None:
    r = request_for("readFile", {"session_id": "s", "path": "a/../b c/ü"})
    assert r.path == "/v1/sessions/s/files/a/%2E%2E/b%20c/%C3%BC"
    assert request_for("getTask", {"task_id": "a/b"}).path == "/v1/tasks/a%2Fb"
    with pytest.raises(ValueError, match="no body field"):
        request_for("createSession", body={"nmae": "typo"})
    with pytest.raises(ValueError, match="no query parameter"):
        request_for("listSessions", query={"lable": "x"})
    assert request_for("listSessions", query=[("label", "a=b"), ("label", "c=d"), ("status", None)]).params == [("label", "a=b"), ("label", "c=d")]
    assert request_for("createSession", body={"name": None, "labels": {"a": "b"}}).json == {"labels": {"a": "b"}}


def test_retry_after_seconds_and_dates() -> None:
    def resp(v: str) -> httpx.Response:
        return httpx.Response(429, headers={"Retry-After": v})

    assert retry_after_s(resp("3")) == 3.0
    later = email.utils.formatdate(time.time() + 120, usegmt=True)
    r = retry_after_s(resp(later))
    assert r is not None and 100 < r <= 121
    assert retry_after_s(resp("soon")) is None
    assert retry_after_s(httpx.Response(429)) is None


def test_credentials_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("SANDGATE_URL", raising=False)
    monkeypatch.delenv("SANDGATE_TOKEN", raising=False)
    monkeypatch.delenv("SANDGATE_API_KEY", raising=False)
    c = _config.resolve()
    assert c.url == "http://localhost:8080"
    with pytest.raises(sandgate.ConfigurationError, match="sandgate login"):
        c.token()
    monkeypatch.setenv("SANDGATE_URL", "https://sandgate.example/")
    monkeypatch.setenv("SANDGATE_API_KEY", "sgk_secret")
    c = _config.resolve()
    assert (c.url, c.token()) == ("https://sandgate.example", "sgk_secret")
    assert _config.resolve(token="explicit").token() == "explicit"
    monkeypatch.setenv("SANDGATE_TOKEN", "tok")
    with pytest.raises(sandgate.ConfigurationError, match="both"):
        _config.resolve()
    with pytest.raises(sandgate.ConfigurationError, match="sgk_"):
        _config.resolve(api_key="not-a-key")
    with pytest.raises(sandgate.ConfigurationError, match="absolute"):
        _config.resolve(url="localhost:8080")
