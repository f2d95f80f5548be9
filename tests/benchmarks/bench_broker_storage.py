"""The embedded broker's two storages side by side in one run: disk (Tansu on the local S3 store) and memory.

    python -m tests.benchmarks.bench_broker_storage [--quick] [--events N] [--rate R] [--seconds S]
        [--warmup S] [--rounds R]

Each run gets its own ``EmbeddedBroker`` (disk: a fresh data directory) and its own topics, under one
temporary directory removed at the end. The variants (``VARIANTS``: memory; disk; disk with the
worker's consumers at ``fetch.wait.max.ms=100``) alternate ABBA round by round, so a drift of the
machine's load favours none. The worker is ``bench_pipeline``'s bare ``LedgerWorker`` process with the
metrics observer (``pipeline_load worker``).

1. **Throughput.** N events (default 50,000; ``--quick`` 10,000) are produced first with
   ``produce_lines`` (*produce* = events/s until every one is acknowledged); then one worker applies
   them until idle. *Steady* = events after the first batch / (end of the last batch - end of the
   first), as in ``bench_pipeline``: what the worker sustains while reading its input from, and
   sending its outputs to, this broker. *Replay* = records/s of a reader of the whole ``edge-versions``
   topic from its start afterwards (what ``replica`` or a rebuild reads).
2. **Latency.** A producer thread sends change events at ``--rate`` (default 1,000/s) for
   ``--seconds`` (20; quick 8), each with ``detected_at`` = the wall clock at production, while one
   worker applies them and a reader here follows ``edge-versions``. *Produce → edge-versions* = when
   the reader received the version that first asserts the event's fact - ``detected_at``: produce,
   broker, the worker's batch, its commit and send, broker again, fetch. *On topic* = the version
   record's CreateTime - ``detected_at`` (before the second trip through the broker). The first
   ``--warmup`` (2) seconds are left out.
3. **Growth** (``--batches N``; off by default). N one-record batches are produced to a topic of one
   partition; then, for each fetch wait in ``FETCH_WAITS_MS``, a consumer at the partition's end waits
   for one more record. Tansu lists the partition's batches on every fetch that is behind and gives up
   when the fetch's wait has run out, so past some N the record never arrives ("never": not in 10 s).
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from schemas.topics import Topic
from streams.kafka.broker import EmbeddedBroker, Storage
from streams.kafka.produce import produce_lines
from tests.benchmarks.bench_pipeline import (
    IDLE_EXIT,
    PARTITIONS,
    assigned_at,
    fmt,
    fresh_topics,
    log,
    quantiles,
    stop_process,
    wait_for_exit,
)
from tests.benchmarks.pipeline_load import (
    BatchMark,
    PacedProducer,
    TopicTail,
    event_dicts,
    event_lines,
    spawn,
    worker_command,
)
from tests.benchmarks.stats import load_average


@dataclass(frozen=True)
class Variant:
    name: str
    storage: Storage
    consumer: dict[str, int]
    """The worker's ``--consumer-option`` overrides."""


VARIANTS = (
    Variant("memory", "memory", {}),
    Variant("disk", "disk", {}),
    # Tansu gives up on a partition's listing after the fetch's max wait (10 ms by default here): a longer
    # wait keeps a disk partition with many record batches readable, at the cost of latency.
    Variant("disk, fetch wait 100 ms", "disk", {"fetch.wait.max.ms": 100}),
)


@contextlib.contextmanager
def started(storage: Storage, work: Path) -> Iterator[tuple[EmbeddedBroker, float]]:
    """A fresh broker of ``storage`` and the seconds its start took (store, broker, first metadata answer)."""
    directory = work / f"broker-{storage}-{uuid.uuid4().hex[:6]}" if storage == "disk" else None
    began = time.perf_counter()
    with EmbeddedBroker(storage=storage, data_dir=directory) as broker:
        yield broker, time.perf_counter() - began
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


@dataclass
class ThroughputRun:
    variant: str
    round: int
    start_s: float
    produce_rate: float
    steady_rate: float | None
    all_out_s: float | None
    on_topic: int
    events: int
    replay_rate: float | None
    """Records/s of a reader of the whole ``edge-versions`` topic from its start, after the worker's run."""
    load: str


def throughput_run(variant: Variant, round_no: int, lines: list[bytes], work: Path) -> ThroughputRun:
    state = work / f"throughput-{uuid.uuid4().hex[:6]}"
    with started(variant.storage, work) as (broker, start_s):
        topics = fresh_topics(broker.bootstrap)
        began = time.perf_counter()
        produce_lines(lines, broker.bootstrap, topics)
        produce_s = time.perf_counter() - began
        process, pipe, spawned = spawn(worker_command(state, broker.bootstrap, topics, f"bench-t-{round_no}",
                                                      metrics=True, exit_when_idle=IDLE_EXIT,
                                                      consumer_overrides=variant.consumer))
        wait_for_exit(process, pipe, f"worker on {variant.name}")
        marks, records, replay_s = replay(broker.bootstrap, topics.name(Topic.EDGE_VERSIONS))
    shutil.rmtree(state, ignore_errors=True)
    done = next(event for event in pipe.json_events() if event["event"] == "done")
    return ThroughputRun(variant.name, round_no, start_s, len(lines) / produce_s, done.get("steady_rate"),
                         done["last_end"] - spawned if "last_end" in done else None,
                         sum({mark.record_id: mark.events for mark in marks}.values()), len(lines),
                         records / replay_s if replay_s > 0 else None, load_average())


def replay(bootstrap: str, topic: str, quiet_for: float = 1.5) -> tuple[list[BatchMark], int, float]:
    """``read_batch_marks``, timed: every batch marker on ``topic`` read from its start, how many records
    it holds, and the seconds from the start of the read to the last record (the wait for quiet left out)."""
    tail = TopicTail(bootstrap, topic, PARTITIONS, keep_versions=False)
    began = time.time()
    tail.start()
    while time.time() - (tail.last_received or began) <= quiet_for:
        time.sleep(0.2)
    tail.stop()
    return tail.batches, tail.records, tail.last_received - began


@dataclass
class LatencyRun:
    variant: str
    round: int
    produced: int
    rate: float
    measured: int
    readable_ms: dict[str, float]
    on_topic_ms: dict[str, float]
    load: str


def latency_run(variant: Variant, round_no: int, rate: float, seconds: float, warmup: float,
                work: Path) -> LatencyRun:
    state = work / f"latency-{uuid.uuid4().hex[:6]}"
    with started(variant.storage, work) as (broker, _):
        topics = fresh_topics(broker.bootstrap)
        events = event_dicts(int(rate * seconds * 1.05) + 100, id_prefix=f"l{round_no}")
        process, pipe, _ = spawn(worker_command(state, broker.bootstrap, topics, f"bench-l-{round_no}",
                                                metrics=True, exit_when_idle=None, consumer_overrides=variant.consumer))
        tail = TopicTail(broker.bootstrap, topics.name(Topic.EDGE_VERSIONS), PARTITIONS)
        producer = PacedProducer(broker.bootstrap, topics, events, rate, seconds)
        try:
            if not pipe.wait_for(lambda: assigned_at("bare", pipe) is not None, 60):
                raise RuntimeError(f"worker never got its partitions:\n{pipe.tail()}")
            tail.start()
            producer.start()
            producer.join()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if sum({m.record_id: m.events for m in tail.snapshot()}.values()) >= producer.sent:
                    break
                time.sleep(0.2)
        finally:
            if tail.is_alive():
                tail.stop()
            stop_process(process, signal.SIGINT)
            pipe.close()
    shutil.rmtree(state, ignore_errors=True)
    assert producer.started_at is not None
    cutoff = int((producer.started_at + warmup) * 1_000_000)
    kept = [a for a in tail.asserted if a.detected_at >= cutoff]
    readable = [(a.received * 1_000_000 - a.detected_at) / 1000 for a in kept]
    on_topic = [(a.created * 1_000_000 - a.detected_at) / 1000 for a in kept]
    return LatencyRun(variant.name, round_no, producer.sent, producer.achieved_rate, len(kept), quantiles(readable),
                      quantiles(on_topic), load_average())


FETCH_WAITS_MS = (10, 100, 500)


def growth_run(storage: Storage, batches: int, work: Path) -> dict[int, float | None]:
    """Seconds until a consumer at the end of a partition of ``batches`` one-record batches receives a new
    record, per fetch wait (None: not within 10 s)."""
    from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from streams.kafka.config import ADMIN_DEFAULTS, consumer_config, producer_config

    topic = "growth"
    waited: dict[int, float | None] = {}
    with started(storage, work) as (broker, _):
        admin = AdminClient({**ADMIN_DEFAULTS, "bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
            future.result(30)
        producer = Producer(producer_config(broker.bootstrap, **{"linger.ms": 0, "batch.num.messages": 1}))
        for n in range(batches):
            producer.produce(topic, value=b"x" * 200)
            if n % 50 == 49:  # in steps, so no record waits out its delivery timeout in the queue
                assert producer.flush(60) == 0
        assert producer.flush(60) == 0
        for wait in FETCH_WAITS_MS:
            consumer = Consumer(consumer_config(broker.bootstrap, f"growth-{wait}", **{"fetch.wait.max.ms": wait}))
            consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
            consumer.poll(1.0)  # lets the end offset resolve before the record is produced
            producer.produce(topic, value=b"new")
            assert producer.flush(30) == 0
            began = time.monotonic()
            waited[wait] = None
            while time.monotonic() - began < 10:
                message = consumer.poll(0.1)
                if message is not None and message.error() is None:
                    waited[wait] = time.monotonic() - began
                    break
            consumer.close()
    return waited


def growth_markdown(batches: int, results: dict[str, dict[int, float | None]]) -> str:
    out = ["", f"A consumer at the end of a partition of {batches:,} one-record batches: seconds until a new "
                "record arrives, by its `fetch.wait.max.ms`", "",
           "| broker | " + " | ".join(f"{wait} ms" for wait in FETCH_WAITS_MS) + " |",
           "|---|" + "---|" * len(FETCH_WAITS_MS)]
    for storage, waited in results.items():
        cells = ["never" if waited[w] is None else fmt(waited[w], 2) for w in FETCH_WAITS_MS]
        out.append(f"| {storage} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def markdown(throughputs: list[ThroughputRun], latencies: list[LatencyRun], command: str) -> str:
    out = [f"`{command}` on {platform.node()} ({platform.python_implementation()} {platform.python_version()})", "",
           "| broker | start | produce (events/s) | worker steady (events/s) | all out (s) | "
           "replay edge-versions (records/s) | produce → edge-versions p50 / p99 (ms) | on topic p50 / p99 (ms) |",
           "|---|---|---|---|---|---|---|---|"]
    for variant in VARIANTS:
        runs = [r for r in throughputs if r.variant == variant.name]
        lats = [r for r in latencies if r.variant == variant.name]
        out.append(
            f"| {variant.name} | {fmt(median([r.start_s for r in runs]), 2)} s "
            f"| {fmt(median([r.produce_rate for r in runs]), 0)} "
            f"| {fmt(median([r.steady_rate for r in runs]), 0)} "
            f"| {fmt(median([r.all_out_s for r in runs]))} "
            f"| {fmt(median([r.replay_rate for r in runs]), 0)} "
            f"| {fmt(median([r.readable_ms['p50'] for r in lats]), 0)} / "
            f"{fmt(median([r.readable_ms['p99'] for r in lats]), 0)} "
            f"| {fmt(median([r.on_topic_ms['p50'] for r in lats]), 0)} / "
            f"{fmt(median([r.on_topic_ms['p99'] for r in lats]), 0)} |")
    out += ["", "Medians over the rounds. Every run:", "",
            "| broker | round | produce (events/s) | steady (events/s) | on edge-versions | latency: events "
            "(rate/s) | p50 / p99 / max (ms) | load |", "|---|---|---|---|---|---|---|---|"]
    for run, lat in zip(throughputs, latencies, strict=True):
        out.append(f"| {run.variant} | {run.round} | {fmt(run.produce_rate, 0)} | {fmt(run.steady_rate, 0)} "
                   f"| {run.on_topic:,}/{run.events:,} | {lat.measured:,} ({fmt(lat.rate, 0)}) "
                   f"| {fmt(lat.readable_ms['p50'], 0)} / {fmt(lat.readable_ms['p99'], 0)} / "
                   f"{fmt(lat.readable_ms['max'], 0)} | {run.load} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_broker_storage", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--events", type=int)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--batches", type=int, default=0, help="Run the growth scenario with N batches.")
    args = parser.parse_args(argv)
    events = args.events or (10_000 if args.quick else 50_000)
    seconds = args.seconds or (8.0 if args.quick else 20.0)
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 2)  # 0: growth only
    lines = event_lines(events)
    throughputs: list[ThroughputRun] = []
    latencies: list[LatencyRun] = []
    with tempfile.TemporaryDirectory(prefix="bench-broker-storage-") as scratch:
        work = Path(scratch)
        for round_no in range(1, rounds + 1):
            for variant in VARIANTS if round_no % 2 else tuple(reversed(VARIANTS)):
                log(f"round {round_no}: {variant.name}, load {load_average()}")
                run = throughput_run(variant, round_no, lines, work)
                log(f"  throughput: produce {fmt(run.produce_rate, 0)} events/s, "
                    f"worker steady {fmt(run.steady_rate, 0)} events/s")
                lat = latency_run(variant, round_no, args.rate, seconds, args.warmup, work)
                log(f"  latency: p50 {fmt(lat.readable_ms['p50'], 0)} ms, p99 {fmt(lat.readable_ms['p99'], 0)} ms "
                    f"over {lat.measured:,} events")
                throughputs.append(run)
                latencies.append(lat)
        growth: dict[str, dict[int, float | None]] = {}
        for storage in (("memory", "disk") if args.batches else ()):
            log(f"growth: {args.batches:,} batches on {storage}, load {load_average()}")
            growth[storage] = growth_run(storage, args.batches, work)
    given = argv if argv is not None else sys.argv[1:]
    command = " ".join(["python -m tests.benchmarks.bench_broker_storage", *given])
    print(markdown(throughputs, latencies, command) if throughputs else f"`{command}`")
    if growth:
        print(growth_markdown(args.batches, growth))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
