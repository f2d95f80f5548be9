"""What an MCP tool call adds to the traversal it wraps.

    python -m tests.benchmarks.bench_mcp [--services N] [--days D] [--queries Q] [--seed S]

Loads a generated organisation (``edgeledger generate``: ``--services``, ``--days``) into a RocksDB
ledger, then asks ``--queries`` questions (``owners-of``, 2-hop ``dependents-of``,
``approvals-required-for`` and a 3-hop ``traverse``, at random anchors and past clocks) twice each,
side by side: once through ``QueryEngine.run`` directly, once as a tool call through the SDK's own
in-process client (``mcp.Client`` over ``streams.agents.server``), whose tools run the same engine
uncached. The tool call's time includes the protocol both ways, validating the arguments against
the shared parameter models, building the request, the worker-thread hop, and rendering the result
as structured content and text. Reported: p50/p99 of each, and of the per-question difference; the
target is a difference of at most 1 ms at p50. Each pair's two answers are checked to agree.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import orjson
from mcp import Client

from processors.queries import QueryEngine, QueryRequest
from processors.query_requests import request_from
from schemas.ontology import Ontology, default_ontology
from schemas.query_params import PARAMS
from schemas.slo import default_slo
from state.open import reading
from state.store import LedgerStore
from streams.agents.server import build_server
from streams.agents.tools import Toolbox
from streams.cli.generate import generate
from streams.cli.load import load_into
from streams.processor import wall_clock_micros
from tests.support.mcp import ListSink

QUESTIONS = (("owners-of", {}), ("dependents-of", {"depth": 2}), ("approvals-required-for", {}),
             ("traverse", {"edges": "owned_by:out,governed_by:out,requires:out"}))
CLOCKS = ("2026-01-15T12:00:00Z", "2026-02-15T12:00:00Z")
"""Past clocks: the answers cannot move while the benchmark runs."""
TARGET_MS = 1.0


def quantile(values: list[float], q: float) -> float:
    """The value at quantile ``q`` (nearest rank); differences may be negative, which an HDR histogram refuses."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Direct:
    """The service a Toolbox needs, answering through the uncached engine: the tool call wraps exactly
    the traversal the direct call runs."""

    engine: QueryEngine
    ontology: Ontology

    def query(self, request: QueryRequest) -> tuple[Any, str]:
        return self.engine.run(request), "bypass"


@dataclass
class Timings:
    direct: list[float] = field(default_factory=list)
    tool: list[float] = field(default_factory=list)
    added: list[float] = field(default_factory=list)


def ledger(services: int, days: int, seed: int, folder: Path) -> Path:
    with contextlib.redirect_stdout(io.StringIO()):  # generate prints its manifest
        generate(services=services, people=services, days=days, out=folder / "org", seed=seed, tenant="acme")
    state = folder / "ledger"
    load_into(state, [folder / "org" / "history.jsonl"], simulated_clock=True, ontology_path=None)
    return state


def anchors(store: LedgerStore) -> list[str]:
    found = set()
    for _, edge_id, _ in store.versions_in_tx_order("acme"):
        version = store.version("acme", edge_id)
        if version is not None and version.rel in ("owned_by", "depends_on"):
            found.add(version.src)
    return sorted(found)


async def measure(store: LedgerStore, questions: list[tuple[str, dict[str, Any]]], warmup: int) -> Timings:
    ontology = default_ontology()
    engine = QueryEngine(store, ontology)
    toolbox = Toolbox(Direct(engine, ontology), "acme", ListSink(), default_slo(), wall_clock_micros)
    timings = Timings()
    async with Client(build_server(toolbox)) as client:
        for number, (name, arguments) in enumerate(questions):
            params = PARAMS[name].model_validate(arguments)
            request = request_from(name, "acme", params, ontology, wall_clock_micros())
            started = time.perf_counter()
            direct = engine.run(request)
            between = time.perf_counter()
            called = await client.call_tool(name.replace("-", "_"), arguments)
            ended = time.perf_counter()
            if called.is_error or called.structured_content != orjson.loads(direct.model_dump_json()):
                raise SystemExit(f"the tool's answer differs from the engine's for {name} {arguments}")
            if number >= warmup:
                timings.direct.append((between - started) * 1000)
                timings.tool.append((ended - between) * 1000)
                timings.added.append(timings.tool[-1] - timings.direct[-1])
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_mcp", description=__doc__.split("\n")[0])
    parser.add_argument("--services", type=int, default=400)
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as scratch:
        state = ledger(args.services, args.days, args.seed, Path(scratch))
        with reading(state) as store:
            ids = anchors(store)
            questions = []
            for _ in range(args.queries + args.warmup):
                name, extra = rng.choice(QUESTIONS)
                clock = rng.choice(CLOCKS)
                questions.append((name, {"entity": rng.choice(ids), **extra, "valid_at": clock, "known_at": clock}))
            timings = anyio.run(measure, store, questions, args.warmup)
    added = quantile(timings.added, 0.5)
    print(f"{len(timings.added)} questions ({args.services} services, {args.days} days), wall clock per call, ms:")
    for label, values in (("QueryEngine.run", timings.direct), ("MCP tool call", timings.tool),
                          ("added by the tool call", timings.added)):
        print(f"  {label:<24} p50 {quantile(values, 0.5):.3f}  p99 {quantile(values, 0.99):.3f}")
    print(f"target: at most {TARGET_MS} ms added at p50: {'met' if added <= TARGET_MS else 'NOT MET'}")
    return 0 if added <= TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
