"""Load, observation and worker helpers for ``bench_pipeline``.

- ``event_lines`` / ``event_dicts``: generated change events over several tenants, interleaved.
- ``PacedProducer``: a thread producing change events at a fixed rate, each stamped with
  ``detected_at`` = the wall clock at production (microseconds, ISO-8601 UTC).
- ``TopicTail``: a thread reading ``edge-versions`` as it is written, keeping the batch markers and
  the newly asserted versions with the record's CreateTime and the time it arrived here.
- ``LogPipe`` (``tests.support.logpipe``): drains a subprocess's stdout/stderr, timestamping each line.
- ``TimedWorker``: a ``LedgerWorker`` that records when it was assigned partitions and when each
  non-empty batch started and ended, and times each stage method of its ``process_batch``
  (``STAGES``: a few clock reads per stage and batch, the same with or without observers).
  ``python -m tests.benchmarks.pipeline_load worker ...`` runs one in its own process
  and reports its timeline as JSON lines on stdout (``constructed``, ``assigned``, ``first_batch``,
  ``done``).
- ``EagerConsume``: the consume strategy the freshness variants test against ``LedgerWorker``'s own
  (``--eager``), without changing the worker.
- ``python -m tests.benchmarks.pipeline_load yardstick ...``: the pipeline issue's yardstick, "a
  confluent-kafka batch loop doing decode + rocksdict WriteBatch + produce" (about 120,000 events/s
  on the machine the issue was written on, where it sets the worker's target at 20,000), timed as
  the worker is, so the worker's rate can be read against the day's machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from schemas.topics import Topic
from streams.kafka.config import FAST_GROUP_OVERRIDES, consumer_config, producer_config
from streams.kafka.topics import TopicSettings
from streams.log.records import decode_logged_version
from tests.support.generate import generate_events
from tests.support.logpipe import LogPipe

TENANTS = ("acme", "globex", "initech", "umbrella")
BATCH_PREFIX = b'{"kind":"batch"'
VERSION_PREFIX = b'{"kind":"edge_version"'


# -- events ------------------------------------------------------------------------------------------------
def event_lines(n_events: int, tenants: tuple[str, ...] = TENANTS, seed: int = 11) -> list[bytes]:
    """``n_events`` generated change events (``generate_events``, no clock events), the tenants
    interleaved one by one, about six events per entity in each tenant."""
    per_tenant = -(-n_events // len(tenants))
    entities = max(800, per_tenant // 6)
    streams = [generate_events(per_tenant, entities, seed=seed + i, tenant=t, simulated_clock=False)
               for i, t in enumerate(tenants)]
    lines = [line.encode() for group in zip(*streams, strict=True) for line in group]
    return lines[:n_events]


def event_dicts(n_events: int, tenants: tuple[str, ...] = TENANTS, seed: int = 23,
                id_prefix: str = "p") -> list[dict]:
    """Like ``event_lines`` but parsed, with event ids ``{id_prefix}-{n}`` (unique per tenant)."""
    events = [orjson.loads(line) for line in event_lines(n_events, tenants, seed)]
    for index, event in enumerate(events):
        event["event_id"] = f"{id_prefix}-{index}"
    return events


def iso_now() -> tuple[str, int]:
    """The wall clock as microsecond ISO-8601 UTC text, and as integer microseconds."""
    now = datetime.now(UTC)
    micros = int(now.timestamp()) * 1_000_000 + now.microsecond
    return now.isoformat(timespec="microseconds").replace("+00:00", "Z"), micros


# -- paced production ----------------------------------------------------------------------------------------
class PacedProducer(threading.Thread):
    """Produces ``events`` (change events) to ``source-changes`` at ``rate`` per second for ``duration``
    seconds (or until ``stop()``), keyed by tenant, ``detected_at`` set at the moment of production."""

    def __init__(self, bootstrap: str, topics: TopicSettings, events: Iterable[dict], rate: float,
                 duration: float, overrides: dict | None = None) -> None:
        super().__init__(name="paced-producer", daemon=True)
        self.producer = Producer(producer_config(bootstrap, **(overrides or {})))
        self.topic = topics.name(Topic.SOURCE_CHANGES)
        self.events = iter(events)
        self.rate = rate
        self.duration = duration
        self.sent = 0
        self.failures = 0
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.max_behind = 0.0
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def _delivered(self, error, message) -> None:
        if error is not None:
            self.failures += 1

    def run(self) -> None:
        producer, topic, rate = self.producer, self.topic, self.rate
        start = time.monotonic()
        self.started_at = time.time()
        while not self._halt.is_set():
            elapsed = time.monotonic() - start
            if elapsed >= self.duration:
                break
            due = int(elapsed * rate) + 1
            self.max_behind = max(self.max_behind, (due - self.sent) / rate)
            while self.sent < due:
                try:
                    event = next(self.events)
                except StopIteration:
                    self._halt.set()
                    break
                event["detected_at"] = iso_now()[0]
                producer.produce(topic, key=event["tenant"].encode(), value=orjson.dumps(event),
                                 on_delivery=self._delivered)
                self.sent += 1
            producer.poll(0)
            pause = self.sent / rate - (time.monotonic() - start)
            if pause > 0:
                time.sleep(pause)
        self.finished_at = time.time()
        producer.flush(30)
        self.producer = None  # destroyed here, not when the broker is already gone (reconnect noise)

    @property
    def achieved_rate(self) -> float:
        if self.started_at is None or self.finished_at is None:
            return 0.0
        return self.sent / max(1e-9, self.finished_at - self.started_at)


# -- observing edge-versions ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class BatchMark:
    created: float
    """The record's CreateTime (seconds; librdkafka stamps it at produce(), millisecond resolution)."""
    received: float
    record_id: str
    events: int

    @property
    def worker_id(self) -> str:
        return self.record_id.split("-", 1)[0]


@dataclass(frozen=True, slots=True)
class Asserted:
    tx_from: int
    detected_at: int
    created: float
    received: float


class TopicTail(threading.Thread):
    """Reads every partition of a topic from the beginning until stopped, keeping batch markers and
    newly asserted edge versions (``appended`` and ``origin == edge_id``)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, keep_versions: bool = True) -> None:
        super().__init__(name="topic-tail", daemon=True)
        self.consumer = Consumer(consumer_config(bootstrap, f"bench-tail-{os.getpid()}-{time.monotonic_ns()}"))
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self.keep_versions = keep_versions
        self.batches: list[BatchMark] = []
        self.asserted: list[Asserted] = []
        self.records = 0
        self.last_received = 0.0
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def stop(self) -> None:
        self._halt.set()
        self.join(30)

    def snapshot(self) -> list[BatchMark]:
        with self._lock:
            return list(self.batches)

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                messages = self.consumer.consume(num_messages=1000, timeout=0.05)
                if not messages:
                    continue
                received = time.time()
                for message in messages:
                    if message.error():
                        continue
                    self.records += 1
                    self.last_received = received
                    value = message.value()
                    created = message.timestamp()[1] / 1000
                    if value.startswith(BATCH_PREFIX):
                        record = orjson.loads(value)
                        with self._lock:
                            self.batches.append(BatchMark(created, received, record["record_id"],
                                                          len(record["outcomes"])))
                    elif self.keep_versions and value.startswith(VERSION_PREFIX):
                        record = orjson.loads(value)
                        version = decode_logged_version(record)
                        if record["appended"] and version.origin == version.edge_id and version.detected_at is not None:
                            self.asserted.append(Asserted(version.tx_from, version.detected_at, created, received))
        finally:
            self.consumer.close()


def read_batch_marks(bootstrap: str, topic: str, partitions: int,
                     quiet_for: float = 1.5) -> tuple[list[BatchMark], int]:
    """Every batch marker on ``topic`` (read until quiet: the embedded broker's watermarks count
    record batches), and how many records the topic holds."""
    tail = TopicTail(bootstrap, topic, partitions, keep_versions=False)
    tail.start()
    started = time.time()
    while True:
        time.sleep(0.2)
        last = tail.last_received or started
        if time.time() - last > quiet_for:
            break
    tail.stop()
    return tail.batches, tail.records


# -- subprocess output --------------------------------------------------------------------------------------------
def consumer_options(overrides: dict) -> list[str]:
    return [argument for key, value in overrides.items() for argument in ("--consumer-option", f"{key}={value}")]


def run_command(state: Path, bootstrap: str, topics: TopicSettings, group: str, exit_when_idle: float | None,
                consumer_overrides: dict | None = None) -> list[str]:
    """``edgeledger run`` for one worker on the given broker (no /metrics port; the fast group join
    settings the embedded broker gets, as ``run_pipeline`` adds them when it starts the broker itself)."""
    command = [sys.executable, "-m", "streams.cli.main", "run", "--state", str(state), "--bootstrap", bootstrap,
               "--group", group, "--topic-prefix", topics.prefix, "--metrics-port", "0"]
    if exit_when_idle is not None:
        command += ["--exit-when-idle", str(exit_when_idle)]
    return command + consumer_options({**FAST_GROUP_OVERRIDES, **(consumer_overrides or {})})


def worker_command(state: Path, bootstrap: str, topics: TopicSettings, group: str, metrics: bool,
                   exit_when_idle: float | None, consumer_overrides: dict | None = None,
                   poll_timeout: float | None = None,
                   batch_max: int | None = None, eager: bool = False) -> list[str]:
    """A bare ``TimedWorker`` in its own process (this module's ``worker`` command)."""
    command = [sys.executable, "-m", "tests.benchmarks.pipeline_load", "worker", "--state", str(state),
               "--bootstrap", bootstrap, "--group", group, "--prefix", topics.prefix]
    if metrics:
        command.append("--metrics")
    if exit_when_idle is not None:
        command += ["--exit-when-idle", str(exit_when_idle)]
    if poll_timeout is not None:
        command += ["--poll-timeout", str(poll_timeout)]
    if batch_max is not None:
        command += ["--batch-max", str(batch_max)]
    if eager:
        command.append("--eager")
    return command + consumer_options({**FAST_GROUP_OVERRIDES, **(consumer_overrides or {})})


def yardstick_command(state: Path, bootstrap: str, topics: TopicSettings, group: str,
                      exit_when_idle: float) -> list[str]:
    """The issue's yardstick loop in its own process (this module's ``yardstick`` command)."""
    return [sys.executable, "-m", "tests.benchmarks.pipeline_load", "yardstick", "--state", str(state),
            "--bootstrap", bootstrap, "--group", group, "--prefix", topics.prefix,
            "--exit-when-idle", str(exit_when_idle), *consumer_options(FAST_GROUP_OVERRIDES)]


def spawn(command: list[str]) -> tuple[subprocess.Popen, LogPipe, float]:
    started = time.time()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                               cwd=Path(__file__).resolve().parents[2])
    return process, LogPipe(process), started


# -- the instrumented worker ----------------------------------------------------------------------------------------
@dataclass
class Timeline:
    constructed: float = 0.0
    assigned: float | None = None
    batches: list[tuple[float, float, int]] = field(default_factory=list)
    """(start, end, events read) of each non-empty batch; ``end`` is after its outputs were delivered."""
    cpu: list[float] = field(default_factory=list)
    """The process's CPU time (all threads: Python, librdkafka, RocksDB) at the end of each batch."""


STAGES = ("consume", "apply", "commit", "outbox", "observe", "send")
"""``LedgerWorker``'s stage methods that ``TimedWorker`` times in the batches that apply something
(``commit`` without ``outbox``, which it calls)."""


class StageClock:
    """Wall and thread CPU seconds per stage, summed over a run (four clock reads per call)."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = {stage: [0.0, 0.0] for stage in STAGES}

    @staticmethod
    def now() -> tuple[float, float]:
        return time.perf_counter(), time.thread_time()

    def add(self, stage: str, since: tuple[float, float]) -> None:
        spent = self.seconds[stage]
        spent[0] += time.perf_counter() - since[0]
        spent[1] += time.thread_time() - since[1]

    @contextlib.contextmanager
    def timing(self, stage: str):
        since = self.now()
        try:
            yield
        finally:
            self.add(stage, since)


def _make_timed_worker():
    from streams.worker.loop import LedgerWorker

    class TimedWorker(LedgerWorker):
        def __init__(self, *args, announce=None, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.timeline = Timeline(constructed=time.time())
            self.announce = announce or (lambda event, **data: None)
            self.stages = StageClock()
            self.busy = [0.0, 0.0]
            """Wall and thread CPU seconds in the batches that applied something."""

        def _consume(self):
            since = self.stages.now()
            messages = super()._consume()
            if messages:  # an empty poll is idle time, outside the batches measured
                self.stages.add("consume", since)
            return messages

        def _apply(self, messages):
            with self.stages.timing("apply"):
                return super()._apply(messages)

        def _commit(self, pending, consumed):
            with self.stages.timing("commit"):
                return super()._commit(pending, consumed)

        def _outbox(self, pending, versions, consumed, batch_id):
            with self.stages.timing("outbox"):
                return super()._outbox(pending, versions, consumed, batch_id)

        def _observe(self, pending):
            with self.stages.timing("observe"):
                super()._observe(pending)

        def _send(self, records):
            with self.stages.timing("send"):
                super()._send(records)

        def _on_assign(self, consumer, partitions) -> None:
            super()._on_assign(consumer, partitions)
            if self.timeline.assigned is None:
                self.timeline.assigned = time.time()
                self.announce("assigned", t=self.timeline.assigned)

        def process_batch(self) -> int:
            start, wall, cpu = time.time(), time.perf_counter(), time.thread_time()
            before = self.totals.events_read
            result = super().process_batch()
            if result:
                self.busy[0] += time.perf_counter() - wall
                self.busy[1] += time.thread_time() - cpu
                end = time.time()
                self.timeline.batches.append((start, end, self.totals.events_read - before))
                self.timeline.cpu.append(time.process_time())
                if len(self.timeline.batches) == 1:
                    self.announce("first_batch", t=end, start=start, events=self.totals.events_read - before)
            return result

    return TimedWorker


class EagerConsume:
    """A consumer whose ``consume(n, timeout)`` returns as soon as one message is there, with whatever
    else has already arrived (up to n), instead of waiting for n messages or the whole timeout.

    ``LedgerWorker.process_batch`` calls ``consume(num_messages=batch_max, timeout=poll_timeout)``,
    which librdkafka serves by waiting until ``batch_max`` messages are queued or ``poll_timeout``
    passes: below ``batch_max`` events per ``poll_timeout`` every event waits for the timeout. This
    wrapper tests the alternative without changing the worker: ``poll(timeout)`` for the first
    message, then ``consume(n - 1, 0)`` for the rest of what is queued.
    """

    def __init__(self, consumer) -> None:
        self._consumer = consumer

    def __getattr__(self, name: str):
        return getattr(self._consumer, name)

    def consume(self, num_messages: int = 1, timeout: float = -1):
        first = self._consumer.poll(timeout)
        if first is None:
            return []
        return [first, *self._consumer.consume(num_messages - 1, 0)] if num_messages > 1 else [first]


def _window(timeline: Timeline, first: int, last: int) -> tuple[float | None, float | None, float | None]:
    """(events/s, CPU µs per event, CPU utilisation) from the end of batch ``first`` to the end of batch
    ``last`` (the events of batches first+1 .. last)."""
    events = sum(n for _, _, n in timeline.batches[first + 1:last + 1])
    wall = timeline.batches[last][1] - timeline.batches[first][1]
    cpu = timeline.cpu[last] - timeline.cpu[first]
    if events <= 0 or wall <= 0:
        return None, None, None
    return events / wall, cpu / events * 1e6, cpu / wall


def summarise(timeline: Timeline) -> dict:
    """Steady rate from the end of the first batch to the end of the last (the first batch's events
    excluded, so the rate is not diluted by waiting for it), the same over the first and the last
    fifth of the batches (does it slow down as the state grows?), and the overall figures."""
    batches = timeline.batches
    events = sum(n for _, _, n in batches)
    out = {"constructed": timeline.constructed, "assigned": timeline.assigned, "batches": len(batches),
           "events": events}
    if batches:
        out.update(first_start=batches[0][0], first_end=batches[0][1], last_end=batches[-1][1],
                   busy=sum(end - start for start, end, _ in batches))
        last = len(batches) - 1
        out["steady_rate"], out["cpu_per_event_us"], out["cpu_utilisation"] = _window(timeline, 0, last)
        fifth = max(1, last // 5)
        out["first_fifth"] = _window(timeline, 0, min(fifth, last))
        out["last_fifth"] = _window(timeline, max(0, last - fifth), last)
        sizes = sorted(n for _, _, n in batches)
        out["median_batch"] = sizes[len(sizes) // 2]
    return out


def _worker_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="pipeline_load worker")
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--metrics", action="store_true", help="LedgerMetrics.observe_commit as observer, as run")
    parser.add_argument("--exit-when-idle", type=float)
    parser.add_argument("--consumer-option", action="append", default=[])
    parser.add_argument("--poll-timeout", type=float, help="WorkerConfig.poll_timeout (default 0.05 s)")
    parser.add_argument("--batch-max", type=int, help="WorkerConfig.batch_max (default 2000)")
    parser.add_argument("--eager", action="store_true",
                        help="EagerConsume: a batch is what has arrived, not up to batch_max or poll_timeout")
    args = parser.parse_args(argv)

    from streams.worker.loop import WorkerConfig

    def announce(event: str, **data) -> None:
        sys.stdout.write(json.dumps({"event": event, **data}) + "\n")
        sys.stdout.flush()

    overrides = dict(option.split("=", 1) for option in args.consumer_option)
    config = WorkerConfig(args.state, args.bootstrap, args.group, TopicSettings(prefix=args.prefix),
                          consumer_overrides=overrides)
    if args.poll_timeout is not None:
        config.poll_timeout = args.poll_timeout
    if args.batch_max is not None:
        config.batch_max = args.batch_max
    observers, on_lag = [], None
    observer_seconds = [0.0]
    if args.metrics:
        from streams.metrics import LedgerMetrics

        metrics = LedgerMetrics()
        observe = metrics.observe_commit

        def timed_observe(pending) -> None:  # two perf_counter calls a batch: the observer's own cost
            started = time.perf_counter()
            observe(pending)
            observer_seconds[0] += time.perf_counter() - started

        observers, on_lag = [timed_observe], metrics.set_consumer_lag
    worker = _make_timed_worker()(config, observers=observers, on_consumer_lag=on_lag, announce=announce)
    if args.eager:
        worker.consumer = EagerConsume(worker.consumer)
    announce("constructed", t=worker.timeline.constructed, worker_id=config.worker_id)
    stop = threading.Event()
    import signal

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    totals = worker.run(stop, args.exit_when_idle)
    stages = dict(worker.stages.seconds)
    stages["commit"] = [c - o for c, o in zip(stages["commit"], stages["outbox"], strict=True)]
    announce("done", timeline=worker.timeline.batches, totals=asdict(totals), observer_seconds=observer_seconds[0],
             worker_id=config.worker_id, stages=stages, stage_batches=worker.busy, **summarise(worker.timeline))
    return 0


def _yardstick_main(argv: list[str]) -> int:
    """The issue's loop on the worker's topics: consume a batch (as the worker does: up to its
    ``batch_max`` records or ``poll_timeout``), validate each record's bytes with the ledger's pydantic
    event model, put it under its tenant and event id in a RocksDB WriteBatch and write that (with the
    write-ahead log, as the worker's commit), produce each record to ``edge-versions``. Nothing is
    flushed or committed per batch, so it is the faster reading of the issue's words."""
    parser = argparse.ArgumentParser(prog="pipeline_load yardstick")
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--exit-when-idle", type=float, default=3.0)
    parser.add_argument("--consumer-option", action="append", default=[])
    args = parser.parse_args(argv)

    from rocksdict import Rdict, WriteBatch

    from schemas.events import EVENT_ADAPTER
    from streams.worker.loop import WorkerConfig

    topics = TopicSettings(prefix=args.prefix)
    defaults = WorkerConfig(args.state, args.bootstrap, args.group, topics)
    overrides = dict(option.split("=", 1) for option in args.consumer_option)
    consumer = Consumer(consumer_config(args.bootstrap, args.group, **overrides))
    producer = Producer(producer_config(args.bootstrap))
    source, out = topics.name(Topic.SOURCE_CHANGES), topics.name(Topic.EDGE_VERSIONS)
    consumer.subscribe([source])
    db = Rdict(str(args.state))
    decode = EVENT_ADAPTER.validate_json
    timeline = Timeline(constructed=time.time())
    idle_since = None
    try:
        while True:
            start = time.time()
            messages = consumer.consume(num_messages=defaults.batch_max, timeout=defaults.poll_timeout)
            values = [m.value() for m in messages if not m.error()]
            if not values:
                if timeline.batches:
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since > args.exit_when_idle:
                        break
                continue
            idle_since = None
            batch = WriteBatch()
            for value in values:
                event = decode(value)
                batch.put(f"{event.tenant}/{event.event_id}".encode(), value)
            db.write(batch)
            for value in values:
                try:
                    producer.produce(out, value)
                except BufferError:  # librdkafka's queue is full: let it deliver, then go on
                    producer.poll(0.1)
                    producer.produce(out, value)
            producer.poll(0)
            timeline.batches.append((start, time.time(), len(values)))
            timeline.cpu.append(time.process_time())
    finally:
        producer.flush(30)
        consumer.close()
        db.close()
    sys.stdout.write(json.dumps({"event": "done", **summarise(timeline)}) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["worker"]:
        return _worker_main(argv[1:])
    if argv[:1] == ["yardstick"]:
        return _yardstick_main(argv[1:])
    sys.stderr.write("usage: python -m tests.benchmarks.pipeline_load worker --state DIR --bootstrap HOST:PORT "
                     "--group G --prefix P [--metrics] [--exit-when-idle S] [--consumer-option K=V]...\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
