"""Load throughput and point-query latency of the ledger, through the real ``load`` path.

    python -m tests.benchmarks.bench_ledger [--events N] [--entities N] [--queries N] [--quick]

1. Generates ``--events`` change events over ``--entities`` entities with ``tests/support/generate.py``
   (about 60 % new dependencies with power-law targets, 20 % ownership changes, some backdated: late
   corrections, 10 % retractions, 10 % membership and policy edges; ``clock`` events drive a simulated
   transaction clock) into a temporary JSONL file. Generation is not timed.
2. Loads the file with ``streams.cli.load.load_into`` (what ``edgeledger load --simulated-clock``
   runs) into a RocksDB directory in a temporary folder, and reports events/s three ways: wall clock,
   process CPU (includes RocksDB's background flush and compaction threads) and the loading thread's
   CPU (the one-core figure).
3. Opens the state as the read commands do (a RocksDB secondary instance) and times ``--queries``
   ``owners-of`` and ``--queries`` 3-hop ``dependents-of`` through ``QueryEngine.run`` with the default
   limits, each at a random service and a random (valid_at, known_at): known_at uniform over the
   simulated transaction-time history, valid_at uniform from 400 days before it starts (backdated
   facts) to its end, after 200 untimed warm-up queries of each kind. Reports p50/p99/max latency and
   how many answers were non-empty or truncated.

The machine is shared: the report prints the load average next to the figures. CPU times are the
steadier measure; latency percentiles include whatever else the machine was doing.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from processors import native
from processors.queries import QueryEngine, QueryRequest
from schemas.ontology import default_ontology
from schemas.times import to_micros
from state.open import open_reader
from streams.cli.load import load_into
from tests.benchmarks.allocator import allocator_in_use
from tests.benchmarks.interpreter import interpreter_in_use
from tests.benchmarks.sizes import fill_sizes
from tests.benchmarks.stats import percentile
from tests.support.generate import START, end_of_history, generate_events

TENANT = "acme"
QUICK = {"events": 20_000, "entities": 5_000, "queries": 1_000}
WARM_UP = 200


@dataclass
class LoadFigures:
    events: int
    lines: int
    wall_s: float
    cpu_s: float
    thread_cpu_s: float
    summary: dict[str, int | bool]
    collector_s: float
    """Wall time inside the cyclic garbage collector during the load (it runs on the loading thread)."""

    def rate(self, seconds: float) -> float:
        """Edge events per second; the simulated clock's ``clock`` lines are not counted."""
        return self.events / seconds if seconds > 0 else float("inf")


@dataclass
class Latencies:
    name: str
    seconds: list[float] = field(default_factory=list)
    """Wall-clock latency of each query."""
    cpu_seconds: list[float] = field(default_factory=list)
    """CPU time of each query: the latency without the time the thread waited for a core."""
    answered: int = 0
    truncated: int = 0

    def summary(self, cpu: bool = False) -> str:
        values = self.cpu_seconds if cpu else self.seconds
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        return f"{p50 * 1e3:.3f} / {p99 * 1e3:.3f} / {max(values) * 1e3:.3f} ms"


@dataclass
class Report:
    args: argparse.Namespace
    generate_s: float
    load: LoadFigures
    queries: list[Latencies]
    load_average: tuple[float, float, float]


def write_events(path: Path, events: int, entities: int, seed: int) -> int:
    lines = 0
    with open(path, "w") as handle:
        for line in generate_events(events, entities, seed=seed, tenant=TENANT):
            handle.write(line)
            handle.write("\n")
            lines += 1
    return lines


def command_line(args: argparse.Namespace, prog: str) -> str:
    """The command that reproduces a run: ``prog`` with every option as parsed, defaults included."""
    return " ".join([prog, *(f"--{name.replace('_', '-')} {value}" for name, value in vars(args).items())])


@contextmanager
def generated_history(prefix: str, events: int, entities: int, seed: int) -> Iterator[tuple[Path, Path]]:
    """A scratch folder holding a generated history: (the folder, its ``events.jsonl``); removed after."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        events_file = work / "events.jsonl"
        write_events(events_file, events, entities, seed)
        yield work, events_file
    finally:
        shutil.rmtree(work, ignore_errors=True)


class CollectorTimer:
    """Sums the time CPython's cyclic garbage collector runs, through ``gc.callbacks``."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started

    def __enter__(self) -> CollectorTimer:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self)


def timed_load(state: Path, events_file: Path, events: int, lines: int) -> LoadFigures:
    with CollectorTimer() as collector:
        wall, cpu, thread = time.perf_counter(), time.process_time(), time.thread_time()
        summary = load_into(state, [events_file], simulated_clock=True, ontology_path=None)
        figures = (time.perf_counter() - wall, time.process_time() - cpu, time.thread_time() - thread)
    return LoadFigures(events, lines, *figures, summary, collector.seconds)


def time_queries(state: Path, args: argparse.Namespace) -> list[Latencies]:
    rng = random.Random(args.seed)
    tx_start, tx_end = to_micros(START), to_micros(end_of_history(args.events))
    valid_start = to_micros(START - timedelta(days=400))
    services = max(1, int(args.entities * 0.6))  # generate.py names services S0 .. S{60 % of entities}
    store = open_reader(state)
    try:
        engine = QueryEngine(store, default_ontology())
        results = []
        for name, depth in (("owners-of", 1), ("dependents-of", 3)):
            def request() -> QueryRequest:
                return QueryRequest(name, TENANT, f"Service:cmdb:S{rng.randrange(services)}",  # noqa: B023
                                    valid_at=rng.randrange(valid_start, tx_end),
                                    known_at=rng.randrange(tx_start, tx_end), depth=depth)  # noqa: B023

            for _ in range(WARM_UP):  # first calls build pydantic validators and warm RocksDB's caches
                engine.run(request())
            latencies = Latencies(name if depth == 1 else f"{name} (depth {depth})")
            for _ in range(args.queries):
                timed = request()
                began, began_cpu = time.perf_counter(), time.thread_time()
                result = engine.run(timed)
                latencies.cpu_seconds.append(time.thread_time() - began_cpu)
                latencies.seconds.append(time.perf_counter() - began)
                latencies.answered += bool(result.results)
                latencies.truncated += result.truncated
            results.append(latencies)
        return results
    finally:
        store.close()


def run(args: argparse.Namespace) -> Report:
    workdir = Path(tempfile.mkdtemp(prefix="edgeledger-bench-"))
    try:
        events_file = workdir / "events.jsonl"
        began = time.perf_counter()
        lines = write_events(events_file, args.events, args.entities, args.seed)
        generate_s = time.perf_counter() - began
        state = workdir / "state"
        load = timed_load(state, events_file, args.events, lines)
        events_file.unlink()
        queries = time_queries(state, args) if args.queries else []
        return Report(args, generate_s, load, queries, os.getloadavg())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def markdown(report: Report, command: str) -> str:
    load, args = report.load, report.args
    out = [
        f"### edgeledger load and query benchmark: {args.events:,} events, {args.entities:,} entities",
        "",
        f"Command: `{command}`",
        "",
        "| measure | value | target |",
        "|---|---|---|",
        f"| core | {native.describe()} | |",
        f"| allocator | {allocator_in_use()} | |",
        f"| interpreter | {interpreter_in_use()} | |",
        f"| events loaded (lines incl. clock events) | {load.events:,} ({load.lines:,}) | |",
        f"| load, loading thread CPU | {load.rate(load.thread_cpu_s):,.0f} events/s ({load.thread_cpu_s:.1f} s) "
        "| >= 25,000 events/s on one core |",
        f"| load, process CPU (incl. RocksDB background threads) | {load.rate(load.cpu_s):,.0f} events/s "
        f"({load.cpu_s:.1f} s) | |",
        f"| load, wall clock | {load.rate(load.wall_s):,.0f} events/s ({load.wall_s:.1f} s) | |",
        f"| load, time in the garbage collector | {load.collector_s:.1f} s | |",
        f"| versions appended / closed, corrections | {load.summary['versions_appended']:,} / "
        f"{load.summary['versions_closed']:,}, {load.summary['corrections']:,} | |",
        f"| balanced (read = applied + dead-lettered + queued + duplicates) | {load.summary['balanced']} | true |",
    ]
    for latencies in report.queries:
        target = "p99 <= 1 ms" if latencies.name == "owners-of" else ""
        count = f"{len(latencies.seconds):,} queries"
        out += [
            f"| {latencies.name}, {count}, wall clock: p50 / p99 / max | {latencies.summary()} "
            f"({latencies.answered:,} non-empty, {latencies.truncated:,} truncated) | {target} |",
            f"| {latencies.name}, {count}, CPU time: p50 / p99 / max | {latencies.summary(cpu=True)} | |",
        ]
    one, five, fifteen = report.load_average
    out += [
        "",
        f"Machine: {os.cpu_count()} cores, load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min) "
        "during the run. The machine is shared: wall-clock rates and latency percentiles include other "
        "work; the CPU rates are steadier. Queries: random service, known_at uniform over the simulated "
        "history, valid_at from 400 days before it to its end (both clocks), default limits, RocksDB "
        f"secondary reader. Generating the events (not timed above) took {report.generate_s:.1f} s.",
    ]
    return "\n".join(out)


FULL = {"events": 1_000_000, "entities": 100_000, "queries": 10_000}


def parse_args(argv: list[str] | None = None,
               prog: str = "python -m tests.benchmarks.bench_ledger") -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, help=f"change events to generate and load ({FULL['events']:,})")
    parser.add_argument("--entities", type=int, help=f"entities the events range over ({FULL['entities']:,})")
    parser.add_argument("--queries", type=int, help=f"queries of each kind to time ({FULL['queries']:,})")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true",
                        help=f"small sizes for a smoke run: {QUICK['events']:,} events, {QUICK['entities']:,} "
                             f"entities, {QUICK['queries']:,} queries, unless given")
    return fill_sizes(parser.parse_args(argv), QUICK, FULL)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    report = run(parse_args(argv))
    print(markdown(report, " ".join(["python -m tests.benchmarks.bench_ledger", *argv])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
