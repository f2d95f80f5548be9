"""Wide sources: a policy that applies to thousands of services must cost the same per edge as a narrow one.

    python -m tests.benchmarks.bench_hubs [--sizes 4000,16000,64000] [--rounds 2]

Two shapes, each at every size N, through ``streams.ledger_files.load_into`` (what ``edgeledger load
--simulated-clock`` runs) into a fresh RocksDB directory:

1. **One snapshot of N edges**: a single ``mode: snapshot`` change event in which policy record
   ``pol/SOC2`` asserts ``applies_to`` for N services.
2. **More edges after a restart**: N one-edge delta events from the policy, loaded by one ``load``;
   then N/4 more by a second ``load`` on the same state. The second process starts with cold caches
   and finds the policy's out-edges wider than the believed-edges cache takes (10,000), so for
   N >= 10,000 this times the store's path for too-wide sources.

Reported: the loading thread's CPU per edge, best of ``--rounds``. Linear cost shows as a flat
column; before the fixes that this benchmark came with, both shapes grew with N (quadratic in total).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from streams.ledger_files import load_into

POLICY = {"type": "Policy", "id": "pol:SOC2", "name": "SOC2"}
CLOCK = json.dumps({"kind": "clock", "now": "2025-01-01T00:00:00Z"})


def _edge(service: int) -> dict:
    return {"src": POLICY, "rel": "applies_to", "dst": {"type": "Service", "id": f"cmdb:S{service}"}}


def write_snapshot(path: Path, edges: int) -> None:
    event = {"kind": "change", "event_id": "snapshot-1", "tenant": "acme", "detected_at": "2025-01-01T00:00:00Z",
             "mode": "snapshot", "source": {"system": "policy", "record": "pol/SOC2", "version": "1"},
             "assert": [_edge(n) for n in range(edges)]}
    path.write_text(CLOCK + "\n" + json.dumps(event) + "\n")


def write_deltas(path: Path, first: int, count: int) -> None:
    with path.open("w") as out:
        out.write(CLOCK + "\n")
        for n in range(first, first + count):
            out.write(json.dumps({
                "kind": "change", "event_id": f"delta-{n}", "tenant": "acme", "detected_at": "2025-01-01T00:00:00Z",
                "source": {"system": "policy", "record": f"pol/SOC2/{n}", "version": "1"},
                "assert": [_edge(n)]}) + "\n")


def loading_seconds(state: Path, events: Path) -> float:
    started = time.thread_time()
    summary = load_into(state, [events], simulated_clock=True, ontology_path=None)
    elapsed = time.thread_time() - started
    assert summary["balanced"] and summary["dead_lettered"] == 0, summary
    return elapsed


def measure(size: int, work: Path) -> tuple[float, float]:
    """(snapshot s, second load s) for one size."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    write_snapshot(work / "snapshot.jsonl", size)
    snapshot_s = loading_seconds(work / "snapshot-state", work / "snapshot.jsonl")
    write_deltas(work / "first.jsonl", 0, size)
    write_deltas(work / "second.jsonl", size, size // 4)
    loading_seconds(work / "delta-state", work / "first.jsonl")
    restart_s = loading_seconds(work / "delta-state", work / "second.jsonl")
    return snapshot_s, restart_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_hubs", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="4000,16000,64000")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="edgeledger-hubs-"))
    best: dict[int, tuple[float, float]] = {}
    try:
        for _ in range(args.rounds):
            for size in sizes:
                snapshot_s, restart_s = measure(size, work / str(size))
                old = best.get(size, (float("inf"), float("inf")))
                best[size] = (min(old[0], snapshot_s), min(old[1], restart_s))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("### Wide sources: one policy applying to N services\n")
    print(f"Command: `python -m tests.benchmarks.bench_hubs --sizes {args.sizes} --rounds {args.rounds}` "
          "(loading-thread CPU, best of the rounds)\n")
    print("| N | one snapshot of N edges: s (µs per edge) | N/4 more edges after a restart: s (µs per edge) |")
    print("|---|---|---|")
    for size in sizes:
        snapshot_s, restart_s = best[size]
        print(f"| {size:,} | {snapshot_s:.2f} ({snapshot_s / size * 1e6:.0f}) | "
              f"{restart_s:.2f} ({restart_s / (size // 4) * 1e6:.0f}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
