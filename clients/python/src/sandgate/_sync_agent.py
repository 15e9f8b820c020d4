"""Agent tools for a synchronous agent loop, GENERATED from _async_agent.py by scripts/unasync.py:
do not edit; edit that file and run the script."""

from __future__ import annotations

import json
from typing import Any, Iterable, Literal

import httpx

from ._sync_client import Gateway
from ._common import problem_of
from ._errors import SandgateError
from ._sse import SSEParser
from .agent_types import ToolResult, _field

MCP_PROTOCOL_VERSION = "2025-06-18"


class AgentTools:
    """The gateway's sandbox tools (``GET /v1/agent/tools``) for a function-calling model, and
    the execution of the model's tool calls.

    ``openai_tools()`` / ``anthropic_tools()`` answer the definitions in each vendor's shape,
    ``guidance()`` the text for the system prompt. ``call(name, arguments)`` runs one tool as
    the gateway's MCP server (``/mcp``) does, with the same results, limits and error
    convention (a sandbox failure is a result with ``is_error``, not an exception);
    ``execute_openai`` / ``execute_anthropic`` run a model's tool calls and answer the
    messages or blocks to send back."""

    def __init__(self, gateway: Gateway | None = None, **connection: Any) -> None:
        self.gateway = gateway or Gateway(**connection)
        self._owns = gateway is None
        self._defs: dict[str, dict[str, Any]] = {}
        self._mcp_session: str | None = None
        self._next_id = 0

    def __enter__(self) -> AgentTools:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._mcp_session:
            try:
                self.gateway._http.request("DELETE", "/mcp", headers=self._headers())
            except httpx.HTTPError:
                pass
            self._mcp_session = None
        if self._owns:
            self.gateway.close()

    def definitions(self, format: Literal["mcp", "openai", "anthropic"] = "mcp") -> dict[str, Any]:
        """The whole answer of ``GET /v1/agent/tools?format=…`` (fetched once per format)."""
        if format not in self._defs:
            self._defs[format] = self.gateway.agent_tools(format)
        return self._defs[format]

    def openai_tools(self) -> list[dict[str, Any]]:
        """``[{"type": "function", "function": {name, description, parameters}}, …]`` for
        OpenAI's ``tools=``."""
        return list((self.definitions("openai"))["tools"])

    def anthropic_tools(self) -> list[dict[str, Any]]:
        """``[{name, description, input_schema}, …]`` for Anthropic's ``tools=``."""
        return list((self.definitions("anthropic"))["tools"])

    def guidance(self) -> str:
        """Usage guidance for the system prompt (the profiles the caller may use, the limits)."""
        return str((self.definitions("mcp"))["guidance"])

    # -- MCP ---------------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        h = {
            "Authorization": "Bearer " + self.gateway._token(),
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": MCP_PROTOCOL_VERSION,
        }
        if self._mcp_session:
            h["Mcp-Session-Id"] = self._mcp_session
        return h

    def _rpc(self, method: str, params: dict[str, Any] | None, notify: bool = False) -> Any:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        if not notify:
            self._next_id += 1
            msg["id"] = self._next_id
        with self.gateway._http.stream("POST", "/mcp", content=json.dumps(msg).encode(), headers=self._headers(),
                                             timeout=httpx.Timeout(None, connect=30.0)) as resp:
            if resp.status_code >= 400:
                resp.read()
                raise problem_of(resp)
            if method == "initialize":
                self._mcp_session = resp.headers.get("Mcp-Session-Id")
            if notify:
                return None
            answer: dict[str, Any] | None = None
            if resp.headers.get("Content-Type", "").startswith("text/event-stream"):
                parser = SSEParser()
                for line in resp.iter_lines():
                    raw = parser.feed(line)
                    if raw is None:
                        continue
                    m = json.loads(raw.data)
                    if isinstance(m, dict) and m.get("id") == msg["id"] and ("result" in m or "error" in m):
                        answer = m
                        break
            else:
                resp.read()
                answer = resp.json()
        if answer is None:
            raise SandgateError(f"/mcp answered no response to {method}")
        if "error" in answer:
            raise SandgateError(f"/mcp {method}: {answer['error'].get('message')}")
        return answer["result"]

    def _ensure_session(self) -> None:
        if self._mcp_session is not None:
            return
        self._rpc(
            "initialize",
            {"protocolVersion": MCP_PROTOCOL_VERSION, "capabilities": {}, "clientInfo": {"name": "sandgate-python", "version": "0.1.0"}},
        )
        self._rpc("notifications/initialized", None, notify=True)

    def call(self, name: str, arguments: dict[str, Any] | str | None = None) -> ToolResult:
        """Runs tool ``name`` with ``arguments`` (a dict, or the JSON text a model wrote)."""
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments or {})
        self._ensure_session()
        try:
            result = self._rpc("tools/call", {"name": name, "arguments": args})
        except SandgateError as e:
            if getattr(e, "status", None) != 404:
                raise
            self._mcp_session = None  # the MCP session expired or its replica went away
            self._ensure_session()
            result = self._rpc("tools/call", {"name": name, "arguments": args})
        return ToolResult.from_mcp(name, result)

    def execute_openai(self, tool_calls: Iterable[Any]) -> list[dict[str, Any]]:
        """Runs an OpenAI assistant message's ``tool_calls`` (dicts or SDK objects) and answers
        the ``{"role": "tool", "tool_call_id", "content"}`` messages to append."""
        out = []
        for tc in tool_calls:
            fn = _field(tc, "function")
            r = self.call(str(_field(fn, "name")), _field(fn, "arguments") or "{}")
            out.append({"role": "tool", "tool_call_id": _field(tc, "id"), "content": r.text})
        return out

    def execute_anthropic(self, content: Iterable[Any]) -> list[dict[str, Any]]:
        """Runs the ``tool_use`` blocks of an Anthropic message's ``content`` and answers the
        ``tool_result`` blocks for the next user message."""
        out = []
        for block in content:
            if _field(block, "type") != "tool_use":
                continue
            r = self.call(str(_field(block, "name")), _field(block, "input") or {})
            out.append({"type": "tool_result", "tool_use_id": _field(block, "id"), "content": r.text, "is_error": r.is_error})
        return out
