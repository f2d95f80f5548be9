"""Reading topics to their end, for tests: until every partition reports its end (a partition-EOF event).

Waiting until nothing arrives for a while costs that while on every read and still guesses; the
embedded broker's high watermark cannot bound the read either (it counts produced record batches,
not records, so a read up to it stops early). The end a fetch reports does not count short: once a
reader from the beginning has had every partition's EOF event, it has read every record delivered
to the topic before the read began.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from streams.kafka.config import consumer_config

Position = tuple[str, int]
"""(topic, partition)."""


def read_to_eof(bootstrap: str, topics: Iterable[str],
                timeout: float = 60.0) -> tuple[dict[Position, list[Message]], dict[Position, int]]:
    """Every record of every partition of ``topics``, in each partition's order, and each partition's
    end offset (the next record's), read from the beginning until every partition reported its end."""
    consumer = Consumer(consumer_config(bootstrap, f"test-reader-{uuid.uuid4().hex[:8]}",
                                        **{"enable.partition.eof": True}))
    try:
        unread = {(topic, partition) for topic in topics
                  for partition in consumer.list_topics(topic, timeout=10).topics[topic].partitions}
        consumer.assign([TopicPartition(topic, partition, 0) for topic, partition in unread])
        records: dict[Position, list[Message]] = {position: [] for position in unread}
        ends: dict[Position, int] = {}
        deadline = time.monotonic() + timeout
        while unread:
            assert time.monotonic() < deadline, f"partitions {sorted(unread)} never reported their end"
            message = consumer.poll(0.2)
            if message is None:
                continue
            position = (message.topic(), message.partition())
            error = message.error()
            if error is None:
                records[position].append(message)
            elif error.code() == KafkaError._PARTITION_EOF:
                ends[position] = message.offset()
                unread.discard(position)
            else:
                raise AssertionError(f"reading {position}: {error}")
        return records, ends
    finally:
        consumer.close()


def read_all(bootstrap: str, topic: str, timeout: float = 60.0) -> list[Message]:
    """Every record of ``topic``, partition after partition."""
    records, _ = read_to_eof(bootstrap, [topic], timeout)
    return [message for position in sorted(records) for message in records[position]]
