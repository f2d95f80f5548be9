"""Reading a topic to its end, for tests: a probe record appended to each partition marks the end.

Waiting until nothing arrives for a while costs that while on every read and still guesses; the
embedded broker's high watermark cannot bound the read either (it counts produced record batches,
not records, so a read up to it stops early). A probe is a record like any other: once a reader
from the beginning has reached the probe on every partition, it has read every record written to
that partition before the probe was, whatever the broker counts.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition

from streams.kafka.config import consumer_config, producer_config

PROBE_KEY = b"\x00edgeledger-test-probe"
"""The key of every probe record; ``read_to_end`` leaves them out (earlier reads' probes too)."""


def read_to_end(bootstrap: str, topic: str, timeout: float = 30.0) -> dict[int, list[Message]]:
    """Every record of each partition of ``topic`` (probes left out), in partition order: up to the probe
    this call appends to that partition, so everything delivered before the call is in."""
    probe = uuid.uuid4().hex.encode()
    consumer = Consumer(consumer_config(bootstrap, f"test-reader-{uuid.uuid4().hex[:8]}"))
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        failures: list[KafkaError] = []
        producer = Producer(producer_config(bootstrap))
        for partition in partitions:
            producer.produce(topic, key=PROBE_KEY, value=probe, partition=partition,
                             on_delivery=lambda error, _message: failures.append(error) if error else None)
        assert producer.flush(timeout) == 0 and not failures, f"probes to {topic} not delivered: {failures}"

        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING) for partition in partitions])
        found: dict[int, list[Message]] = {partition: [] for partition in partitions}
        unread = set(partitions)
        deadline = time.monotonic() + timeout
        while unread:
            assert time.monotonic() < deadline, f"{topic}: no probe read back from partitions {sorted(unread)}"
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            partition = message.partition()
            if message.key() == PROBE_KEY:
                if message.value() == probe:
                    unread.discard(partition)
            elif partition in unread:
                found[partition].append(message)
        return found
    finally:
        consumer.close()


def read_all(bootstrap: str, topic: str, timeout: float = 30.0) -> list[Message]:
    """``read_to_end``'s records, partition after partition."""
    return [message for messages in read_to_end(bootstrap, topic, timeout).values() for message in messages]
