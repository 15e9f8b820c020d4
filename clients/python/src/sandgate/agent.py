"""Agent tools: the gateway's sandbox tools as OpenAI or Anthropic tool definitions, and the
execution of a model's tool calls (through the gateway's MCP server, so results match what
an MCP client gets).

    from sandgate.agent import AgentTools

    with AgentTools() as tools:
        resp = openai.chat.completions.create(model=…, messages=msgs, tools=tools.openai_tools())
        msgs += tools.execute_openai(resp.choices[0].message.tool_calls or [])
"""

from ._async_agent import MCP_PROTOCOL_VERSION, AsyncAgentTools
from ._sync_agent import AgentTools
from .agent_types import ToolResult

__all__ = ["MCP_PROTOCOL_VERSION", "AgentTools", "AsyncAgentTools", "ToolResult"]
