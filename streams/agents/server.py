"""The MCP server over a ``Toolbox``: the SDK's low-level server, so that each tool's input schema is
the one ``streams.agents.tools`` generates rather than one inferred from a Python signature.

A call runs in a worker thread (the ledger's reads block), and comes back as the contract's JSON in
``structuredContent`` with its text rendering as content; a bad call comes back as a tool error
(``isError``) with the reason, never as a protocol error or a crash.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server

from streams.agents.tools import Answer, Toolbox, ToolRefused

INSTRUCTIONS = (
    "Bounded, bi-temporal relationship questions over one organisation's knowledge graph (this server's tenant). "
    "Every tool takes valid_at (when in the world) and known_at (as the ledger believed then); both default to "
    "now. Cite the edge ids of the paths. `unknown` is not `none`: the anchor did not resolve, a ceiling was hit "
    "or a source was stale. Record an answer you act on with record_trace.")
log = logging.getLogger(__name__)


def build_server(toolbox: Toolbox) -> Server[Any]:
    """The server: ``tools/list`` and ``tools/call`` over ``toolbox``."""
    listed = [types.Tool(name=tool.name, description=tool.description, input_schema=tool.input_schema)
              for tool in toolbox.tools.values()]

    async def list_tools(_: Any, __: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(_: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            answer: Answer = await anyio.to_thread.run_sync(toolbox.call, params.name, params.arguments)
        except ToolRefused as refused:
            return types.CallToolResult(content=[types.TextContent(text=str(refused))], is_error=True)
        except Exception as error:  # a bug must not end the session: the model is told, the log keeps it
            log.exception("tool %s failed", params.name)
            return types.CallToolResult(content=[types.TextContent(text=f"internal error: {error}")], is_error=True)
        return types.CallToolResult(content=[types.TextContent(text=answer.text)], structured_content=answer.structured)

    def input_schema(name: str) -> dict[str, Any] | None:
        tool = toolbox.tools.get(name)
        return tool.input_schema if tool is not None else None

    return Server("edgeledger", version="0.1.0", instructions=INSTRUCTIONS, get_tool_input_schema=input_schema,
                  on_list_tools=list_tools, on_call_tool=call_tool)
