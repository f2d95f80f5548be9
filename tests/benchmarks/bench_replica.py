"""How fast the ``edge-versions`` log is replayed: by a query replica, and by a worker that lost its state.

    python -m tests.benchmarks.bench_replica [--events N] [--rounds R] [--trees DIR,DIR...]

One embedded broker for the whole run. N generated events (default 100,000, four tenants) are
produced and applied by one bare worker (``pipeline_load worker``), which writes the log. Then, once
per round and tree, each into a fresh state directory:

- *replica*: ``edgeledger replica --exit-when-idle 2`` replays the whole log;
- *rebuild*: a second bare worker in the same group, whose empty state is behind the group's offsets,
  rebuilds every partition from the log (``Rebuilding.rebuild_partition``), finds no new input
  and exits when idle.

With ``--trees``, each runs from that source tree (its own ``streams``, ``state`` and compiled core,
if built), the trees interleaved round by round (a, b, then b, a, ...), so that checkouts are
compared side by side on the same log.

Reported per run: the child's CPU seconds (all threads; ``os.wait4``), its wall clock less the wait
of the exit when idle (a rebuild's second of quiet at the end of each partition's log stays in: it
is part of what a rebuild costs, and the partitions' quiet ends overlap), log
records per CPU second (a rebuild's are those the replica before it read: the whole log), and a
check that the versions (``V`` rows) equal the first worker's byte for byte. Python's start-up,
imports and the group join are in both figures, the same for every tree.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from streams.kafka.broker import EmbeddedBroker
from streams.kafka.produce import produce_lines
from streams.kafka.topics import TopicSettings, ensure_topics
from tests.benchmarks.pipeline_load import event_lines, spawn, worker_command
from tests.benchmarks.stats import load_average
from tests.benchmarks.trees import in_round_order, parse_trees, tree_environment

IDLE_EXIT = 2.0
GROUP = "bench-replica"
ROOT = Path(__file__).resolve().parents[2]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def versions_digest(state: Path) -> tuple[int, str]:
    """The number of ``V`` rows in a state directory and a digest of them, read as a secondary."""
    from state.kv import RocksKV

    kv = RocksKV(state, read_only=True)
    digest, count = hashlib.blake2b(digest_size=16), 0
    try:
        for key, value in kv.scan(b"V"):
            digest.update(key)
            digest.update(value)
            count += 1
    finally:
        kv.close()
    return count, digest.hexdigest()


@dataclass
class ReplayRun:
    kind: str
    tree: Path
    round: int
    records: int
    cpu_s: float
    replay_wall_s: float
    matches: bool
    load: str


def replay_run(kind: str, tree: Path, round_no: int, bootstrap: str, topics: TopicSettings, work: Path,
               expected: tuple[int, str], log_records: int) -> ReplayRun:
    """One replay; ``log_records`` is what the log holds (a rebuild reads it all, and does not say so)."""
    state = work / f"{kind}-{round_no}-{tree.name}"
    if kind == "replica":
        command = [sys.executable, "-m", "streams.cli.main", "replica", "--state", str(state), "--bootstrap", bootstrap,
                   "--topic-prefix", topics.prefix, "--exit-when-idle", str(IDLE_EXIT)]
        idle = IDLE_EXIT
    else:
        command = worker_command(state, bootstrap, topics, GROUP, metrics=False, exit_when_idle=IDLE_EXIT)
        idle = IDLE_EXIT
    # Files, not pipes: the child's output is read only once it has exited (``os.wait4``, for its usage).
    out, err = work / f"{kind}-{round_no}.out", work / f"{kind}-{round_no}.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=tree, env=tree_environment(tree),
                                   stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{kind} from {tree} failed:\n{err.read_text()[-2000:]}")
    records = orjson.loads(out.read_bytes())["log_records"] if kind == "replica" else log_records
    matches = versions_digest(state) == expected
    shutil.rmtree(state, ignore_errors=True)
    return ReplayRun(kind, tree, round_no, records, usage.ru_utime + usage.ru_stime, wall - idle, matches,
                     load_average())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trees", default=str(ROOT),
                        help="comma-separated source trees to run the replica from (default: this one)")
    args = parser.parse_args(argv)
    trees = parse_trees(args.trees)
    with tempfile.TemporaryDirectory(prefix="bench-replica-") as scratch, EmbeddedBroker() as broker:
        work = Path(scratch)
        topics = TopicSettings(prefix="benchreplica.")
        ensure_topics(broker.bootstrap, topics)
        log(f"producing {args.events:,} events")
        produce_lines(event_lines(args.events), broker.bootstrap, topics)
        worker_state = work / "worker"
        process, pipe, _ = spawn(worker_command(worker_state, broker.bootstrap, topics, GROUP,
                                                metrics=False, exit_when_idle=IDLE_EXIT))
        try:
            if process.wait(3600) != 0:
                raise RuntimeError(f"the worker exited {process.returncode}:\n{pipe.tail()}")
        finally:
            pipe.close()
        expected = versions_digest(worker_state)
        log(f"the worker wrote the log: {expected[0]:,} versions")
        runs: list[ReplayRun] = []
        log_records = 0
        for round_no in range(args.rounds):
            for tree in in_round_order(trees, round_no):
                for kind in ("replica", "rebuild"):
                    run = replay_run(kind, tree, round_no, broker.bootstrap, topics, work, expected, log_records)
                    log_records = run.records
                    log(f"round {round_no} {kind} {tree}: {run.records:,} records, CPU {run.cpu_s:.2f} s, "
                        f"wall {run.replay_wall_s:.2f} s, versions match: {run.matches}")
                    runs.append(run)
    print(f"# Replays of the log of {args.events:,} events (`python -m tests.benchmarks.bench_replica "
          f"{' '.join(argv if argv is not None else sys.argv[1:])}`)\n")
    print("| round | replay | tree | log records | CPU s (all threads) | records per CPU s "
          "| wall s, less the idle exit | versions equal the worker's | load average |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        print(f"| {run.round} | {run.kind} | {run.tree} | {run.records:,} | {run.cpu_s:.2f} "
              f"| {run.records / run.cpu_s:,.0f} | {run.replay_wall_s:.2f} | {run.matches} | {run.load} |")
    return 0 if all(run.matches for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
