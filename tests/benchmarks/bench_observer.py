"""What the metrics observer costs per event, timed around ``LedgerMetrics.observe_commit`` itself.

    python -m tests.benchmarks.bench_observer [--events N] [--entities N] [--batch B] [--rounds R]

Loads a generated history through ``BatchRunner`` into a fresh bulk store, in batches of ``--batch``
events (the worker's ``batch_max``), and hands each committed batch to ``observe_commit`` as the
worker does. Reports the observer's µs per event and its share of the loading loop, per round. The
pipeline benchmark gives the same share inside a worker; this one needs no broker and runs in a few
seconds, so code can be compared by running it from two checkouts, interleaved.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from processors.batch import BatchRunner
from processors.pending import PendingLedger
from schemas.ontology import default_ontology
from state.open import open_writer
from streams.metrics import LedgerMetrics
from streams.processor import make_processor
from tests.benchmarks.bench_ledger import command_line, generated_history


def observed_load(state: Path, lines: list[bytes], batch: int) -> tuple[float, float, int]:
    """(seconds in observe_commit, seconds in the whole loop, events)."""
    store = open_writer(state, bulk=True)
    metrics = LedgerMetrics()
    observing = 0.0
    events = 0

    def commit(pending: PendingLedger) -> None:
        nonlocal observing, events
        store.commit(pending)
        started = time.perf_counter()
        metrics.observe_commit(pending)
        observing += time.perf_counter() - started
        events += pending.counts.events_read

    started = time.perf_counter()
    try:
        BatchRunner(make_processor(default_ontology(), True), store, commit, batch).run(lines)
    finally:
        store.close()
    return observing, time.perf_counter() - started, events


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_observer",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--entities", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    with generated_history("edgeledger-observer-", args.events, args.entities, seed=7) as (work, events_file):
        lines = events_file.read_bytes().splitlines()
        print(f"Command: `{command_line(args, parser.prog)}`\n")
        print("| round | observe_commit µs per event | loop µs per event | observer share |")
        print("|---|---|---|---|")
        for round_number in range(1, args.rounds + 1):
            shutil.rmtree(work / "state", ignore_errors=True)
            observing, total, events = observed_load(work / "state", lines, args.batch)
            print(f"| {round_number} | {observing / events * 1e6:.2f} | {total / events * 1e6:.1f} | "
                  f"{observing / total:.1%} |")


if __name__ == "__main__":
    main()
