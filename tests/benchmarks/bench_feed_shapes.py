"""Feed shapes that must cost the same per edge at any size: wide sources and snapshot feeds.

    python -m tests.benchmarks.bench_feed_shapes [--sizes 4000,16000,64000] [--rounds 2]

Three shapes, each at every size N, through ``streams.cli.load.load_into`` (what ``edgeledger load
--simulated-clock`` runs) into a fresh RocksDB directory:

1. **One snapshot of N edges**: a single ``mode: snapshot`` change event in which policy record
   ``pol/SOC2`` asserts ``applies_to`` for N services.
2. **More edges after a restart**: N one-edge delta events from the policy, loaded by one ``load``;
   then N/4 more by a second ``load`` on the same state. The second process starts with cold caches
   and finds the policy's out-edges wider than the believed-edges cache takes (10,000), so for
   N >= 10,000 this times the store's path for too-wide sources.
3. **A snapshot feed**: N ``mode: snapshot`` events, one per service record, each asserting one
   ``depends_on`` edge; and the same events as deltas, for comparison. Every snapshot event reads
   what its record says now.

Reported: the loading thread's CPU per edge, best of ``--rounds``. Linear cost shows as a flat
column; before the fixes that this benchmark came with, all three grew with N (quadratic in total).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from streams.cli.load import load_into

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


def write_record_feed(path: Path, records: int, mode: str) -> None:
    with path.open("w") as out:
        out.write(CLOCK + "\n")
        for n in range(records):
            out.write(json.dumps({
                "kind": "change", "event_id": f"record-{n}", "tenant": "acme", "detected_at": "2025-01-01T00:00:00Z",
                "mode": mode, "source": {"system": "cmdb", "record": f"svc/S{n}", "version": "1"},
                "assert": [{"src": {"type": "Service", "id": f"cmdb:S{n}"}, "rel": "depends_on",
                            "dst": {"type": "Service", "id": f"cmdb:S{n + 1}"}}]}) + "\n")


def loading_seconds(state: Path, events: Path) -> float:
    started = time.thread_time()
    summary = load_into(state, [events], simulated_clock=True, ontology_path=None)
    elapsed = time.thread_time() - started
    assert summary["balanced"] and summary["dead_lettered"] == 0, summary
    return elapsed


def measure(size: int, work: Path) -> tuple[float, float, float, float]:
    """(snapshot s, second load s, snapshot feed s, delta feed s) for one size."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    write_snapshot(work / "snapshot.jsonl", size)
    snapshot_s = loading_seconds(work / "snapshot-state", work / "snapshot.jsonl")
    write_deltas(work / "first.jsonl", 0, size)
    write_deltas(work / "second.jsonl", size, size // 4)
    loading_seconds(work / "delta-state", work / "first.jsonl")
    restart_s = loading_seconds(work / "delta-state", work / "second.jsonl")
    feeds = []
    for mode in ("snapshot", "delta"):
        write_record_feed(work / f"{mode}-feed.jsonl", size, mode)
        feeds.append(loading_seconds(work / f"{mode}-feed-state", work / f"{mode}-feed.jsonl"))
    return snapshot_s, restart_s, feeds[0], feeds[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_feed_shapes",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="4000,16000,64000")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="edgeledger-feed-shapes-"))
    best: dict[int, list[float]] = {}
    try:
        for _ in range(args.rounds):
            for size in sizes:
                seconds = measure(size, work / str(size))
                best[size] = [min(pair) for pair in zip(best.get(size, seconds), seconds, strict=True)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("### Feed shapes: wide sources and snapshot feeds\n")
    print(f"Command: `python -m tests.benchmarks.bench_feed_shapes --sizes {args.sizes} --rounds {args.rounds}` "
          "(loading-thread CPU, best of the rounds; seconds, and µs per edge)\n")
    print("| N | one snapshot of N edges | N/4 more edges after a restart | N one-edge snapshot events "
          "| the same as deltas |")
    print("|---|---|---|---|---|")
    for size in sizes:
        snapshot_s, restart_s, snapshot_feed_s, delta_feed_s = best[size]
        cells = [(snapshot_s, size), (restart_s, size // 4), (snapshot_feed_s, size), (delta_feed_s, size)]
        print(f"| {size:,} | " + " | ".join(f"{s:.2f} ({s / n * 1e6:.0f})" for s, n in cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
