"""`adapt debezium --bootstrap` on the embedded broker: Debezium topics in, the ledger's inputs out.

The sample feeds go to one topic per table, as Debezium writes them. The streamed route reaches the
same ledger state as the files route (`adapt debezium FILE | produce -`); a second run of the same
group resumes after its committed offsets and still resolves rows read by the first; a third group
reads everything again and the ledger finds nothing new in it."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable
from pathlib import Path

import orjson
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from typer.testing import CliRunner

from processors.feeds.debezium import DebeziumAdapter
from processors.feeds.output import FeedCounts
from schemas.feed_mapping import load_mapping
from schemas.ontology import default_ontology
from schemas.topics import Topic
from state.changes import versions_changed_since
from streams.cli.main import app
from streams.feeds.stream import StreamSettings, adapt_stream
from streams.kafka.config import FAST_GROUP_OVERRIDES
from streams.kafka.produce import Message as OutMessage
from streams.kafka.produce import deliver, delivery_producer
from streams.kafka.topics import TopicSettings
from tests.support.harness import Ledger
from tests.support.kafka import read_all
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "feeds"
MAPPING = ROOT / "deploy" / "feeds" / "servicenow-cmdb.yaml"
TABLES = ("cmdb_ci", "cmdb_rel_ci", "sys_user_group")


def create_topics(bootstrap: str, topics: list[str], partitions: int) -> None:
    """Debezium's topics, as its connector would have made them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until its futures are done
    created = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)
                                   for topic in topics])
    for future in created.values():
        future.result(timeout=15)


def debezium_records(path: Path) -> list[tuple[str, bytes, bytes | None]]:
    """(table, key, value) of each line, as the connector keys them (by row key; a tombstone has no value)."""
    records, last = [], None
    for line in path.read_bytes().splitlines():
        document = orjson.loads(line)
        if document is None:
            assert last is not None
            records.append((last[0], last[1], None))
            continue
        payload = document.get("payload", document)
        row = payload["after"] or payload["before"]
        last = (payload["source"]["table"], row["sys_id"].encode())
        records.append((*last, line))
    return records


def run_adapter(bootstrap: str, settings: StreamSettings, rows: int) -> FeedCounts:
    """The streaming adapter in a thread, stopped once it has read ``rows`` rows and none waits; the round
    in hand is delivered and committed before it returns."""
    adapter = DebeziumAdapter(load_mapping(MAPPING, default_ontology()), "acme", default_ontology())
    stop = threading.Event()
    failed: list[BaseException] = []

    def work() -> None:
        try:
            adapt_stream(adapter, settings, stop)
        except BaseException as error:  # reported by the test, not lost in a thread
            failed.append(error)
            stop.set()

    worker = threading.Thread(target=work)
    worker.start()
    wait_until(lambda: stop.is_set() or (adapter.counts.rows >= rows and adapter.counts.held == 0),
               f"the adapter to read {rows} rows", timeout=60)
    stop.set()
    worker.join(timeout=30)
    assert not failed, failed
    assert not worker.is_alive()
    return adapter.counts


def believed(change_lines: list[bytes]) -> set[tuple]:
    """The ledger's believed edges, both clocks aside, after applying ``change_lines`` in order."""
    ledger = Ledger()
    ledger.send(*change_lines)
    assert ledger.counts.balanced() and ledger.counts.dead_lettered == 0
    return {(v.src, v.rel, v.dst, v.valid_from, v.valid_to, v.phrase, v.evidence, v.source_record)
            for v in versions_changed_since(ledger.store, "acme", -(1 << 62)) if v.tx_to is None}


def test_streaming_reaches_the_state_of_the_files_route_exactly_once(kafka_broker, tmp_path: Path) -> None:
    bootstrap, run = kafka_broker.bootstrap, uuid.uuid4().hex[:8]
    source_topics = {table: f"cmdb{run}.public.{table}" for table in TABLES}
    create_topics(bootstrap, list(source_topics.values()), partitions=2)
    ledger_topics = TopicSettings(prefix=f"led{run}.")
    settings = StreamSettings(bootstrap, tuple(source_topics.values()), f"adapt-{run}", ledger_topics.prefix,
                              heartbeat_interval=3600, consumer_overrides=dict(FAST_GROUP_OVERRIDES))
    first = debezium_records(DATA / "cmdb-debezium.jsonl")
    second = debezium_records(DATA / "cmdb-debezium-schema.jsonl")

    def send(records: list[tuple[str, bytes, bytes | None]]) -> None:
        deliver(delivery_producer(bootstrap), [(source_topics[table], key, value) for table, key, value in records])

    send(first)
    counts = run_adapter(bootstrap, settings, len(first))
    assert (counts.rows, counts.events, counts.dead_lettered, counts.heartbeats) == (len(first), 11, 0, 1)
    send(second)
    resumed = run_adapter(bootstrap, settings, len(second))  # the same group: only the new rows
    assert (resumed.rows, resumed.events, resumed.dead_lettered) == (2, 2, 0)
    streamed = [message.value() for message in read_all(bootstrap, ledger_topics.name(Topic.SOURCE_CHANGES))]

    files_route = TopicSettings(prefix=f"files{run}.")
    adapted = CliRunner().invoke(app, ["adapt", "debezium", "--mapping", str(MAPPING), "--tenant", "acme",
                                       str(DATA / "cmdb-debezium.jsonl"), str(DATA / "cmdb-debezium-schema.jsonl")])
    produced = CliRunner().invoke(app, ["produce", "-", "--bootstrap", bootstrap, "--topic-prefix",
                                        files_route.prefix, "--quiet"], input=adapted.stdout)
    assert produced.exit_code == 0, produced.output
    from_files = [message.value() for message in read_all(bootstrap, files_route.name(Topic.SOURCE_CHANGES))]

    assert len(streamed) == len(from_files) == 13
    assert believed(streamed) == believed(from_files)

    again = run_adapter(bootstrap, StreamSettings(**{**settings.__dict__, "group": f"again-{run}"}),
                        len(first) + len(second))
    assert again.events == 13
    replayed = [message.value() for message in read_all(bootstrap, ledger_topics.name(Topic.SOURCE_CHANGES))]
    ledger = Ledger()
    ledger.send(*replayed)
    assert ledger.counts.duplicates == 13 and ledger.counts.applied == 13


@pytest.mark.parametrize("record", [b"[1, 2]"])
def test_streamed_bad_rows_go_to_the_dead_letter_topic_and_heartbeats_flow(kafka_broker, record: bytes) -> None:
    bootstrap, run = kafka_broker.bootstrap, uuid.uuid4().hex[:8]
    topic = f"cmdb{run}.public.cmdb_ci"
    create_topics(bootstrap, [topic], partitions=1)
    deliver(delivery_producer(bootstrap), [(topic, b"k", record)])
    ledger_topics = TopicSettings(prefix=f"led{run}.")
    settings = StreamSettings(bootstrap, (topic,), f"adapt-{run}", ledger_topics.prefix, heartbeat_interval=0.1,
                              consumer_overrides=dict(FAST_GROUP_OVERRIDES))

    counts = run_adapter(bootstrap, settings, 1)

    [letter] = [orjson.loads(m.value()) for m in read_all(bootstrap, ledger_topics.name(Topic.DEAD_LETTER))]
    assert (letter["kind"], letter["rule"], letter["input"]) == \
        ("adapter_dead_letter", "debezium envelope", {"topic": topic, "partition": 0, "offset": 0})
    beats = read_all(bootstrap, ledger_topics.name(Topic.SOURCE_HEARTBEATS))
    assert len(beats) == counts.heartbeats >= 1
    assert orjson.loads(beats[0].value())["source"] == {"system": "cmdb"}


def test_a_round_that_was_not_delivered_is_not_committed_and_is_read_again(kafka_broker, monkeypatch) -> None:
    bootstrap, run = kafka_broker.bootstrap, uuid.uuid4().hex[:8]
    topic = f"cmdb{run}.public.cmdb_ci"
    create_topics(bootstrap, [topic], partitions=1)
    records = [(table, key, value) for table, key, value in debezium_records(DATA / "cmdb-debezium.jsonl")
               if table in ("cmdb_ci", "sys_user_group") and value is not None]
    deliver(delivery_producer(bootstrap), [(topic, key, value) for _, key, value in records])
    ledger_topics = TopicSettings(prefix=f"led{run}.")
    settings = StreamSettings(bootstrap, (topic,), f"adapt-{run}", ledger_topics.prefix, heartbeat_interval=3600,
                              consumer_overrides=dict(FAST_GROUP_OVERRIDES))
    import streams.feeds.stream as stream

    def broker_lost_for_changes(producer: object, messages: Iterable[OutMessage], *args: object) -> int:
        """Heartbeats go out; the round holding the first change events is never confirmed."""
        messages = list(messages)
        if any(b'"kind":"change"' in message[2] for message in messages):
            raise RuntimeError(f"{len(messages)} of {len(messages)} records were not delivered: broker lost")
        return deliver(producer, messages, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(stream, "deliver", broker_lost_for_changes)
    adapter = DebeziumAdapter(load_mapping(MAPPING, default_ontology()), "acme", default_ontology())
    with pytest.raises(RuntimeError, match="not delivered"):
        adapt_stream(adapter, settings, threading.Event())
    monkeypatch.undo()

    again = run_adapter(bootstrap, settings, len(records))  # the same group: nothing was committed

    assert again.rows == len(records) and again.events == 6
    assert len(read_all(bootstrap, ledger_topics.name(Topic.SOURCE_CHANGES))) == 6
