"""Rebuilds: one cut short by a crash, one on a silent broker, a partition given up where the log is not
as left, a replica beside its worker, poison across a rebuild, `--exit-when-idle` during a rebuild.

Each test builds its scenario on the session's embedded broker with topics of its own, runs the
workers as subprocesses of ``tests.support.faulty_worker`` (with a fault where one must fail), and
compares what they hold with `load` of the same input or with each other (``tests.support.failover``).
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest

from schemas.topics import Topic
from state.kv import RocksKV
from state.pipeline_store import PipelineStore
from streams.kafka.broker import EmbeddedBroker
from streams.kafka.produce import produce_files
from streams.kafka.topics import TopicSettings
from streams.processor import wall_clock_micros
from streams.worker.loop import LedgerWorker, WorkerConfig
from tests.support.failover import (
    CRASH_IN_REBUILD,
    POISON,
    SIDE_EFFECTS,
    StartWorker,
    assert_each_holds_loads_versions,
    b_sends_and_dies_before_the_offset_commit,
    count_rows,
    crash_at,
    log_extent,
    run_through,
    side_tables,
    size,
    stop,
    stored_versions,
    write_events,
)
from tests.support.pipeline import comparable_state, finish, read_topic, start_worker
from tests.support.wait import wait_until
from tests.support.workers import input_ends, replicate, states_done

pytestmark = pytest.mark.integration


def test_a_rebuild_cut_short_by_a_crash_is_done_again_not_taken_for_done(kafka_broker: EmbeddedBroker,
                                                                        topics: TopicSettings, tmp_path: Path) -> None:
    """As above, B sends a batch and dies before the group commits its offsets. A comes back, claims
    its partitions and dies as it begins to rebuild them. Its claim is now the last, and the group's
    offsets show nothing of B's batch: only the rebuild marks A wrote before claiming tell it, at its
    next start, that the rebuild is unfinished. It rebuilds, rather than applying B's inputs again."""
    bootstrap = kafka_broker.bootstrap
    b_sends_and_dies_before_the_offset_commit(tmp_path, bootstrap, topics, "g-cut-rebuild")
    crash_at(CRASH_IN_REBUILD, tmp_path / "A", bootstrap, topics, "g-cut-rebuild")

    run_through(tmp_path / "A", bootstrap, topics, "g-cut-rebuild")
    replicate(tmp_path / "replica", bootstrap, topics)
    assert_each_holds_loads_versions(tmp_path, ("A", "replica"))
    assert stored_versions(tmp_path / "A") == stored_versions(tmp_path / "replica"), (
        "A holds the versions as the log has them, with B's transaction times, not a redo of its own")


def test_a_rebuild_reads_to_the_end_of_the_log_however_long_the_broker_is_silent(kafka_broker: EmbeddedBroker,
                                                                                 topics: TopicSettings,
                                                                                 tmp_path: Path) -> None:
    """A rebuild that stopped at the first quiet second ended early when the broker paused, and the
    worker then applied inputs already on the log again. A rebuild reads to a probe it sends now:
    with a quiet period no fetch comes back within (a tenth of a millisecond), it still reads to the
    log's end."""
    bootstrap, events = kafka_broker.bootstrap, tmp_path / "events.jsonl"
    write_events(events, 150)
    produce_files([events], bootstrap, topics, progress=False)
    run_through(tmp_path / "worker", bootstrap, topics, "g-silent")

    replaying = LedgerWorker(WorkerConfig(tmp_path / "rebuilt", bootstrap, "g-silent-rebuild", topics))
    try:
        for partition in range(topics.partitions_for(Topic.EDGE_VERSIONS)):
            replaying.rebuilding.rebuild_partition(partition, quiet_for=0.0001)
        offsets = replaying.applied_offsets
    finally:
        replaying.close()
    assert comparable_state(tmp_path / "rebuilt") == comparable_state(tmp_path / "worker")
    assert offsets == PipelineStore(RocksKV(tmp_path / "worker", read_only=True), reader=True).input_offsets()


@pytest.mark.parametrize("given_up", ["past the log's end", "where the log went on"])
def test_a_partition_given_up_where_the_log_is_not_as_left_is_rebuilt_from_the_beginning(
        kafka_broker: EmbeddedBroker, topics: TopicSettings, tmp_path: Path, given_up: str) -> None:
    """The state says it gave each partition up where the log was longer than it is now (not the log
    the state came from: a broker that lost its memory-only storage, say), or at the log's end when
    the last record it sent there is far before (the log went on before it let go: another worker
    wrote there, the state dropped from the group without knowing). A rebuild from there would
    miss records; it reads the whole log instead."""
    bootstrap, events = kafka_broker.bootstrap, tmp_path / "events.jsonl"
    write_events(events, 150)
    produce_files([events], bootstrap, topics, progress=False)
    run_through(tmp_path / "worker", bootstrap, topics, "g-given-up")
    log_topic = topics.name(Topic.EDGE_VERSIONS)

    partitions = range(topics.partitions_for(Topic.EDGE_VERSIONS))
    replaying = LedgerWorker(WorkerConfig(tmp_path / "rebuilt", bootstrap, "g-given-up-rebuild", topics))
    try:
        if given_up == "past the log's end":
            replaying.bookkeeping.give_up({partition: (10**9, "w-1-0/partition-0") for partition in partitions})
        else:
            extents = {partition: log_extent(bootstrap, log_topic, partition) for partition in partitions}
            assert any(count > 10 for _, count in extents.values()), "logs that went on past their first record"
            replaying.bookkeeping.give_up({partition: (count, first or "")
                                            for partition, (first, count) in extents.items()})
        for partition in partitions:
            replaying.rebuilding.rebuild_partition(partition)
    finally:
        replaying.close()
    assert comparable_state(tmp_path / "rebuilt") == comparable_state(tmp_path / "worker")


def test_a_replica_holds_everything_the_worker_holds(kafka_broker: EmbeddedBroker, topics: TopicSettings,
                                                     tmp_path: Path) -> None:
    """A replica materialises the log; what the worker keeps besides edges must be in the log too:
    a replica answers `corrections`, `review list`, `dead-letters` and a query's coverage as the worker does."""
    bootstrap, events = kafka_broker.bootstrap, tmp_path / "events.jsonl"
    write_events(events, 250, extra=SIDE_EFFECTS)
    produce_files([events], bootstrap, topics, progress=False)
    run_through(tmp_path / "worker", bootstrap, topics, "g-replica")
    replicate(tmp_path / "replica", bootstrap, topics)

    now = wall_clock_micros()
    worker, replica = side_tables(tmp_path / "worker", now), side_tables(tmp_path / "replica", now)
    assert comparable_state(tmp_path / "replica") == comparable_state(tmp_path / "worker")
    assert all(worker["corrections"].values()), "every tenant's ownership changes made corrections"
    assert [len(worker[name]["acme"]) for name in ("review items", "traces", "heartbeats")] == [1, 1, 1]
    assert worker["dead letters per tenant"] == {"acme": 1, None: 1}, "the unknown kind is acme's; bad JSON no one's"
    assert worker["coverage of owners-of"]["acme"] == [], "the worker heard cmdb just now"
    differing = {name: f"worker {size(worker[name])}, replica {size(replica[name])}"
                 for name in worker if replica[name] != worker[name]}
    assert not differing, f"the replica differs from the worker in {sorted(differing)}: {differing}"


def test_poison_is_dead_lettered_once_across_a_rebuild(kafka_broker: EmbeddedBroker, topics: TopicSettings,
                                                       running: StartWorker,
                                                       tmp_path: Path) -> None:
    """The stream ends with a batch of poison only; the disk is lost; the worker rebuilds while more
    input arrives. The poison was handled: it is neither read nor dead-lettered a second time."""
    bootstrap, state = kafka_broker.bootstrap, tmp_path / "state"
    first_part = write_events(tmp_path / "part1.jsonl", 300)
    (tmp_path / "poison.jsonl").write_bytes(b"\n".join(POISON) + b"\n")
    second_part = write_events(tmp_path / "part2.jsonl", 150, seed=10, id_prefix="later")

    produce_files([tmp_path / "part1.jsonl"], bootstrap, topics, progress=False)
    worker = running(state, bootstrap, topics, "g-poison-rebuild")
    wait_until(lambda: count_rows(state, b"I") >= first_part, "the worker applied the first part", 60)
    produce_files([tmp_path / "poison.jsonl"], bootstrap, topics, progress=False)
    wait_until(lambda: count_rows(state, b"D") >= len(POISON), "the worker dead-lettered the poison", 30)
    before_loss = stop(worker)
    shutil.rmtree(state)

    worker = running(state, bootstrap, topics, "g-poison-rebuild")
    produce_files([tmp_path / "part2.jsonl"], bootstrap, topics, progress=False)
    ends = input_ends(bootstrap, topics)
    wait_until(lambda: states_done([state], ends), "the worker applied every input", 90)
    assert count_rows(state, b"I") == first_part + second_part
    after_rebuild = stop(worker)

    letters = {letter["record_id"]: letter for letter in read_topic(bootstrap, topics.name(Topic.DEAD_LETTER))}
    read = [before_loss["events_read"], after_rebuild["events_read"]]
    produced = first_part + len(POISON) + second_part
    assert Counter(letter["original"] for letter in letters.values()) == {line.decode(): 1 for line in POISON}, (
        f"one dead letter (by record_id) per poison input; events read before and after the loss {read} of {produced}")
    assert sum(read) == produced, f"events read before and after the loss: {read}"


def test_exit_when_idle_does_not_count_a_rebuild_as_idle(kafka_broker: EmbeddedBroker, topics: TopicSettings,
                                                         tmp_path: Path) -> None:
    """The disk is lost while input waits: the rebuild from the log is work, not idleness."""
    bootstrap, state = kafka_broker.bootstrap, tmp_path / "state"
    first_part = write_events(tmp_path / "part1.jsonl", 250)
    waiting = write_events(tmp_path / "part2.jsonl", 250, seed=10, id_prefix="later")
    produce_files([tmp_path / "part1.jsonl"], bootstrap, topics, progress=False)
    assert run_through(state, bootstrap, topics, "g-idle-rebuild")["events_read"] == first_part
    shutil.rmtree(state)
    produce_files([tmp_path / "part2.jsonl"], bootstrap, topics, progress=False)

    started = time.monotonic()
    idling = start_worker(state, bootstrap, topics, "g-idle-rebuild", exit_when_idle=2)
    out, err = finish(idling, 120)
    assert idling.returncode == 0, err
    summary = json.loads(out)
    assert summary["events_read"] == waiting, (
        f"read {summary['events_read']} of the {waiting} waiting events before exiting after "
        f"{time.monotonic() - started:.1f} s ({count_rows(state, b'I')} events seen: the rebuild restored the rest)")
    assert count_rows(state, b"I") == first_part + waiting, "the rebuild restored the first part, then read the rest"
