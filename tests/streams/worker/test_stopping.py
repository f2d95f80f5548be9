"""Workers that fail loudly and stop on time.

A worker whose broker dies fails within its bound, naming the broker. One the group never assigns
partitions warns, naming the group, the broker and the state, and, when it exits once idle, fails
rather than reporting an empty success. SIGTERM ends `edgeledger run` within 10 s whatever it is
doing, and a crash of its faust app ends the process. The bounds are checked on their own with a
fake clock; the rest runs worker processes against real embedded brokers, some of them killed.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException

from state.kv import RocksKV
from state.pipeline_store import PipelineStore
from streams.kafka.broker import EmbeddedBroker, free_port
from streams.kafka.config import FAST_GROUP_OVERRIDES, consumer_config
from streams.kafka.liveness import AssignmentWatch, BrokerUnreachable, BrokerWatch, NoAssignment, QuietRepeats
from streams.kafka.produce import produce_files
from streams.kafka.topics import INPUT_TOPICS, TopicSettings, ensure_topics
from tests.support.generate import generate_events
from tests.support.logpipe import LogPipe
from tests.support.pipeline import count_applied, fresh_topics, start_worker
from tests.support.wait import wait_until
from tests.support.workers import run_to_the_end

STOP_WITHIN = 10.0
"""Seconds from SIGTERM to a worker process's end, in every state."""

CRASHING = """
import logging, sys
from pathlib import Path
from streams.kafka.topics import TopicSettings
from streams.worker.app import run_app
from streams.worker.loop import LedgerWorker, WorkerConfig

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
bootstrap, state, prefix = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
worker = LedgerWorker(WorkerConfig(state, bootstrap, "g-crash", TopicSettings(prefix=prefix)))

def failing_timer() -> None:
    raise RuntimeError("the timer failed")

run_app(bootstrap, state, worker, None, [(0.5, failing_timer)])
"""
"""A worker in its faust app whose timer fails: faust crashes the app."""

HELD = """
import logging, threading, time
from streams.worker.app import Deadline

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

def held() -> None:
    time.sleep(60)

worker = threading.Thread(target=held, daemon=True)
worker.start()
Deadline(0.5, lambda: worker).begin("a test")
time.sleep(60)
"""
"""A stop whose worker never ends: the deadline ends the process."""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the bounds, with a fake clock ------------------------------------------------------------------------------------
def test_a_broker_out_of_reach_is_waited_for_up_to_the_bound_from_the_first_error() -> None:
    clock = Clock()
    watch = BrokerWatch("kafka-a:9092", timeout=60, clock=clock)
    watch.error_cb(KafkaError(KafkaError._MSG_TIMED_OUT, "a record timed out"))
    assert not watch.suspect, "an error that is not about reaching the cluster starts no clock"
    watch.error_cb(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    clock.now += 30
    watch.error_cb(KafkaError(KafkaError._TRANSPORT, "Connect failed"))  # a later error does not restart it
    clock.now += 29.9
    watch.check()
    clock.now += 0.1
    with pytest.raises(BrokerUnreachable, match=r"could not reach the Kafka broker at kafka-a:9092 for 60 s "
                                                r"\(last error: Connect failed\)"):
        watch.check()
    watch.reached()
    watch.check()
    assert not watch.suspect


def test_an_idle_client_asks_the_cluster_while_it_is_out_of_reach_and_an_answer_ends_the_wait() -> None:
    clock = Clock()
    watch = BrokerWatch("kafka-a:9092", timeout=10, ask_every=1.0, clock=clock)
    asked: list[float] = []

    def refused() -> object:
        asked.append(clock.now)
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Broker transport failure"))

    watch.check(refused)
    assert asked == [], "nothing to ask while the cluster answers"
    watch.failed("Connect failed")
    for _ in range(5):
        watch.check(refused)
        clock.now += 0.5
    assert len(asked) == 3, "at most one question a second"
    clock.now += 0.5
    watch.check(lambda: asked.append(clock.now))
    assert not watch.suspect and len(asked) == 4
    clock.now += 60
    watch.check(refused)
    assert len(asked) == 4, "an answer ends the questions"


def test_reach_tries_until_the_cluster_answers_or_the_stop_or_the_bound() -> None:
    clock = Clock()
    watch = BrokerWatch("kafka-a:9092", timeout=3, clock=clock)
    answers = iter([KafkaError._TRANSPORT, KafkaError._TIMED_OUT, None])

    def ask() -> object:
        clock.now += 1
        code = next(answers)
        if code is not None:
            raise KafkaException(KafkaError(code, "no answer"))
        return "metadata"

    assert watch.reach(ask, lambda: False)
    assert not watch.suspect
    assert not watch.reach(ask, lambda: True), "stopped: no question"

    def never() -> object:
        clock.now += 1
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Broker transport failure"))

    with pytest.raises(BrokerUnreachable):
        watch.reach(never, lambda: False)

    def refused() -> object:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "not authorized"))

    with pytest.raises(KafkaException, match="not authorized"):
        watch.reach(refused, lambda: False)


def test_waiting_for_an_assignment_warns_past_the_bound_then_rarely_or_fails_the_run(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    watch = AssignmentWatch("g-ledger", "kafka-a:9092", Path("/srv/state"), timeout=60, repeat_every=300, clock=clock)
    watch.check(give_up=True)
    watch.wait()
    started = clock.now
    with caplog.at_level(logging.WARNING, logger="streams.kafka.liveness"):
        for waited in (59, 60, 100, 359, 360, 361):
            clock.now = started + waited
            watch.check()
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 2, "once at the bound, then once every 300 s"
    assert all("group g-ledger at kafka-a:9092 (state /srv/state) has not assigned" in text for text in warnings)
    with pytest.raises(NoAssignment, match=r"group g-ledger at kafka-a:9092 \(state /srv/state\) did not assign"):
        watch.check(give_up=True)
    watch.wait()  # still the same wait: a revocation while waiting does not restart it
    watch.assigned()
    watch.check(give_up=True)
    assert not watch.waiting and watch.ever_assigned


def test_repeated_warnings_show_once_then_once_per_interval_with_the_count_held_back() -> None:
    clock = Clock()
    quiet = QuietRepeats(every=30, clock=clock)

    def record(level: int, fac: str, text: str) -> logging.LogRecord:
        return logging.LogRecord("librdkafka", level, __file__, 1, "%s [%s] %s", (fac, "rdkafka#consumer-1", text),
                                 None)

    assert quiet.filter(record(logging.ERROR, "FAIL", "Connect failed (after 0ms)"))
    held = [quiet.filter(record(logging.ERROR, "FAIL", f"Connect failed (after {n}ms)")) for n in range(20)]
    assert not any(held)
    assert quiet.filter(record(logging.WARNING, "SESSTMOUT", "session timed out")), "another kind shows"
    assert quiet.filter(record(logging.INFO, "FAIL", "Disconnected")), "below WARNING is left alone"
    clock.now += 30
    shown = record(logging.ERROR, "FAIL", "Connect failed (after 1ms)")
    assert quiet.filter(shown)
    assert shown.getMessage().endswith("Connect failed (after 1ms) (20 more like it in the last 30 s)")
    assert QuietRepeats(prefixes=("aiokafka",)).filter(record(logging.ERROR, "FAIL", "x")), "not one of its loggers"


def test_a_stop_that_does_not_end_in_time_ends_the_process_saying_where_the_worker_was() -> None:
    started = time.monotonic()
    ended = subprocess.run([sys.executable, "-c", HELD], capture_output=True, text=True, timeout=30)
    assert ended.returncode == 1
    assert time.monotonic() - started < 10
    said = "ERROR streams.worker.app: the stop (a test) has not ended after 0.5 s: the worker is still in "
    assert said in ended.stderr, ended.stderr
    assert "still in <string>:8 held, called from" in ended.stderr, ended.stderr


# -- worker processes -----------------------------------------------------------------------------------------------
integration = pytest.mark.integration


@pytest.fixture
def processes() -> Iterator[list[LogPipe]]:
    """Worker processes a test starts; any still running when it ends is killed."""
    started: list[LogPipe] = []
    yield started
    for worker in started:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait()
        worker.close()


@pytest.fixture
def broker_to_kill() -> Iterator[EmbeddedBroker]:
    """A broker of the test's own, which it may kill (``kill``)."""
    broker = EmbeddedBroker().start()
    try:
        yield broker
    finally:
        broker.stop()


def kill(broker: EmbeddedBroker) -> None:
    """As kill -9 of the broker: nothing closed, nothing said to its clients."""
    assert broker.pid is not None
    os.killpg(broker.pid, signal.SIGKILL)
    wait_until(lambda: not broker.running, "the broker died", 10)


def start_run(processes: list[LogPipe], state: Path, bootstrap: str, topics: TopicSettings, group: str,
              broker_timeout: float = 60.0, assignment_timeout: float = 60.0,
              exit_when_idle: float | None = None) -> LogPipe:
    command = [sys.executable, "-m", "streams.cli.main", "run", "--state", str(state), "--bootstrap", bootstrap,
               "--group", group, "--topic-prefix", topics.prefix, "--metrics-port", "0",
               "--broker-timeout", str(broker_timeout), "--assignment-timeout", str(assignment_timeout)]
    if exit_when_idle is not None:
        command += ["--exit-when-idle", str(exit_when_idle)]
    for key, value in FAST_GROUP_OVERRIDES.items():
        command += ["--consumer-option", f"{key}={value}"]
    processes.append(LogPipe(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    return processes[-1]


def logged(worker: LogPipe, needle: str, what: str, timeout: float = 60) -> None:
    try:
        wait_until(lambda: worker.first(needle) is not None or worker.process.poll() is not None, what, timeout)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{worker.tail(40)}") from None
    assert worker.first(needle) is not None, f"the process ended first:\n{worker.tail(40)}"


def ends_within(worker: LogPipe, seconds: float, after: str) -> int:
    """The process's exit code, once it has ended within ``seconds``."""
    try:
        wait_until(lambda: worker.process.poll() is not None, f"the process to end within {seconds} s of {after}",
                   seconds)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{worker.tail(40)}") from None
    worker.close()
    return worker.process.returncode


def sigterm(worker: LogPipe) -> int:
    """SIGTERM, and the exit code once the process has ended, within ``STOP_WITHIN``."""
    worker.process.send_signal(signal.SIGTERM)
    return ends_within(worker, STOP_WITHIN, "SIGTERM")


def last_line(worker: LogPipe) -> str:
    return worker.stderr[-1][1] if worker.stderr else ""


def produce_stream(path: Path, bootstrap: str, topics: TopicSettings, per_tenant: int) -> None:
    lines = [line for tenant in ("acme", "globex", "initech", "umbrella")
             for line in generate_events(per_tenant, 200, seed=len(tenant), tenant=tenant, simulated_clock=False)]
    path.write_text("\n".join(lines) + "\n")
    produce_files([path], bootstrap, topics, progress=False)


@pytest.fixture
def own_topics(broker_to_kill: EmbeddedBroker) -> TopicSettings:
    topics = fresh_topics()
    ensure_topics(broker_to_kill.bootstrap, topics)
    return topics


@integration
def test_a_worker_whose_broker_dies_fails_within_its_bound_naming_the_broker(
        broker_to_kill: EmbeddedBroker, own_topics: TopicSettings, processes: list[LogPipe], tmp_path: Path) -> None:
    bootstrap = broker_to_kill.bootstrap
    worker = start_run(processes, tmp_path / "state", bootstrap, own_topics, "g-dies", broker_timeout=3)
    logged(worker, " assigned [", "the worker's assignment")
    kill(broker_to_kill)
    code = ends_within(worker, 3 + STOP_WITHIN, "the broker's death")
    assert code == 2, worker.tail(40)
    assert last_line(worker).startswith(f"edgeledger: error: BrokerUnreachable: could not reach the Kafka broker at "
                                        f"{bootstrap} for 3 s"), worker.tail(40)
    fails = [line for _, line in worker.stderr if " librdkafka: FAIL " in line]
    assert 1 <= len(fails) <= 2, f"librdkafka's refused connections, many a second, are shown once: {fails}"


@integration
def test_sigterm_stops_a_running_worker_within_ten_seconds(kafka_broker: EmbeddedBroker, processes: list[LogPipe],
                                                            tmp_path: Path) -> None:
    topics = fresh_topics()
    ensure_topics(kafka_broker.bootstrap, topics)
    produce_stream(tmp_path / "events.jsonl", kafka_broker.bootstrap, topics, 1000)
    state = tmp_path / "state"
    worker = start_run(processes, state, kafka_broker.bootstrap, topics, "g-running")
    wait_until(lambda: (state / "CURRENT").exists() and count_applied(state) > 0, "the worker applied events", 60)
    assert sigterm(worker) == 0, worker.tail(40)
    assert worker.summary()["events_read"] > 0


@integration
def test_sigterm_stops_a_worker_whose_broker_is_gone_within_ten_seconds(
        broker_to_kill: EmbeddedBroker, own_topics: TopicSettings, processes: list[LogPipe], tmp_path: Path) -> None:
    worker = start_run(processes, tmp_path / "state", broker_to_kill.bootstrap, own_topics, "g-gone")
    logged(worker, " assigned [", "the worker's assignment")
    kill(broker_to_kill)
    logged(worker, "cannot reach the Kafka broker at", "the worker to notice the broker is gone", 30)
    assert sigterm(worker) == 0, worker.tail(40)
    assert worker.summary()["events_read"] == 0


@integration
def test_sigterm_stops_a_worker_whose_broker_hangs_within_ten_seconds(
        broker_to_kill: EmbeddedBroker, own_topics: TopicSettings, processes: list[LogPipe], tmp_path: Path) -> None:
    """A broker that hangs (as behind a network partition) refuses nothing: a request to it waits for its
    own timeout. The stop does not: it ends within ten seconds, and if it had to end the process before
    the worker stopped, it says where the worker was."""
    bootstrap = broker_to_kill.bootstrap
    produce_stream(tmp_path / "events.jsonl", bootstrap, own_topics, 50)
    state = tmp_path / "state"
    worker = start_run(processes, state, bootstrap, own_topics, "g-hangs")
    wait_until(lambda: (state / "CURRENT").exists() and count_applied(state) == 200, "the worker applied the stream")
    assert broker_to_kill.pid is not None
    os.killpg(broker_to_kill.pid, signal.SIGSTOP)
    try:
        code = sigterm(worker)
    finally:
        os.killpg(broker_to_kill.pid, signal.SIGCONT)
    assert code in (0, 1), worker.tail(40)
    if code == 1:
        assert worker.first("has not ended after") is not None and worker.first("the worker is still in streams/")


@integration
def test_sigterm_stops_a_run_that_never_reached_its_broker_within_ten_seconds(processes: list[LogPipe],
                                                                              tmp_path: Path) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    worker = start_run(processes, tmp_path / "state", nowhere, fresh_topics(), "g-nowhere")
    logged(worker, f"cannot reach the Kafka broker at {nowhere}", "the run to try its broker", 30)
    # Stopped as by SIGINT before the pipeline ran: no error, no summary (the command line reports an
    # interrupt as it does any other).
    assert sigterm(worker) in (0, 130), worker.tail(40)
    assert worker.stdout == [] and not any("error" in line for _, line in worker.stderr[1:]), worker.tail(40)


@pytest.fixture
def held_group(kafka_broker: EmbeddedBroker) -> Iterator[tuple[TopicSettings, str]]:
    """Topics, and a group whose every input partition a member holds that stopped polling: a rebalance
    waits for it to join again, which it does not do (its heartbeats keep it in the group)."""
    topics = fresh_topics()
    group = f"{topics.prefix}held"
    ensure_topics(kafka_broker.bootstrap, topics)
    assigned = threading.Event()
    member = Consumer(consumer_config(kafka_broker.bootstrap, group, **FAST_GROUP_OVERRIDES))
    member.subscribe([topics.name(topic) for topic in INPUT_TOPICS], on_assign=lambda *_: assigned.set())
    try:
        wait_until(lambda: member.poll(0.05) is None and assigned.is_set(), "the holding member's assignment", 30)
        yield topics, group
    finally:
        member.close()


@integration
def test_a_worker_the_group_never_assigns_warns_and_stops_on_sigterm_within_ten_seconds(
        kafka_broker: EmbeddedBroker, held_group: tuple[TopicSettings, str], processes: list[LogPipe],
        tmp_path: Path) -> None:
    topics, group = held_group
    state = tmp_path / "state"
    worker = start_run(processes, state, kafka_broker.bootstrap, topics, group, assignment_timeout=2)
    logged(worker, f"group {group} at {kafka_broker.bootstrap} (state {state}) has not assigned this worker its "
                   "partitions for 2 s", "the worker's warning that it waits for the group")
    assert worker.process.poll() is None, "it keeps trying"
    assert sigterm(worker) == 0, worker.tail(40)
    assert worker.first(" assigned [") is None, "the group never assigned it anything"


@integration
def test_exit_when_idle_without_an_assignment_fails_rather_than_reporting_success(
        kafka_broker: EmbeddedBroker, held_group: tuple[TopicSettings, str], processes: list[LogPipe],
        tmp_path: Path) -> None:
    topics, group = held_group
    state = tmp_path / "state"
    worker = start_run(processes, state, kafka_broker.bootstrap, topics, group, assignment_timeout=2,
                       exit_when_idle=0.5)
    code = ends_within(worker, 60, "the start")
    assert code == 2, worker.tail(40)
    assert last_line(worker).startswith(f"edgeledger: error: NoAssignment: group {group} at {kafka_broker.bootstrap} "
                                        f"(state {state}) did not assign this worker its partitions within 2 s")
    assert worker.stdout == [], "no summary: nothing was run"


@integration
def test_sigterm_stops_a_worker_in_the_middle_of_a_rebuild_within_ten_seconds(
        kafka_broker: EmbeddedBroker, processes: list[LogPipe], tmp_path: Path) -> None:
    """Worker A applies a stream; B, with a state of its own, takes A's partitions over and rebuilds
    them from the log, a record each tenth of a second: SIGTERM stops it mid-rebuild, which its state
    keeps marked as unfinished for the next run."""
    bootstrap, topics = kafka_broker.bootstrap, fresh_topics()
    ensure_topics(bootstrap, topics)
    produce_stream(tmp_path / "events.jsonl", bootstrap, topics, 50)
    run_to_the_end(tmp_path / "A", bootstrap, topics, "g-rebuild", faults=[])
    rebuilding = LogPipe(start_worker(tmp_path / "B", bootstrap, topics, "g-rebuild", faults=["--slow-rebuild", "0.1"]))
    processes.append(rebuilding)
    logged(rebuilding, " rebuilds partition ", "B's rebuild")
    assert sigterm(rebuilding) == 0, rebuilding.tail(40)
    assert rebuilding.first(" rebuilt partition ") is None, "stopped before any rebuild ended"
    kv = RocksKV(tmp_path / "B", read_only=True)
    try:
        assert PipelineStore(kv, reader=True).rebuilding(), "the unfinished rebuilds stay marked"
    finally:
        kv.close()


@integration
def test_a_crash_of_the_faust_app_ends_the_process_with_an_error(kafka_broker: EmbeddedBroker,
                                                                   processes: list[LogPipe], tmp_path: Path) -> None:
    topics = fresh_topics()
    ensure_topics(kafka_broker.bootstrap, topics)
    worker = LogPipe(subprocess.Popen([sys.executable, "-c", CRASHING, kafka_broker.bootstrap, str(tmp_path / "state"),
                                       topics.prefix], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    processes.append(worker)
    logged(worker, "Crashed reason=RuntimeError('the timer failed')", "faust to crash the app")
    crashed_at = time.monotonic()
    assert ends_within(worker, STOP_WITHIN, "the crash") == 1, worker.tail(40)
    assert time.monotonic() - crashed_at < STOP_WITHIN
    assert any("the faust app crashed: RuntimeError('the timer failed'): stopping" in line for _, line in worker.stderr)
