"""The streaming pipeline on the embedded broker: same state as `load`, dead letters, counts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.topics import Topic, tenant_partition
from streams.cli.demo import DEMO_EVENTS
from streams.cli.load import load_into
from streams.kafka.config import FAST_GROUP_OVERRIDES
from streams.kafka.produce import deliver, delivery_producer, produce_files
from streams.kafka.topics import TopicSettings, ensure_topics
from streams.worker.loop import LedgerWorker, WorkerConfig
from tests.support.pipeline import comparable_state, fresh_topics, read_topic
from tests.support.workers import input_ends, run_to_the_end, worker_done

pytestmark = pytest.mark.integration


def test_produced_events_reach_the_same_state_as_load(kafka_broker, tmp_path: Path) -> None:
    topics = fresh_topics()
    ensure_topics(kafka_broker.bootstrap, topics)
    produce_files([Path(str(DEMO_EVENTS))], kafka_broker.bootstrap, topics, progress=False)
    summary = run_to_the_end(tmp_path / "run", kafka_broker.bootstrap, topics, "g-same").summary()
    loaded = load_into(tmp_path / "load", [Path(str(DEMO_EVENTS))], simulated_clock=False, ontology_path=None)
    assert summary == loaded, "the same processors give the same counts"
    assert comparable_state(tmp_path / "run") == comparable_state(tmp_path / "load")

GOOD_CHANGE = {"kind": "change", "event_id": "ok-1", "tenant": "acme", "source": {"system": "cmdb"},
               "detected_at": "2026-05-01T00:00:00Z",
               "assert": [{"src": {"type": "Service", "id": "cmdb:S1"}, "rel": "depends_on",
                           "dst": {"type": "Host", "id": "cmdb:H1"}}]}
"""A change event the worker applies: the one good event among poison."""


def test_poison_messages_are_dead_lettered_and_the_stream_goes_on(kafka_broker, tmp_path: Path) -> None:
    topics = fresh_topics()
    ensure_topics(kafka_broker.bootstrap, topics)
    good = GOOD_CHANGE
    poison = ["{not json", json.dumps({"kind": "teleport", "event_id": "x", "tenant": "acme"}),
              json.dumps({**good, "event_id": "bad-rel", "assert": [{**good["assert"][0], "rel": "likes"}]})]
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join([*poison, json.dumps(good)]) + "\n")
    produce_files([events], kafka_broker.bootstrap, topics, progress=False)
    summary = run_to_the_end(tmp_path / "state", kafka_broker.bootstrap, topics, "g-poison").summary()
    assert (summary["events_read"], summary["applied"], summary["dead_lettered"]) == (4, 1, 3)
    assert summary["balanced"]
    letters = read_topic(kafka_broker.bootstrap, topics.name(Topic.DEAD_LETTER))
    assert sorted(letter["stage"] for letter in letters) == ["apply", "decode", "validate"]
    assert {letter["original"] for letter in letters} == set(poison)
    assert all(letter["reason"] for letter in letters)
    read_from = {(letter["input_topic"], letter["input_partition"], letter["input_offset"]) for letter in letters}
    assert len(read_from) == 3 and {topic for topic, _, _ in read_from} == {topics.name(Topic.SOURCE_CHANGES)}
    assert all(isinstance(partition, int) and isinstance(offset, int) for _, partition, offset in read_from)
    text = subprocess.run([sys.executable, "-m", "streams.cli.main", "dead-letters", "--state", str(tmp_path / "state"),
                           "--tenant", "acme"], capture_output=True, text=True, check=True).stdout
    assert f"(read from {topics.name(Topic.SOURCE_CHANGES)}[" in text, "the state's letters say where too"


def test_a_record_off_its_tenants_partition_is_dead_lettered_not_applied(kafka_broker, tmp_path: Path) -> None:
    """A tenant's state lives with the partition its key hashes to: a record elsewhere (another key, no
    key, another partitioner) would be applied by whichever worker holds that partition, beside a second,
    diverging copy of the tenant's state. It is dead-lettered with the partition it belongs on."""
    topics = fresh_topics()
    ensure_topics(kafka_broker.bootstrap, topics)
    partitions = topics.partitions_for(Topic.EDGE_VERSIONS)
    home = tenant_partition("acme", partitions)
    stray = json.dumps({**GOOD_CHANGE, "event_id": "stray"}).encode()
    deliver(delivery_producer(kafka_broker.bootstrap),
            [(topics.name(Topic.SOURCE_CHANGES), b"acme", stray, (home + 1) % partitions)])
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps(GOOD_CHANGE) + "\n")
    produce_files([events], kafka_broker.bootstrap, topics, progress=False)
    summary = run_to_the_end(tmp_path / "state", kafka_broker.bootstrap, topics, "g-stray").summary()
    assert (summary["events_read"], summary["applied"], summary["dead_lettered"], summary["balanced"]) == (
        2, 1, 1, True)
    [letter] = read_topic(kafka_broker.bootstrap, topics.name(Topic.DEAD_LETTER))
    assert (letter["stage"], letter["tenant"], letter["event_id"]) == ("validate", "acme", "stray")
    assert letter["reason"].startswith(f"misrouted: events of tenant 'acme' belong on partition {home} of ")


def test_a_worker_refuses_input_topics_partitioned_unlike_the_log(kafka_broker, tmp_path: Path) -> None:
    topics = TopicSettings(prefix=fresh_topics().prefix, partitions={Topic.SOURCE_CHANGES: 8})
    ensure_topics(kafka_broker.bootstrap, topics)
    worker = LedgerWorker(WorkerConfig(tmp_path / "state", kafka_broker.bootstrap, group_id="g-uneven",
                                       topics=topics, consumer_overrides=dict(FAST_GROUP_OVERRIDES)))
    with pytest.raises(ValueError, match=rf"as many partitions as {topics.prefix}edge-versions \(4\).*"
                                         rf": {topics.prefix}source-changes has 8$"):
        worker.run(until=lambda: True)


def test_the_worker_reports_consumer_lag_from_its_fetches(kafka_broker, tmp_path: Path) -> None:
    topics = fresh_topics()
    ensure_topics(kafka_broker.bootstrap, topics)
    produce_files([Path(str(DEMO_EVENTS))], kafka_broker.bootstrap, topics, progress=False)
    reports: list[tuple[str, int, int]] = []
    config = WorkerConfig(tmp_path / "state", kafka_broker.bootstrap, group_id="g-lag", topics=topics,
                          consumer_overrides=dict(FAST_GROUP_OVERRIDES))
    worker = LedgerWorker(config, on_consumer_lag=lambda *report: reports.append(report), lag_interval=0.0)
    caught_up, reports_then = worker_done(worker, input_ends(kafka_broker.bootstrap, topics)), []

    def reported_after_catching_up() -> bool:
        if not reports_then and caught_up():
            reports_then.append(len(reports))
        return bool(reports_then) and len(reports) > reports_then[0]

    totals = worker.run(until=reported_after_catching_up)
    assert totals.applied > 0
    fed = {(topic, partition) for topic, partition, _ in reports}
    assert fed and all(topic.startswith(topics.prefix) for topic, _ in fed)
    last = {(topic, partition): lag for topic, partition, lag in reports}
    assert set(last.values()) == {0}, "caught up: nothing left behind the watermark"


def test_an_event_too_large_to_produce_is_named_and_loses_nothing_before_it(own_broker, tmp_path: Path) -> None:
    """A wide snapshot (2.3 MB) goes through: edgeledger's producers and topics take records up to
    16 MiB, not Kafka's default 1 MB. An event beyond that is refused by the producer: produce must say
    which line, and the events it had already accepted must still be delivered, not dropped with it."""
    import subprocess
    import sys

    from streams.kafka.config import MAX_RECORD_BYTES

    topics = fresh_topics()
    ensure_topics(own_broker.bootstrap, topics)
    beat = {"kind": "heartbeat", "tenant": "acme", "source": {"system": "cmdb"}, "detected_at": "2026-05-01T00:00:00Z"}

    def snapshot(event_id: str, edges: int) -> dict:
        return {"kind": "change", "event_id": event_id, "tenant": "acme", "detected_at": "2026-05-01T00:00:00Z",
                "mode": "snapshot", "source": {"system": "policy", "record": f"pol/{event_id}"},
                "assert": [{"src": {"type": "Policy", "id": "pol:SOC2"}, "rel": "applies_to",
                            "dst": {"type": "Service", "id": f"cmdb:S{n}"}} for n in range(edges)]}

    wide, too_wide = json.dumps(snapshot("wide", 20_000)), json.dumps(snapshot("too-wide", 150_000))
    assert 1_000_000 < len(wide) < MAX_RECORD_BYTES < len(too_wide)
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join([json.dumps({**beat, "event_id": "b1"}), wide, json.dumps({**beat, "event_id": "b2"}),
                                 too_wide, json.dumps({**beat, "event_id": "b3"})]) + "\n")

    done = subprocess.run([sys.executable, "-m", "streams.cli.main", "produce", str(events), "--bootstrap",
                           own_broker.bootstrap, "--topic-prefix", topics.prefix, "--quiet"],
                          capture_output=True, text=True, timeout=120)

    assert done.returncode == 2
    message = done.stderr.strip().splitlines()
    assert len(message) == 1 and message[0].startswith(f"edgeledger: error: {events}:4: the event is "), message
    assert "Traceback" not in done.stderr and "The 3 events before it were sent" in message[0]
    delivered = read_topic(own_broker.bootstrap, topics.name(Topic.SOURCE_HEARTBEATS))
    assert sorted(record["event_id"] for record in delivered) == ["b1", "b2"]
    [change] = read_topic(own_broker.bootstrap, topics.name(Topic.SOURCE_CHANGES))
    assert change["event_id"] == "wide" and len(change["assert"]) == 20_000


def test_a_dead_letter_too_large_for_kafka_does_not_stop_the_worker(own_broker, tmp_path: Path) -> None:
    """An event that fits in a record can still make a dead letter that does not: its original text,
    JSON-escaped inside the dead letter, grows. The worker must dead-letter it and go on, not refuse the
    record and die at every restart; the full text stays in the ledger's state."""
    from processors.outbox import ORIGINAL_KEPT
    from state.open import reading
    from streams.kafka.config import MAX_RECORD_BYTES

    topics = fresh_topics()
    ensure_topics(own_broker.bootstrap, topics)
    good = GOOD_CHANGE
    huge = json.dumps({**good, "event_id": "huge", "notes": "\x01" * 2_700_000})  # an unknown field; 16 MB
    assert len(huge) < MAX_RECORD_BYTES < len(json.dumps({"original": huge}))
    events = tmp_path / "events.jsonl"
    events.write_text(huge + "\n" + json.dumps(good) + "\n")
    produce_files([events], own_broker.bootstrap, topics, progress=False)

    summary = run_to_the_end(tmp_path / "state", own_broker.bootstrap, topics, "g-huge").summary()

    assert (summary["events_read"], summary["applied"], summary["dead_lettered"]) == (2, 1, 1)
    [letter] = read_topic(own_broker.bootstrap, topics.name(Topic.DEAD_LETTER))
    assert letter["stage"] == "validate" and "unknown field" in letter["reason"]
    assert letter["original_truncated"] is True and letter["original_length"] == len(huge)
    assert letter["original"] == huge[:ORIGINAL_KEPT]
    with reading(tmp_path / "state") as store:
        assert [d.original for d in store.dead_letters()] == [huge]


def test_merges_and_splits_through_the_worker_reach_the_same_identities_as_load(kafka_broker, tmp_path: Path) -> None:
    """Identity commands travel on their own topic, so they are produced once the changes they name are
    applied (as an operator issues them); the worker and ``load`` then hold the same merges."""
    from state.open import reading

    changes, commands = tmp_path / "changes.jsonl", tmp_path / "commands.jsonl"
    changes.write_text(json.dumps({**GOOD_CHANGE, "assert": [
        {"src": {"type": "Service", "id": "cmdb:S1"}, "rel": "depends_on", "dst": {"type": "Host", "id": "cmdb:H1"}},
        {"src": {"type": "Service", "id": "cmdb:S9"}, "rel": "depends_on", "dst": {"type": "Host", "id": "cmdb:H9"}},
        {"src": {"type": "Service", "id": "cmdb:S8"}, "rel": "depends_on", "dst": {"type": "Host", "id": "cmdb:H9"}},
        {"src": {"type": "Service", "name": "billing"}, "rel": "depends_on", "dst": {"type": "Host", "id": "cmdb:H1"}},
    ]}) + "\n")
    merge = {"kind": "merge", "tenant": "acme", "actor": "alice", "reason": "one service"}
    commands.write_text("".join(json.dumps(e) + "\n" for e in [
        {**merge, "event_id": "m-1", "keep": "Service:cmdb:S1", "absorb": "Service:cmdb:S9"},
        {**merge, "event_id": "m-2", "keep": "Service:cmdb:S1", "absorb": "Service:cmdb:S8"},
        {"kind": "split", "event_id": "s-1", "tenant": "acme", "merge": "m-1", "actor": "bob"},
        {**merge, "event_id": "m-bad", "keep": "Service:cmdb:S1", "absorb": "Service:cmdb:S8"},
    ]))
    topics = fresh_topics()
    ensure_topics(kafka_broker.bootstrap, topics)
    produce_files([changes], kafka_broker.bootstrap, topics, progress=False)
    run_to_the_end(tmp_path / "run", kafka_broker.bootstrap, topics, "g-merges")
    produce_files([commands], kafka_broker.bootstrap, topics, progress=False)
    run_to_the_end(tmp_path / "run", kafka_broker.bootstrap, topics, "g-merges")
    load_into(tmp_path / "load", [changes, commands], simulated_clock=False, ontology_path=None)

    def identities(state: Path) -> tuple[list[tuple], list[str | None]]:
        with reading(state) as store:
            merges = [(m.merge_id, m.keep, m.absorb, m.actor, m.tx_to is None, m.split_id)
                      for m in store.merges("acme")]
            letters = sorted(d.event_id for d in store.dead_letters() if d.tenant == "acme")
        return merges, letters

    ran, loaded = identities(tmp_path / "run"), identities(tmp_path / "load")
    assert ran == loaded
    assert [m[:3] for m in ran[0]] == [("m-1", "Service:cmdb:S1", "Service:cmdb:S9"),
                                       ("m-2", "Service:cmdb:S1", "Service:cmdb:S8")]
    assert ran[1] == ["m-bad"]
