"""Crash safety and scale-out: kill -9 mid-stream, crash between commit and send, two workers."""

from __future__ import annotations

import gc
import os
import signal
from pathlib import Path

import pytest

import streams.log.replica
from processors.heap import SettledHeap
from streams.cli.load import load_into
from streams.kafka.produce import produce_files
from streams.kafka.topics import TopicSettings, ensure_topics
from streams.worker.loop import CRASH_EXIT_CODE
from tests.support.generate import generate_events
from tests.support.logpipe import LogPipe
from tests.support.pipeline import (
    assert_exactly_once_effect,
    comparable_state,
    count_applied,
    finish,
    fresh_topics,
    holds_partitions,
    start_worker,
)
from tests.support.wait import wait_until
from tests.support.workers import input_ends, replicate, run_to_the_end, states_done

pytestmark = pytest.mark.integration
TENANTS = ("acme", "globex", "initech", "umbrella")


@pytest.fixture(scope="module")
def stream(tmp_path_factory) -> tuple[Path, Path]:
    """20,000 events over four tenants, and the state `load` reaches on them."""
    folder = tmp_path_factory.mktemp("stream")
    events = folder / "events.jsonl"
    per_tenant = [list(generate_events(5000, 800, seed=i, tenant=t, simulated_clock=False))
                  for i, t in enumerate(TENANTS)]
    events.write_text("\n".join(line for group in zip(*per_tenant, strict=True) for line in group) + "\n")
    load_into(folder / "expected", [events], simulated_clock=False, ontology_path=None)
    return events, folder / "expected"


def produced_on_fresh_topics(bootstrap: str, events: Path) -> TopicSettings:
    """Topics of their own for one test, with ``events`` produced to them."""
    topics = fresh_topics()
    ensure_topics(bootstrap, topics)
    produce_files([events], bootstrap, topics, progress=False)
    return topics


def test_kill_minus_nine_mid_stream_then_restart(kafka_broker, stream, tmp_path: Path) -> None:
    events, expected = stream
    topics = produced_on_fresh_topics(kafka_broker.bootstrap, events)
    state = tmp_path / "state"
    worker = start_worker(state, kafka_broker.bootstrap, topics, "g-kill", faults=[])
    wait_until(lambda: (state / "CURRENT").exists() and count_applied(state) >= 3000,
               "the worker applied 3,000 events", 90)
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait(10)
    partial = count_applied(state)
    assert 0 < partial < 20_000, f"the kill must land mid-stream (applied {partial})"
    restarted = run_to_the_end(state, kafka_broker.bootstrap, topics, "g-kill", faults=[], timeout=180)
    assert restarted.summary()["events_read"] == 20_000 - partial, "resumes after the last applied offset"
    assert comparable_state(state) == comparable_state(expected)
    assert_exactly_once_effect(kafka_broker.bootstrap, topics, expected)


def test_crash_between_commit_and_send_resends_the_outbox(kafka_broker, stream, tmp_path: Path) -> None:
    events, expected = stream
    topics = produced_on_fresh_topics(kafka_broker.bootstrap, events)
    state = tmp_path / "state"
    # In a process of its own, which dies after committing its third batch as from kill -9: nothing
    # is closed, flushed or handed back to the group on the way out.
    crashing = start_worker(state, kafka_broker.bootstrap, topics, "g-outbox", faults=["--crash-after-commit", "3"])
    _, err = finish(crashing, 180)
    assert crashing.returncode == CRASH_EXIT_CODE, err
    restarted = run_to_the_end(state, kafka_broker.bootstrap, topics, "g-outbox", faults=[], timeout=180)
    assert restarted.first("re-sending") is not None, restarted.tail()
    assert comparable_state(state) == comparable_state(expected)
    assert_exactly_once_effect(kafka_broker.bootstrap, topics, expected)


def test_two_workers_split_the_partitions_and_reach_the_same_state(kafka_broker, stream, tmp_path: Path,
                                                                    monkeypatch) -> None:
    events, expected = stream
    topics = fresh_topics()
    ensure_topics(kafka_broker.bootstrap, topics)
    # The events are produced only once both workers hold partitions: produced earlier, the first
    # worker to join can apply all 20,000 before the second one's join rebalances the group (a fixed
    # wait was not enough on a busy machine). A worker is assigned partitions only in a generation
    # that includes both, so the second one's non-empty assignment means the split has happened.
    workers = [LogPipe(start_worker(tmp_path / name, kafka_broker.bootstrap, topics, "g-two", faults=[]))
               for name in ("w1", "w2")]
    try:
        for worker in workers:
            assert worker.wait_for(lambda w=worker: holds_partitions(w), 60), f"no assignment:\n{worker.tail()}"
        produce_files([events], kafka_broker.bootstrap, topics, progress=False)
        ends = input_ends(kafka_broker.bootstrap, topics)
        wait_until(lambda: states_done([tmp_path / "w1", tmp_path / "w2"], ends), "the two applied every input", 180)
        counts = [worker.stop()["events_read"] for worker in workers]
    finally:
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.kill()
            worker.close()
    assert all(count > 0 for count in counts), f"both workers took partitions: {counts}"
    assert sum(counts) >= 20_000
    assert comparable_state(tmp_path / "w1") | comparable_state(tmp_path / "w2") == comparable_state(expected)
    assert_exactly_once_effect(kafka_broker.bootstrap, topics, expected)
    settled: list[int] = []

    class CountingHeap:
        """A ``SettledHeap`` that counts its events (compiled, it cannot be subclassed here)."""

        def __init__(self) -> None:
            self.heap = SettledHeap()
            self.when_idle = self.heap.when_idle

        def after_event(self) -> None:
            settled.append(1)
            self.heap.after_event()

        def __enter__(self) -> CountingHeap:
            self.heap.__enter__()
            return self

        def __exit__(self, *exc_info: object) -> None:
            self.heap.__exit__(*exc_info)

    monkeypatch.setattr(streams.log.replica, "SettledHeap", CountingHeap)
    applied = replicate(tmp_path / "replica", kafka_broker.bootstrap, topics)
    assert comparable_state(tmp_path / "replica") == comparable_state(expected), "a query replica sees it all"
    assert len(settled) == applied > 0, "the replica keeps the collector off what it has replayed"
    assert gc.get_freeze_count() == 0, "and hands it back when it stops"
