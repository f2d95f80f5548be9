"""The traversal cache under a mixed workload: hit rate, invalidation fan-out, hit and miss latency.

    python -m tests.benchmarks.bench_cache [--quick] [--uniform] [--events N] [--entities N]
        [--rounds R] [--writes W] [--queries Q] [--seed S]

Loads a generated history (``tests/support/generate.py``: ``--events`` change events over
``--entities`` entities) into a RocksDB ledger, then alternates, ``--rounds`` times:

1. ``--writes`` further change events from the same generator, applied through the ledger processor
   and committed (what a worker does);
2. ``--queries`` current-time questions (``owners-of``, 3-hop ``dependents-of``,
   ``approvals-required-for``, 1:2:1) through ``CachedQueryEngine`` over a RocksDB ``CacheStore``,
   as ``serve`` wires them. Anchors are drawn Zipf-like over the services (agents ask about a few
   popular ones far more often), through a fixed random permutation so popularity is unrelated to
   the generator's dependency hubs; ``--uniform`` draws them uniformly instead (the worst case
   for a cache: the working set is every service).

The first query after a write round makes the engine catch up: it reads the versions appended or
closed since (``state.changes.versions_changed_since``) and invalidates exactly the entries whose
read set includes either end of one. Reported: hit rate (overall and after the first round),
entries invalidated per round, *fan-out* per changed version (entries it invalidated, zeros
included: mean, p99, max), and latency p50/p99 of hits and misses. Every 25th hit is checked
against an uncached answer to the same request; the exit status is 1 if one differs.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from processors.batch import BatchRunner
from processors.cache import CachedQueryEngine
from processors.queries import QueryEngine, QueryRequest
from schemas.cache import CacheInvalidation
from schemas.ontology import default_ontology
from state.cache_store import CacheStore
from state.changes import versions_changed_since
from state.kv import RocksKV
from tests.benchmarks.sizes import fill_sizes
from tests.benchmarks.stats import percentile
from tests.support.generate import generate_events
from tests.support.harness import Ledger

TENANT = "acme"
QUERY_MIX = (("owners-of", 1), ("dependents-of", 3), ("dependents-of", 3), ("approvals-required-for", 1))
FULL = {"events": 200_000, "entities": 20_000, "rounds": 20, "writes": 500, "queries": 2_000}
QUICK = {"events": 20_000, "entities": 2_000, "rounds": 5, "writes": 200, "queries": 400}


@dataclass
class Figures:
    latencies: dict[str, list[float]] = field(default_factory=lambda: {"hit": [], "miss": [], "bypass": []})
    per_round: list[tuple[int, int, int, int]] = field(default_factory=list)
    """(changed versions, entries invalidated, hits, queries) per round."""
    fan_out: list[int] = field(default_factory=list)
    checked: int = 0
    mismatches: int = 0
    load_s: float = 0.0


def draw_anchor(rng: random.Random, order: list[int], uniform: bool) -> str:
    rank = rng.randrange(len(order)) if uniform else min(int(rng.paretovariate(1.1)) - 1, len(order) - 1)
    return f"Service:cmdb:S{order[rank]}"


def run(args: argparse.Namespace) -> Figures:
    figures = Figures()
    rng = random.Random(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="edgeledger-bench-cache-"))
    try:
        ledger = Ledger(kv=RocksKV(workdir / "ledger"))
        events = generate_events(args.events + args.rounds * args.writes, args.entities, seed=args.seed,
                                 tenant=TENANT)
        runner = BatchRunner(ledger.processor, ledger.store, ledger.store.commit, batch_size=2_000)
        began = time.perf_counter()
        runner.run(islice(events, args.events + args.events // 100))  # the history, with its clock events
        figures.load_s = time.perf_counter() - began

        ontology = default_ontology()
        records: list[CacheInvalidation] = []
        engine = CachedQueryEngine(
            ledger.store, ontology, CacheStore(RocksKV(workdir / "cache")), ledger.store.last_tx,
            lambda tenant, after: versions_changed_since(ledger.store, tenant, after),
            on_invalidation=records.append,
        )
        plain = QueryEngine(ledger.store, ontology)
        services = max(1, int(args.entities * 0.6))  # generate.py names services S0 .. S{60 % of entities}
        order = list(range(services))
        rng.shuffle(order)
        hits_seen = 0
        for round_index in range(args.rounds):
            before = ledger.store.last_tx()
            if round_index:
                runner.run(islice(events, args.writes))
            changed = versions_changed_since(ledger.store, TENANT, before) if round_index else []
            records.clear()
            now = ledger.store.last_tx()
            hits = 0
            for _ in range(args.queries):
                name, depth = rng.choice(QUERY_MIX)
                request = QueryRequest(name, TENANT, draw_anchor(rng, order, args.uniform), valid_at=now, known_at=now,
                                       depth=depth)
                started = time.perf_counter()
                result, status = engine.run_with_status(request)
                figures.latencies[status].append(time.perf_counter() - started)
                if status == "hit":
                    hits += 1
                    hits_seen += 1
                    if hits_seen % 25 == 0:
                        figures.checked += 1
                        figures.mismatches += result.model_dump() != plain.run(request).model_dump()
            invalidated_by: Counter[str] = Counter()
            for record in records:
                for edge_ids in record.caused_by.values():
                    invalidated_by.update(edge_ids)
            figures.fan_out += [invalidated_by.get(version.edge_id, 0) for version in changed]
            figures.per_round.append((len(changed), sum(len(r.invalidated_keys) for r in records), hits,
                                      args.queries))
        return figures
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _ms(values: list[float], q: float) -> str:
    return f"{percentile(values, q) * 1000:.3f}" if values else "-"


def markdown(figures: Figures, args: argparse.Namespace, command: str) -> str:
    total_hits = sum(r[2] for r in figures.per_round)
    total = sum(r[3] for r in figures.per_round)
    later_hits = sum(r[2] for r in figures.per_round[1:])
    later = sum(r[3] for r in figures.per_round[1:]) or 1
    changed = sum(r[0] for r in figures.per_round)
    invalidated = [r[1] for r in figures.per_round[1:]]
    fan = sorted(figures.fan_out)
    one, five, _ = os.getloadavg()
    lines = [
        f"### Traversal cache: {args.rounds} rounds of {args.writes:,} writes then {args.queries:,} queries "
        f"({'uniform' if args.uniform else 'Zipf-popular'} anchors)",
        "",
        f"Command: `{command}`. History: {args.events:,} events over {args.entities:,} entities, loaded in "
        f"{figures.load_s:.1f} s. Load average {one:.2f} / {five:.2f} (1 / 5 min).",
        "",
        "| measure | value |",
        "|---|---|",
        f"| hit rate, all rounds | {total_hits / total:.1%} ({total_hits:,} of {total:,}) |",
        f"| hit rate after the first round | {later_hits / later:.1%} |",
        f"| versions changed by the write rounds | {changed:,} |",
        f"| entries invalidated per write round: mean / max | "
        f"{statistics.fmean(invalidated) if invalidated else 0:.1f} / {max(invalidated, default=0)} |",
        f"| fan-out per changed version (entries it invalidated): mean / p99 / max | "
        f"{statistics.fmean(fan) if fan else 0:.2f} / {percentile(fan, 0.99) if fan else 0:g} / "
        f"{fan[-1] if fan else 0} |",
        f"| changed versions that invalidated nothing | {sum(1 for f in fan if f == 0):,} of {len(fan):,} |",
        *(f"| {status} latency p50 / p99 (ms) | {_ms(figures.latencies[status], 0.5)} / "
          f"{_ms(figures.latencies[status], 0.99)} |" for status in ("hit", "miss")),
        f"| sampled hits equal to an uncached answer | {figures.checked - figures.mismatches} of {figures.checked} |",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_cache", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    parser.add_argument("--uniform", action="store_true", help="draw anchors uniformly, not Zipf-like")
    for name, default in FULL.items():
        parser.add_argument(f"--{name}", type=int, default=None, help=f"default {default:,}")
    parser.add_argument("--seed", type=int, default=11)
    return fill_sizes(parser.parse_args(argv), QUICK, FULL)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    figures = run(args)
    print(markdown(figures, args, " ".join(["python -m tests.benchmarks.bench_cache", *argv])))
    return 1 if figures.mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main())
