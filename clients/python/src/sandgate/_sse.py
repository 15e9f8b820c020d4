"""A server-sent events parser (WHATWG HTML §9.2.6), fed one line at a time."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RawEvent:
    event: str
    data: str
    id: str | None


class SSEParser:
    """Collects ``event:``, ``data:`` and ``id:`` lines; ``feed`` answers an event at each
    blank line that ends one with data. Comments (``: keepalive``) are ignored. ``last_id``
    is the last event id seen, to resume from with ``Last-Event-ID``."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        self.last_id: str | None = None

    def feed(self, line: str) -> RawEvent | None:
        line = line.rstrip("\r\n")
        if line == "":
            if not self._data:
                self._event, self._id = "", None
                return None
            ev = RawEvent(self._event or "message", "\n".join(self._data), self._id)
            if self._id is not None:
                self.last_id = self._id
            self._event, self._data, self._id = "", [], None
            return ev
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        return None
