"""MCP clients for tests: in-process over the SDK's memory transport, and an app served on a free port for
the streamable HTTP transport."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI

from schemas.ontology import default_ontology
from schemas.slo import default_slo
from state.kv import MemoryKV
from streams.agents.tools import Toolbox
from streams.api.http import LedgerService
from streams.metrics import LedgerMetrics
from tests.support.wait import wait_until


class ListSink:
    """A trace sink that keeps what it is given."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def record(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def close(self) -> None:
        return None


@contextmanager
def toolbox(state: Path, tenant: str, now: int, sink: ListSink | None = None) -> Iterator[Toolbox]:
    """The tools over ``state`` for ``tenant``, with the wall clock standing at ``now``."""
    service = LedgerService(state, MemoryKV(), default_ontology(), 0, 1_000, 1_000, default_slo(), LedgerMetrics(),
                            lambda: now)
    try:
        yield Toolbox(service, tenant, sink or ListSink(), default_slo(), lambda: now)
    finally:
        service.close()


@contextmanager
def served(app: FastAPI) -> Iterator[int]:
    """``app`` on a free loopback port, its lifespan run, until the block ends; the port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, "the server to start")
        yield port
    finally:
        server.should_exit = True
        thread.join(10)
