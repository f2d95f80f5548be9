"""Workers that leave and come back: paused past their session, joining and leaving mid-stream,
dropped while sending, back in a group made anew. Nothing is lost, repeated, or sent over the new owner.

Each test builds its scenario on the session's embedded broker with topics of its own, runs the
workers as subprocesses of ``tests.support.faulty_worker`` (with a fault where one must fail), and
compares what they hold with `load` of the same input or with each other (``tests.support.failover``).
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from schemas.topics import Topic, tenant_partition
from streams.cli.load import load_into
from streams.kafka.broker import EmbeddedBroker
from streams.kafka.produce import produce_files
from streams.kafka.topics import TopicSettings
from tests.support.failover import (
    TENANTS,
    StartLogged,
    assert_each_holds_loads_versions,
    count_rows,
    event_ids,
    paused_at_its_first_batch,
    run_on_to_the_end,
    run_through,
    seen_event_ids,
    stop_logged,
    stored_versions,
    until_the_group_drops_its_paused_member,
    write_events,
)
from tests.support.logpipe import LogPipe
from tests.support.pipeline import assert_exactly_once_effect, holds_partitions, read_partitions, read_topic
from tests.support.wait import wait_until
from tests.support.workers import input_ends, replicate

pytestmark = pytest.mark.integration


def test_a_worker_paused_past_its_session_does_not_send_the_batch_it_held(kafka_broker: EmbeddedBroker,
                                                                          topics: TopicSettings,
                                                                          tmp_path: Path, logged: StartLogged) -> None:
    """A commits its first batch to its state and is paused (SIGSTOP) before sending it, long enough
    for the group to evict it. B takes the partitions over, rebuilds them from the log and applies
    the whole stream. A resumes where it stopped: the group no longer counts it as a member, so it
    does not send its batch, whose records would contradict B's on the log with other transaction
    times. It joins again, finds B's claims, discards its state and rebuilds it from the log."""
    bootstrap = kafka_broker.bootstrap
    paused, produced, release = paused_at_its_first_batch(tmp_path, bootstrap, topics, "g-paused", logged,
                                                          "--hold-before-send")
    assert run_through(tmp_path / "B", bootstrap, topics, "g-paused")["events_read"] == produced
    resumed_at = time.time()
    os.kill(paused.process.pid, signal.SIGCONT)
    release.touch()
    run_on_to_the_end(paused, tmp_path / "A", input_ends(bootstrap, topics), resumed_at)

    assert any(" is no longer a member of the group " in line for _, line in paused.stderr), paused.tail()
    replicate(tmp_path / "replica", bootstrap, topics)
    assert_exactly_once_effect(bootstrap, topics, tmp_path / "load")
    assert_each_holds_loads_versions(tmp_path, ("B", "A", "replica"))
    assert stored_versions(tmp_path / "A") == stored_versions(tmp_path / "replica"), (
        "A holds the versions as the log has them, with B's transaction times, not its own")


def test_a_worker_paused_past_its_session_with_no_one_to_take_over_sends_its_batch_after_all(
        kafka_broker: EmbeddedBroker, topics: TopicSettings, tmp_path: Path, logged: StartLogged) -> None:
    """As above, but no other worker takes the partitions while A is paused: the group drops A, A
    joins again, gets every partition back untouched (the last claims are its own) and sends the
    batch it held, once, then goes on. Which comes first after the pause, A's question to the group
    or its heartbeat thread's rejoin, is up to the threads: rejoined first, A is a member again and
    sends the batch at once. Either way the batch is on the log once and nothing is rebuilt."""
    bootstrap = kafka_broker.bootstrap
    paused, produced, release = paused_at_its_first_batch(tmp_path, bootstrap, topics, "g-paused-alone", logged,
                                                          "--hold-before-send")
    until_the_group_drops_its_paused_member(bootstrap, topics, "g-paused-alone")
    release.touch()  # first, so that A's question to the group is not held up behind the file's poll
    resumed_at = time.time()
    os.kill(paused.process.pid, signal.SIGCONT)
    run_on_to_the_end(paused, tmp_path / "A", input_ends(bootstrap, topics), resumed_at)

    log_lines = [line for _, line in paused.stderr]
    dropped = any(" is no longer a member of the group " in line for line in log_lines)
    assert dropped == any("re-sending" in line for line in log_lines), (
        "dropped, A sends the batch once it has its partitions back untouched; else it sends it at once")
    assert not any(" rebuilt partition " in line for line in log_lines), "nothing to rebuild"
    assert count_rows(tmp_path / "A", b"I") == produced
    replicate(tmp_path / "replica", bootstrap, topics)
    assert_exactly_once_effect(bootstrap, topics, tmp_path / "load")
    assert_each_holds_loads_versions(tmp_path, ("A", "replica"))
    assert stored_versions(tmp_path / "A") == stored_versions(tmp_path / "replica")


def test_a_worker_joining_and_leaving_mid_stream_loses_and_repeats_nothing(kafka_broker: EmbeddedBroker,
                                                                           topics: TopicSettings,
                                                                           tmp_path: Path, logged: StartLogged) -> None:
    """Scale out and back in while events flow, as an operator does with `run`. A runs alone; B joins
    the group while A is busy, the group moves half of the input partitions to B, and B takes A's part
    of them from the log; B applies more there and is stopped (SIGTERM) as more events arrive; the
    partitions move back to A, which rebuilds them from the log (B's batches are there) and goes on.
    Nothing is lost or applied twice: every input is read once by the group, A ends with `load`'s edge
    versions, each version is on the log once in its final state, every correction is emitted, and a
    replica of the log holds what A holds. A's rebuilds replay the logs from where A gave the
    partitions up to B, not from the beginning."""
    bootstrap, group = kafka_broker.bootstrap, "g-scale"
    parts = [tmp_path / f"part{index}.jsonl" for index in range(5)]
    produced = sum(write_events(part, 100, seed=10 * index, id_prefix=f"p{index}") for index, part in enumerate(parts))
    load_into(tmp_path / "load", parts, simulated_clock=False, ontology_path=None)
    ids = [event_ids(part) for part in parts]

    def applied_by_the_group(upto: int) -> bool:
        seen = seen_event_ids(tmp_path / "A") | seen_event_ids(tmp_path / "B")
        return all(part <= seen for part in ids[:upto + 1])

    workers: dict[str, LogPipe] = {}
    produce_files([parts[0]], bootstrap, topics, progress=False)
    workers["A"] = logged(tmp_path / "A", bootstrap, topics, group)
    wait_until(lambda: applied_by_the_group(0), "A applied the first part", 60)
    workers["B"] = logged(tmp_path / "B", bootstrap, topics, group)
    produce_files([parts[1]], bootstrap, topics, progress=False)
    wait_until(lambda: all(holds_partitions(w) for w in workers.values()), "the group split the partitions", 60)
    wait_until(lambda: applied_by_the_group(1), "the group applied the second part", 60)
    produce_files([parts[2]], bootstrap, topics, progress=False)
    wait_until(lambda: applied_by_the_group(2), "the two workers applied the third part", 60)
    produce_files([parts[3]], bootstrap, topics, progress=False)
    left = stop_logged(workers["B"])
    produce_files([parts[4]], bootstrap, topics, progress=False)
    wait_until(lambda: set().union(*ids) <= seen_event_ids(tmp_path / "A"), "A applied every part", 90)
    stayed = stop_logged(workers["A"])

    read = {"A": stayed["events_read"], "B": left["events_read"]}
    assert read["B"] > 0 and sum(read.values()) == produced, f"every input read once by the group: {read} of {produced}"
    replicate(tmp_path / "replica", bootstrap, topics)
    assert_each_holds_loads_versions(tmp_path, ("A", "replica"))
    assert_exactly_once_effect(bootstrap, topics, tmp_path / "load")
    taken_back = [re.search(r" rebuilt partition (\d+) from (\d+) log records \(offset (\d+) on\)", line)
                  for _, line in workers["A"].stderr if " rebuilt partition " in line]
    assert taken_back and all(found is not None for found in taken_back), "A took B's partitions back from the log"
    homes = {tenant_partition(tenant, topics.partitions_for(Topic.EDGE_VERSIONS)) for tenant in TENANTS}
    starts = {int(found[1]): int(found[3]) for found in taken_back if found is not None}
    assert starts.keys() & homes and all(starts[partition] > 0 for partition in starts.keys() & homes), (
        f"A replayed only what B added to the logs it had written to: {starts}, tenants on {sorted(homes)}")


def test_a_batch_a_dropped_worker_sends_after_the_new_owners_fence_is_dropped_and_its_state_rebuilt(
        kafka_broker: EmbeddedBroker, topics: TopicSettings, tmp_path: Path, logged: StartLogged) -> None:
    """The window the membership check leaves: A commits its first batch, the group confirms it a
    member, and A is paused (SIGSTOP) right before it sends, long enough for the group to evict it.
    B takes the partitions over, fences the log and applies the whole stream. A resumes and sends its
    batch: it lands after B's fence with A's lower epoch, and no reader applies it. A, back in the
    group, rebuilds from the log, finds its own batch dropped there, discards its state and rebuilds
    it from scratch: it ends with B's versions, transaction times included, as a replica has them."""
    bootstrap = kafka_broker.bootstrap
    paused, produced, release = paused_at_its_first_batch(tmp_path, bootstrap, topics, "g-window", logged,
                                                          "--hold-after-check")
    assert run_through(tmp_path / "B", bootstrap, topics, "g-window")["events_read"] == produced
    release.touch()
    resumed_at = time.time()
    os.kill(paused.process.pid, signal.SIGCONT)
    run_on_to_the_end(paused, tmp_path / "A", input_ends(bootstrap, topics), resumed_at)

    a_id = next(match.group(1) for _, line in paused.stderr if (match := re.search(r"worker (\w+) consuming", line)))
    late = 0
    for records in read_partitions(bootstrap, topics.name(Topic.EDGE_VERSIONS)).values():
        a_fence = next(tuple(r["epoch"]) for r in records if r["kind"] == "fence" and r["worker"] == a_id)
        b_fence = next(i for i, r in enumerate(records) if r["kind"] == "fence" and r["worker"] != a_id)
        assert tuple(records[b_fence]["epoch"]) > a_fence
        a_batch = [i for i, r in enumerate(records) if r["kind"] == "batch" and r["batch"].startswith(f"{a_id}-1-")]
        assert all(i > b_fence for i in a_batch), "A's batch landed after B's fence"
        late += len(a_batch)
    assert late, "A sent its batch"
    assert any(" discards its local state" in line for _, line in paused.stderr), paused.tail()
    replicate(tmp_path / "replica", bootstrap, topics)
    assert_each_holds_loads_versions(tmp_path, ("B", "A", "replica"))
    assert stored_versions(tmp_path / "B") == stored_versions(tmp_path / "replica")
    assert stored_versions(tmp_path / "A") == stored_versions(tmp_path / "replica"), (
        "A holds the versions as the log has them, with B's transaction times, not its own batch's")


def test_a_worker_that_comes_back_in_a_group_made_anew_fences_in_the_next_era(
        kafka_broker: EmbeddedBroker, topics: TopicSettings, tmp_path: Path) -> None:
    """A applies a stream in one group, then comes back with its state in a new group (another
    `--group`; or its offsets expired), whose generations start again below the fences A wrote. The
    group confirms A a member, A fences its partitions in the next era, and a replica applies the
    batches of both groups: it ends with `load`'s versions, as A does."""
    bootstrap, first, second = kafka_broker.bootstrap, tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    write_events(first, 100)
    write_events(second, 100, seed=7, id_prefix="more")
    load_into(tmp_path / "load", [first, second], simulated_clock=False, ontology_path=None)
    produce_files([first], bootstrap, topics, progress=False)
    for _ in range(3):  # a few rebalances, so that the old group's generations are above the new one's first
        run_through(tmp_path / "A", bootstrap, topics, "g-old-group")
    produce_files([second], bootstrap, topics, progress=False)
    run_through(tmp_path / "A", bootstrap, topics, "g-new-group")

    replicate(tmp_path / "replica", bootstrap, topics)
    assert_each_holds_loads_versions(tmp_path, ("A", "replica"))
    assert stored_versions(tmp_path / "A") == stored_versions(tmp_path / "replica")
    fences = [tuple(record["epoch"]) for record in read_topic(bootstrap, topics.name(Topic.EDGE_VERSIONS))
              if record["kind"] == "fence"]
    assert max(fences)[0] == 1 and any(era == 0 and generation > 0 for era, generation in fences), (
        f"the old group's fences, then the new group's in the next era: {fences}")
