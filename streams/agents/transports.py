"""Where the MCP server listens: standard streams (``edgeledger mcp``), or ``/mcp`` beside the HTTP API in
``edgeledger serve`` (streamable HTTP, stateless with JSON responses: every tool is one request and one
answer, so no session is kept between calls and a client may come and go)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from fastapi import FastAPI
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings

from schemas.ontology import Ontology
from schemas.slo import SloConfig
from state.kv import MemoryKV
from streams.agents.server import build_server
from streams.agents.tools import Toolbox
from streams.api.traces import TraceSink, default_trace_sink
from streams.metrics import LedgerMetrics
from streams.processor import wall_clock_micros

MCP_PATH = "/mcp"


def mount_mcp(app: FastAPI, toolbox: Toolbox, allowed_hosts: list[str] | None) -> Callable[
        [], AbstractAsyncContextManager[None]]:
    """Add ``/mcp`` to ``app``; the returned context runs its session manager (enter it in the app's lifespan).
    ``allowed_hosts`` (``host:port`` patterns) guards against DNS rebinding; None allows any Host header."""
    server = build_server(toolbox)
    security = TransportSecuritySettings(enable_dns_rebinding_protection=allowed_hosts is not None,
                                         allowed_hosts=allowed_hosts or [], allowed_origins=[
                                             f"http://{host}" for host in allowed_hosts or []])
    mcp_app = server.streamable_http_app(streamable_http_path=MCP_PATH, stateless_http=True, json_response=True,
                                         transport_security=security)
    app.router.routes.extend(mcp_app.routes)
    return server.session_manager.run


def run_stdio(state_dir: Path, tenant: str, ontology: Ontology, slo: SloConfig,
              trace_sink: TraceSink | None = None) -> None:
    """``edgeledger mcp``: the tools for ``tenant`` over standard input and output until the client leaves.
    It reads the ledger as ``serve`` does (a secondary, beside any writer); traces go where ``serve``'s do
    without a broker, to the file beside the state that ``edgeledger load`` applies."""
    from streams.api.http import LedgerService

    service = LedgerService(state_dir, MemoryKV(), ontology, 0.25, 10_000, 2_000, slo, LedgerMetrics(),
                            wall_clock_micros)
    sink = trace_sink or default_trace_sink(state_dir, None, None)
    toolbox = Toolbox(service, tenant, sink, slo, wall_clock_micros)
    server = build_server(toolbox)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    try:
        anyio.run(main)
    finally:
        service.close()
        sink.close()


@asynccontextmanager
async def nothing() -> AsyncIterator[None]:
    yield


def mcp_lifespan(run: Callable[[], AbstractAsyncContextManager[None]] | None) -> AbstractAsyncContextManager[Any]:
    return run() if run is not None else nothing()
