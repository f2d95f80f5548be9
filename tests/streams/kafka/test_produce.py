"""``deliver`` against the embedded broker: what it sends arrives, and a failure is never silent."""

from __future__ import annotations

import json
import socket
import uuid

import pytest

from schemas.topics import Topic
from streams.kafka.broker import EmbeddedBroker
from streams.kafka.produce import deliver, delivery_producer, route
from streams.kafka.topics import TopicSettings, ensure_topics
from tests.support.kafka import read_all


def test_every_record_arrives_with_failure_only_reports(kafka_broker: EmbeddedBroker) -> None:
    topics = TopicSettings(prefix=f"deliver{uuid.uuid4().hex[:6]}.")
    ensure_topics(kafka_broker.bootstrap, topics)
    topic = topics.name(Topic.DEAD_LETTER)
    records = [(topic, b"acme", b'{"n": %d}' % n) for n in range(500)]

    sent = deliver(delivery_producer(kafka_broker.bootstrap), records, timeout=30)

    assert sent == 500
    arrived = [json.loads(message.value()) for message in read_all(kafka_broker.bootstrap, topic)]
    assert sorted(record["n"] for record in arrived) == list(range(500))


def test_records_that_cannot_be_delivered_raise_with_failure_only_reports(kafka_broker: EmbeddedBroker) -> None:
    """The worker's producer reports failures alone: they must still reach ``deliver``."""
    missing = f"deliver-missing-{uuid.uuid4().hex[:6]}"  # never created; the producer may not create it
    producer = delivery_producer(kafka_broker.bootstrap, **{"message.timeout.ms": 500})

    with pytest.raises(RuntimeError, match="3 of 3 records were not delivered"):
        deliver(producer, [(missing, b"acme", b"{}")] * 3, timeout=30)


def test_records_still_unconfirmed_when_the_flush_gives_up_raise() -> None:
    """No broker answers: the records are neither delivered nor failed when ``deliver`` stops waiting,
    and a worker must not take them as sent (it trims its outbox after ``deliver`` returns)."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # closed again before the producer connects: nothing listens
    producer = delivery_producer(f"127.0.0.1:{port}", **{"log_level": 0})

    with pytest.raises(RuntimeError, match="2 of 2 records were not confirmed within 1 s"):
        deliver(producer, [("edgeledger.dead-letter", b"acme", b"{}")] * 2, timeout=1)


@pytest.mark.parametrize("kind", ["[]", "{}", "7", "null"])
def test_a_line_whose_kind_is_not_a_name_goes_to_source_changes(kind: str) -> None:
    """Routing never refuses a line: the worker reading source-changes dead-letters it with its reason."""
    line = b'{"kind": %s, "tenant": "acme"}' % kind.encode()

    assert route(line) == (Topic.SOURCE_CHANGES, b"acme")
