"""Types shared by the sync and async agent tools helpers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


def _field(obj: Any, name: str) -> Any:
    """obj[name] of a dict, obj.name of an SDK object."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


@dataclass(frozen=True)
class ToolResult:
    """What a tool gave: ``text`` (to hand the model), ``structured`` (its JSON result, the
    seed's shapes, e.g. ``{"stdout", "stderr", "exit_code", "sandbox_session_id"}``) and
    ``is_error`` (a sandbox failure, ``{"error": …}``, which the model should read)."""

    name: str
    text: str
    is_error: bool = False
    structured: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_mcp(cls, name: str, result: dict[str, Any]) -> ToolResult:
        texts = [c.get("text", "") for c in result.get("content") or [] if c.get("type") == "text"]
        structured = result.get("structuredContent")
        text = "\n".join(texts) if texts else json.dumps(structured)
        return cls(name, text, bool(result.get("isError")), structured, result)
