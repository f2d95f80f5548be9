"""What building a batch's records costs a worker: ``outbox_for`` over the batches of a generated history.

    python -m tests.benchmarks.bench_outbox [--events N] [--entities E] [--rounds R] [--trees DIR,DIR...]

Each run is a child process of one source tree (its own ``streams`` and compiled core, if built):
it loads ``--events`` generated events through the ledger in batches of 2,000, as a worker's loop
does, keeps each batch's pending changes and encoded versions, then times ``outbox_for`` over all
of them with four log partitions. Reported: CPU µs per event of that call alone, with the
collector's generations frozen first (a worker settles its heap the same way). The trees are
interleaved round by round (a, b, then b, a, ...), so a drifting machine favours neither.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from tests.benchmarks.trees import in_round_order, parse_trees, tree_environment

ROOT = Path(__file__).resolve().parents[2]
BATCH = 2000


def measure(events: int, entities: int) -> dict[str, float]:
    """In a child: build the batches, then time ``outbox_for`` over them."""
    import gc
    import time

    from processors.batch import BatchRunner
    from processors.outbox import outbox_for
    from tests.support.generate import generate_events
    from tests.support.harness import Ledger

    ledger = Ledger()
    ledger.processor.clock.simulated = True
    batches: list = []

    def commit(pending) -> None:
        def keep(versions) -> list:
            batches.append((pending, list(versions)))
            return []
        ledger.store.commit(pending, (), keep)

    BatchRunner(ledger.processor, ledger.store, commit, batch_size=BATCH).run(
        line.encode() for line in generate_events(events, entities))
    gc.collect()
    gc.freeze()
    started, records = time.process_time(), 0
    for number, (pending, versions) in enumerate(batches):
        inputs = {("in", 0): number * BATCH + BATCH - 1, ("in", 1): number}
        records += len(outbox_for(pending, versions, inputs, f"b-{number}", 4, {("in", 0): number * BATCH}))
    return {"us_per_event": (time.process_time() - started) / events * 1e6, "records": records}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--entities", type=int, default=6_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--trees", default=str(ROOT), help="comma-separated source trees (default: this one)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.events, args.entities)))
        return 0
    trees = parse_trees(args.trees)
    print(f"outbox_for over {args.events:,} generated events ({args.entities:,} entities), batches of {BATCH:,}")
    for round_no in range(args.rounds):
        for tree in in_round_order(trees, round_no):
            # This file as a script, so that a tree from before it was written runs it too.
            command = [sys.executable, str(Path(__file__).resolve()), "--child",
                       "--events", str(args.events), "--entities", str(args.entities)]
            result = json.loads(subprocess.run(command, cwd=tree, env=tree_environment(tree), check=True,
                                               capture_output=True, text=True).stdout)
            print(f"round {round_no + 1}  {tree}: {result['us_per_event']:.2f} µs an event "
                  f"({result['records']:,} records)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
