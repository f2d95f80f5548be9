"""Traversals over merged entities, and what merges cost the traversals of a tenant that has some.

    python -m tests.benchmarks.bench_merged_traversals [--entities N] [--queries N] [--merges N]

On the generated graph of ``bench_traversals`` (``tests/support/graph_fixture.py``, 10,000 entities by
default) loaded through the ledger, this times ``owners-of`` and 3-hop ``dependents-of`` at the default
ceilings, both clocks now, on a secondary reader as the read commands open it:

- *no merges*: sampled service anchors, before any merge;
- then ``--merges`` merge commands join random pairs of services (applied through the processor, as
  ``load`` or ``identity merge --state`` apply them), and again:
- *unmerged anchors, tenant with merges*: the same anchors (none of them merged): the identity map's
  cost on a walk that meets no merged entity;
- *merged anchors*: the survivors and the absorbed ids (each walk reads both entities' adjacencies);
- *as known before the merges*: the merged anchors at a known_at before the first merge.

The report (Markdown, stdout) gives p50/p99/max per query and case, and the answers' mean size.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable

from processors.batch import BatchRunner
from processors.queries import QueryEngine, QueryRequest
from schemas.ontology import default_ontology
from state.open import open_reader
from streams.processor import make_processor
from tests.benchmarks.stats import percentile
from tests.support.graph_fixture import TENANT, GraphSpec, build_graph

ONTOLOGY = default_ontology()
QUERIES = (("owners-of", 1), ("dependents-of", 3))


def timed(engine: QueryEngine, anchors: list[str], known_at: int) -> dict[str, tuple[list[float], float]]:
    """Per query: the wall-clock milliseconds of each, and the mean number of results."""
    found = {}
    for name, depth in QUERIES:
        times, sizes = [], []
        for anchor in anchors:
            request = QueryRequest(name, TENANT, anchor, known_at, known_at, depth=depth)
            started = time.perf_counter()
            result = engine.run(request)
            times.append((time.perf_counter() - started) * 1e3)
            sizes.append(len(result.results))
        found[name] = (times, statistics.fmean(sizes))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_merged_traversals", description=__doc__)
    parser.add_argument("--entities", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=500, help="anchors per case")
    parser.add_argument("--merges", type=int, default=200, help="pairs of services merged")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    say: Callable[[str], None] = lambda message: print(message, file=sys.stderr)  # noqa: E731
    built = build_graph(GraphSpec(entities=args.entities, seed=args.seed), log=say)
    rng = random.Random(args.seed)
    try:
        services = sorted({row[1] for row in built.rows if row[1].startswith("Service:")})
        chosen = rng.sample(services, 2 * args.merges + args.queries)
        pairs = [(chosen[2 * i], chosen[2 * i + 1]) for i in range(args.merges)]
        plain = chosen[2 * args.merges:]
        merged = [node for pair in pairs for node in pair][: args.queries]
        built.close_store()
        cases: dict[str, dict[str, tuple[list[float], float]]] = {}
        reader = open_reader(built.state_dir)
        now = max(time.time_ns() // 1000, reader.last_tx() + 1)
        cases["no merges"] = timed(QueryEngine(reader, ONTOLOGY), plain, now)
        before_merges = reader.last_tx()
        reader.close()

        from state.open import open_writer

        writer = open_writer(built.state_dir)
        lines = [json.dumps({"kind": "merge", "event_id": f"bench-m{i}", "tenant": TENANT, "keep": keep,
                             "absorb": absorb, "actor": "bench"}) for i, (keep, absorb) in enumerate(pairs)]
        counts = BatchRunner(make_processor(ONTOLOGY, False), writer, writer.commit).run(lines)
        writer.close()
        assert counts.applied == len(pairs), counts

        reader = open_reader(built.state_dir)
        now = max(time.time_ns() // 1000, reader.last_tx() + 1)
        engine = QueryEngine(reader, ONTOLOGY)
        cases["unmerged anchors, tenant with merges"] = timed(engine, plain, now)
        cases["merged anchors"] = timed(engine, merged, now)
        cases["merged anchors, as known before the merges"] = timed(engine, merged, before_merges)
        reader.close()
    finally:
        built.close()
    print(f"## Traversals over merged entities ({args.entities:,} entities, {len(built.rows):,} versions, "
          f"{args.merges} merges, {args.queries} anchors a case)\n")
    print("| query | case | p50 ms | p99 ms | max ms | mean results |\n|---|---|---:|---:|---:|---:|")
    for name, _ in QUERIES:
        for case, by_query in cases.items():
            times, size = by_query[name]
            print(f"| {name} | {case} | {percentile(times, 0.5):.3f} | {percentile(times, 0.99):.3f} | "
                  f"{max(times):.3f} | {size:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
