"""A batch across workers: one another worker redid, a redo cut short, a batch that lost a record on
its way to the log, one sent but never committed. None is applied twice, short, or over newer records.

Each test builds its scenario on the session's embedded broker with topics of its own, runs the
workers as subprocesses of ``tests.support.faulty_worker`` (with a fault where one must fail), and
compares what they hold with `load` of the same input or with each other (``tests.support.failover``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.topics import Topic
from streams.cli.load import load_into
from streams.kafka.broker import EmbeddedBroker
from streams.kafka.produce import produce_files
from streams.kafka.topics import TopicSettings
from tests.support.failover import (
    CRASH_AFTER_COMMIT,
    CRASH_MID_SEND,
    LOSE_RECORD,
    TENANTS,
    assert_each_holds_loads_versions,
    b_sends_and_dies_before_the_offset_commit,
    count_rows,
    crash_at,
    run_through,
    stale_adjacency,
    state_difference,
    stored_versions,
    write_events,
)
from tests.support.pipeline import batch_records, read_topic
from tests.support.workers import replicate

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("per_tenant", [750, 100], ids=["B goes past the batch", "B redoes just the batch"])
def test_a_batch_redone_by_another_worker_is_not_resent_over_it(kafka_broker: EmbeddedBroker, topics: TopicSettings,
                                                                tmp_path: Path, per_tenant: int) -> None:
    """A commits its first batch and dies before sending it; B redoes the whole stream; A comes back
    with that batch still in its outbox. Sent after B's records, A's stale copies must not undo them.
    With 100 events per tenant, A's first batch is (nearly) the whole stream, so B's redo ends where
    it ends: the group's offset is then no further than A's own state, and only the batch's first
    offset tells that B applied it."""
    bootstrap, events = kafka_broker.bootstrap, tmp_path / "events.jsonl"
    produced = write_events(events, per_tenant)
    load_into(tmp_path / "load", [events], simulated_clock=False, ontology_path=None)
    produce_files([events], bootstrap, topics, progress=False)

    crash_at(CRASH_AFTER_COMMIT, tmp_path / "A", bootstrap, topics, "g-redone")
    assert 0 < count_rows(tmp_path / "A", b"I") <= produced, "A died after committing (part of) the stream"

    taking_over = run_through(tmp_path / "B", bootstrap, topics, "g-redone")
    assert taking_over["events_read"] == produced, "B redid A's unsent batch and the rest"
    run_through(tmp_path / "A", bootstrap, topics, "g-redone")
    replicate(tmp_path / "replica", bootstrap, topics)

    assert_each_holds_loads_versions(tmp_path, ("B", "A", "replica"))


def test_a_redo_cut_short_keeps_the_batch_it_redid_from_being_resent(kafka_broker: EmbeddedBroker,
                                                                     topics: TopicSettings, tmp_path: Path) -> None:
    """A commits its first batch and dies before sending it. B takes over, redoes that batch and dies
    while sending it: one tenant's part of the redo is whole on the log, the rest is not, and B
    never commits offsets, so the group's offset says nothing happened. A comes back with its batch
    still parked; re-sent, that batch would be applied over B's whole part. B's claim on the
    partitions tells A, which discards its state and rebuilds from the log instead."""
    bootstrap, events = kafka_broker.bootstrap, tmp_path / "events.jsonl"
    write_events(events, 100)
    load_into(tmp_path / "load", [events], simulated_clock=False, ontology_path=None)
    produce_files([events], bootstrap, topics, progress=False)

    crash_at(CRASH_AFTER_COMMIT, tmp_path / "A", bootstrap, topics, "g-cut-short")
    crash_at(CRASH_MID_SEND, tmp_path / "B", bootstrap, topics, "g-cut-short")
    markers = [record for record in read_topic(bootstrap, topics.name(Topic.EDGE_VERSIONS))
               if record.get("kind") == "batch"]
    assert len(markers) == 1 and markers[0]["tenant"] in TENANTS, (
        "B's redo is cut short after its first tenant's marker")

    run_through(tmp_path / "A", bootstrap, topics, "g-cut-short")
    replicate(tmp_path / "replica", bootstrap, topics)
    assert_each_holds_loads_versions(tmp_path, ("A", "replica"))


@pytest.mark.parametrize("taker", ["A", "B"], ids=["A re-sends it", "B rebuilds past it"])
def test_a_batch_that_lost_a_record_on_its_way_to_the_log_is_not_applied_short(
        kafka_broker: EmbeddedBroker, topics: TopicSettings, tmp_path: Path, taker: str) -> None:
    """A's first batch loses an edge version record on its way to the log (a delivery that timed out)
    while the rest arrive, its markers with them, and A stops on the failure. Either A comes back and
    re-sends the batch from its outbox, or B takes the partitions over and rebuilds them from the
    log. Either way the worker and a replica of the whole log end with `load`'s edge versions: no
    reader applies that batch without the record, and B applies its inputs itself."""
    bootstrap, events = kafka_broker.bootstrap, tmp_path / "events.jsonl"
    write_events(events, 250)
    load_into(tmp_path / "load", [events], simulated_clock=False, ontology_path=None)
    produce_files([events], bootstrap, topics, progress=False)

    crash_at(LOSE_RECORD, tmp_path / "A", bootstrap, topics, "g-lost-record")
    logged = batch_records(bootstrap, topics)
    markers = [record for record in logged if record.get("kind") == "batch"]
    assert markers and sum(marker["records"] for marker in markers) == len(logged) - len(markers) + 1, (
        "the markers count one record more than the log holds")

    run_through(tmp_path / taker, bootstrap, topics, "g-lost-record")
    replicate(tmp_path / "replica", bootstrap, topics)
    assert_each_holds_loads_versions(tmp_path, (taker, "replica"))


def test_a_batch_another_worker_sent_but_never_committed_is_not_redone(kafka_broker: EmbeddedBroker,
                                                                      topics: TopicSettings, tmp_path: Path) -> None:
    """A applies the first part and stops. B takes the partitions over, applies the second part,
    sends it and dies before the group commits its offsets. A comes back: by the group's offsets it
    is not behind, but B's claim says another state owned the partitions since, so A rebuilds them
    from the log (taking B's batch) rather than applying the second part again over it."""
    bootstrap = kafka_broker.bootstrap
    b_sends_and_dies_before_the_offset_commit(tmp_path, bootstrap, topics, "g-uncommitted")

    run_through(tmp_path / "A", bootstrap, topics, "g-uncommitted")
    replicate(tmp_path / "replica", bootstrap, topics)
    holders = ("A", "replica")
    versions = {name: state_difference(tmp_path / name, tmp_path / "load") for name in holders}
    assert versions == dict.fromkeys(holders, "same"), "each holds load's edge versions"
    assert {name: stale_adjacency(tmp_path / name)[:3] for name in holders} == {name: [] for name in holders}
    assert stored_versions(tmp_path / "A") == stored_versions(tmp_path / "replica"), (
        "A holds the versions as the log has them, with B's transaction times, not a redo of its own")
