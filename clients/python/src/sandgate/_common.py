"""Helpers shared by the async client and the sync client generated from it."""

from __future__ import annotations

import asyncio
import base64
import email.utils
import json
import time
from typing import Any

import httpx

from ._errors import ProblemError, problem_error
from ._models import Event, OutputChunk
from ._sse import RawEvent

USER_AGENT = "sandgate-python/0.1.0"

# A stream sends a keepalive comment at least every 15 s: 45 s without a byte is a dropped
# connection, resumed from the last event id.
STREAM_READ_TIMEOUT_S = 45.0


async def asleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def retry_after_s(resp: httpx.Response) -> float | None:
    """Seconds of a Retry-After header (delta-seconds or an HTTP date), or None."""
    v = resp.headers.get("Retry-After")
    if not v:
        return None
    try:
        return max(0.0, float(v))
    except ValueError:
        pass
    try:
        dt = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    return max(0.0, float(dt.timestamp()) - time.time())


def problem_of(resp: httpx.Response) -> ProblemError:
    """The typed error of an answer of status >= 400 whose body has been read."""
    body: dict[str, Any] | None = None
    try:
        parsed = resp.json()
        if isinstance(parsed, dict):
            body = parsed
    except ValueError:
        pass
    if body is None or "status" not in body and "type" not in body:
        body = {"type": "about:blank", "title": resp.reason_phrase, "status": resp.status_code, "detail": resp.text[:1000]}
    return problem_error(body, resp.status_code, retry_after_s(resp))


def decode_event(raw: RawEvent) -> Event:
    """An SSE event of an execution stream as an Event; output chunks become OutputChunk."""
    try:
        data: Any = json.loads(raw.data)
    except ValueError:
        data = raw.data
    if raw.event in ("stdout", "stderr") and isinstance(data, dict):
        b = data.get("data", "")
        blob = base64.b64decode(b) if data.get("encoding") == "base64" else str(b).encode()
        data = OutputChunk(raw.event, int(data.get("offset", 0)), blob)  # type: ignore[arg-type]
    return Event(raw.event, data, raw.id)


def drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def matches(labels: dict[str, str] | None, want: dict[str, str] | None) -> bool:
    return all((labels or {}).get(k) == v for k, v in (want or {}).items())
