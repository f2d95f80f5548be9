"""Rebuilds beside traffic: partitions that need none keep flowing, a rebalance in the middle neither
stalls nor restarts them, and a worker reports their progress.

Each test builds its scenario on the session's embedded broker with topics of its own, runs the
workers as subprocesses of ``tests.support.faulty_worker`` (with a fault where one must fail), and
compares what they hold with `load` of the same input or with each other (``tests.support.failover``).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from schemas.topics import Topic, tenant_partition
from streams.kafka.broker import EmbeddedBroker
from streams.kafka.config import FAST_GROUP_OVERRIDES
from streams.kafka.produce import produce_files
from streams.kafka.topics import TopicSettings
from streams.worker.loop import LedgerWorker, WorkerConfig
from tests.support.failover import (
    SLOW_REBUILD,
    StartLogged,
    change,
    event_ids,
    run_through,
    seen_event_ids,
    stop_logged,
    write_events,
)
from tests.support.logpipe import LogPipe
from tests.support.pipeline import holds_partitions, read_topic
from tests.support.wait import wait_until
from tests.support.workers import input_ends, worker_done

pytestmark = pytest.mark.integration


def test_partitions_that_need_no_rebuild_keep_flowing_while_others_are_rebuilt(
        kafka_broker: EmbeddedBroker, topics: TopicSettings, tmp_path: Path, logged: StartLogged) -> None:
    """A and B split the partitions; B is stopped, and A takes B's partitions back, which it must
    rebuild from the log (here slowed to several seconds). Input that arrives meanwhile for A's own
    partitions is applied during that rebuild, not after it: the rebuild runs in the worker's loop
    with only the partitions it concerns paused (inside the rebalance callback, it held up all)."""
    bootstrap, group = kafka_broker.bootstrap, "g-flowing"
    parts = [write_events(tmp_path / f"part{index}.jsonl", 100, seed=10 * index, id_prefix=f"p{index}")
             for index in range(3)]
    assert all(parts)
    partitions = topics.partitions_for(Topic.EDGE_VERSIONS)
    workers: dict[str, LogPipe] = {}
    produce_files([tmp_path / "part0.jsonl"], bootstrap, topics, progress=False)
    workers["A"] = logged(tmp_path / "A", bootstrap, topics, group, faults=SLOW_REBUILD)
    wait_until(lambda: event_ids(tmp_path / "part0.jsonl") <= seen_event_ids(tmp_path / "A"),
               "A applied the first part", 60)
    workers["B"] = logged(tmp_path / "B", bootstrap, topics, group)
    wait_until(lambda: all(holds_partitions(w) for w in workers.values()), "the group split the partitions", 60)
    produce_files([tmp_path / "part1.jsonl"], bootstrap, topics, progress=False)
    applied = event_ids(tmp_path / "part0.jsonl") | event_ids(tmp_path / "part1.jsonl")
    wait_until(lambda: applied <= seen_event_ids(tmp_path / "A") | seen_event_ids(tmp_path / "B"),
               "the two workers applied the second part", 60)
    own = {tenant_partition(tenant, partitions) for tenant, _ in seen_event_ids(tmp_path / "A")} - {
        tenant_partition(tenant, partitions) for tenant, _ in seen_event_ids(tmp_path / "B")}
    assert own, "A holds partitions of its own"
    stop_logged(workers["B"])

    produce_files([tmp_path / "part2.jsonl"], bootstrap, topics, progress=False)
    arriving = {(tenant, event_id) for tenant, event_id in event_ids(tmp_path / "part2.jsonl")
                if tenant_partition(tenant, partitions) in own}
    wait_until(lambda: arriving <= seen_event_ids(tmp_path / "A"), "A applied the input of its own partitions", 90)
    applied_at = time.time()
    wait_until(lambda: event_ids(tmp_path / "part2.jsonl") <= seen_event_ids(tmp_path / "A"),
               "A applied every part", 90)
    stop_logged(workers["A"])

    rebuilt = [(at, line) for at, line in workers["A"].stderr if " rebuilt partition " in line]
    assert rebuilt, "A took B's partitions back by rebuilding them from the log"
    assert applied_at < rebuilt[-1][0], (
        f"A applied its own partitions' input {applied_at - rebuilt[-1][0]:.1f} s after its rebuild ended "
        f"({rebuilt[-1][1]}), not while it ran")


def test_a_rebalance_in_the_middle_of_rebuilds_neither_stalls_nor_restarts_them(
        kafka_broker: EmbeddedBroker, topics: TopicSettings, tmp_path: Path, logged: StartLogged) -> None:
    """A starts with no state and rebuilds every partition from the log, slowed: the partition with
    the shorter log is rebuilt first. B joins then, and the group splits the partitions while A's
    longer rebuild runs. If A keeps the partition it finished, that partition is not left paused (a
    pause outlives an assignment); if A keeps the one it was rebuilding, it goes on from where it
    was instead of reading the log again from the start. Either way the group applies the input
    that follows once. The generated tenants fill partitions 0 and 2; two more, with events only in
    the input that follows, fill 1 and 3, whose empty logs A rebuilds before the rebalance: the
    half A keeps holds one of them."""
    bootstrap, group = kafka_broker.bootstrap, "g-rebalance-rebuild"
    first, then = tmp_path / "part0.jsonl", tmp_path / "part1.jsonl"
    write_events(first, 100)
    newcomers = tuple(change(f"{tenant}-1", "cmdb", "svc/S1", "Service:cmdb:S1", "owned_by", "Team:hr:T1")
                      .replace('"tenant": "acme"', f'"tenant": "{tenant}"') for tenant in ("wayne", "wonka"))
    following = write_events(then, 50, seed=10, id_prefix="later", extra=newcomers)
    produce_files([first], bootstrap, topics, progress=False)
    run_through(tmp_path / "X", bootstrap, topics, group)
    partitions = topics.partitions_for(Topic.EDGE_VERSIONS)
    records = Counter(tenant_partition(tenant, partitions) for tenant, _ in event_ids(first))
    ordered = sorted(records, key=lambda partition: records[partition])
    shorter, longer = ordered[0], ordered[-1]
    assert records[shorter] < records[longer], f"two partitions with logs of different lengths: {records}"
    empty = set(range(partitions)) - set(records)
    assert {tenant_partition(tenant, partitions) for tenant in ("wayne", "wonka")} == empty

    workers: dict[str, LogPipe] = {}
    workers["A"] = logged(tmp_path / "A", bootstrap, topics, group, faults=SLOW_REBUILD)
    wait_until(lambda: workers["A"].first(f" rebuilt partition {shorter} ") is not None,
               f"A rebuilt partition {shorter}", 60)
    assert workers["A"].first(f" rebuilt partition {longer} ") is None, "A is still rebuilding the longer log"
    workers["B"] = logged(tmp_path / "B", bootstrap, topics, group)
    wait_until(lambda: all(holds_partitions(w) for w in workers.values()), "the group split the partitions", 60)
    produce_files([then], bootstrap, topics, progress=False)
    everything = event_ids(first) | event_ids(then)
    wait_until(lambda: everything <= seen_event_ids(tmp_path / "A") | seen_event_ids(tmp_path / "B"),
               "the group applied the input that followed", 90)
    summaries = {name: stop_logged(worker) for name, worker in workers.items()}

    assert sum(summary["events_read"] for summary in summaries.values()) == following, summaries
    lines = [line for _, line in workers["A"].stderr]
    if any(f" goes on rebuilding partition {longer}" in line for line in lines):
        starts = [line for line in lines if f" rebuilds partition {longer} " in line]
        assert len(starts) == 1, f"A read partition {longer}'s log from the start once: {starts}"
    else:
        assert f"[{longer}]" not in [line for line in lines if " assigned [" in line][-1], (
            f"A holds partition {longer} after the rebalance but did not go on with its rebuild")


def test_a_worker_reports_its_rebuilds_progress(kafka_broker: EmbeddedBroker, topics: TopicSettings,
                                                tmp_path: Path) -> None:
    """What `run` exports as edgeledger_rebuild_partitions and edgeledger_rebuild_log_records_total:
    a worker with no state reports every partition to rebuild, then none, and replays the whole log."""
    bootstrap, group = kafka_broker.bootstrap, "g-rebuild-progress"
    write_events(tmp_path / "events.jsonl", 100)
    produce_files([tmp_path / "events.jsonl"], bootstrap, topics, progress=False)
    run_through(tmp_path / "first", bootstrap, topics, group)

    reports: list[tuple[int, int]] = []
    worker = LedgerWorker(WorkerConfig(tmp_path / "second", bootstrap, group, topics,
                                       consumer_overrides=dict(FAST_GROUP_OVERRIDES)),
                          on_rebuild=lambda partitions, records: reports.append((partitions, records)))
    until = worker_done(worker, input_ends(bootstrap, topics))
    assert worker.run(until=until).events_read == 0, "the log held every input: nothing left to read"
    partitions = topics.partitions_for(Topic.EDGE_VERSIONS)
    assert reports[0] == (partitions, 0) and reports[-1][0] == 0, reports[:3] + reports[-3:]
    assert sum(records for _, records in reports) == len(read_topic(bootstrap, topics.name(Topic.EDGE_VERSIONS)))
