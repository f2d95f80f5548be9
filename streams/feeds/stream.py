"""`adapt debezium --bootstrap`: Debezium topics in, the ledger's input topics out, exactly once in effect.

Each round, in this order:

1. consume up to ``batch_size`` Debezium records (a consumer group, from its committed offsets);
2. read what the directory follower has (below) for rows that waited on it;
3. map them, and add a heartbeat when ``heartbeat_interval`` has passed;
4. deliver every event and dead letter, and wait until the broker has them all;
5. commit each partition's offset, but never past a row still waiting for a row it refers to.

A crash between 4 and 5 reads the round again. Event ids are digests of each change
(``processors.feeds.output``), so the events produced again carry the same ids and the ledger,
keyed on ``(tenant, event_id)``, applies each once. Dead letters carry a ``record_id`` for the same
purpose.

The directory follower reads every partition of the Debezium topics from the beginning, outside
the group, and only learns the entities of referenced rows (``cmdb_ci``, ``sys_user_group``): a
restarted adapter resumes after its committed offsets, yet must still know the entities of rows
read before. It reads to the end of each partition before the first round.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from processors.feeds.debezium import DebeziumAdapter
from processors.feeds.output import FeedCounts, Origin, Output
from schemas.times import format_micros
from schemas.topics import Topic
from streams.kafka.config import ADMIN_DEFAULTS, LIBRDKAFKA_LOG, consumer_config
from streams.kafka.liveness import BrokerWatch
from streams.kafka.produce import Message as OutMessage
from streams.kafka.produce import deliver, delivery_producer
from streams.kafka.topics import TopicSettings, ensure_topics

log = logging.getLogger(__name__)

OUTPUTS = (Topic.SOURCE_CHANGES, Topic.SOURCE_HEARTBEATS, Topic.DEAD_LETTER)
"""The ledger's topics the adapter writes to: made when missing."""
CATCH_UP_TIMEOUT = 120.0
"""Seconds the directory follower may take to read the Debezium topics to their end before the first round."""


@dataclass(frozen=True)
class StreamSettings:
    bootstrap: str
    topics: tuple[str, ...]
    group: str
    topic_prefix: str = "edgeledger."
    heartbeat_interval: float = 30.0
    exit_when_idle: float | None = None
    consumer_overrides: Mapping[str, str | int] = field(default_factory=dict)
    batch_size: int = 1000
    broker_timeout: float = 60.0


def adapt_stream(adapter: DebeziumAdapter, settings: StreamSettings, stop: threading.Event | None = None,
                 wall_clock: Callable[[], int] = lambda: time.time_ns() // 1000) -> FeedCounts:
    """Run until ``stop`` is set (SIGTERM, Ctrl-C) or, with ``exit_when_idle``, until the topics are
    quiet that long; returns the counts."""
    stop = stop or _stop_on_signals()
    topics = TopicSettings(prefix=settings.topic_prefix)
    watch = BrokerWatch(settings.bootstrap, settings.broker_timeout)
    admin = AdminClient({**ADMIN_DEFAULTS, "bootstrap.servers": settings.bootstrap, "logger": LIBRDKAFKA_LOG})
    watch.reach(lambda: ensure_topics(admin, topics, timeout=min(5.0, settings.broker_timeout), only=OUTPUTS),
                stop.is_set)  # tried again while the cluster is out of reach, for up to broker_timeout
    consumer = Consumer(consumer_config(settings.bootstrap, settings.group, error_cb=watch.error_cb,
                                        **settings.consumer_overrides))
    follower = Consumer(consumer_config(settings.bootstrap, f"{settings.group}-directory-{uuid.uuid4().hex[:8]}",
                                        error_cb=watch.error_cb,
                                        **{**settings.consumer_overrides, "enable.partition.eof": True}))
    producer = delivery_producer(settings.bootstrap)
    names = {"change": topics.name(Topic.SOURCE_CHANGES), "heartbeat": topics.name(Topic.SOURCE_HEARTBEATS),
             "dead_letter": topics.name(Topic.DEAD_LETTER)}
    try:
        _catch_up(adapter, follower, settings, stop)
        consumer.subscribe(list(settings.topics))
        _rounds(adapter, settings, consumer, follower, producer, names, watch, stop, wall_clock)
    finally:
        consumer.close()
        follower.close()
    return adapter.counts


def _rounds(adapter: DebeziumAdapter, settings: StreamSettings, consumer: Consumer, follower: Consumer,
            producer: Producer, names: dict[str, str], watch: BrokerWatch, stop: threading.Event,
            wall_clock: Callable[[], int]) -> None:
    next_offsets: dict[tuple[str, int], int] = {}
    committed: dict[tuple[str, int], int] = {}
    heartbeat_every = int(settings.heartbeat_interval * 1_000_000)
    next_heartbeat = wall_clock()
    idle_since = time.monotonic()
    while not stop.is_set():
        messages = consumer.consume(settings.batch_size, timeout=0.2)
        outputs: list[Output] = []
        for message in messages:
            if _failed(message):
                continue
            watch.reached()
            origin = _origin(message)
            outputs += adapter.take(message.value() or b"null", origin)  # a tombstone has no value
            next_offsets[(origin.name, origin.partition or 0)] = origin.position + 1
        for message in follower.consume(settings.batch_size, timeout=0):
            value = message.value()
            if not _failed(message) and value is not None:
                outputs += adapter.learn(value, _origin(message))
        now = wall_clock()
        if now >= next_heartbeat:
            adapter.counts.heartbeats += 1
            outputs.append(("event", adapter.writer.heartbeat(now, format_micros(now) or "")))
            next_heartbeat = now + heartbeat_every
        if outputs:
            deliver(producer, _records(outputs, names, adapter.writer.tenant))
        _commit(consumer, adapter, next_offsets, committed)
        if messages:
            idle_since = time.monotonic()
        else:
            watch.check(lambda: consumer.list_topics(timeout=1))
            if settings.exit_when_idle is not None and time.monotonic() - idle_since >= settings.exit_when_idle:
                break


def _records(outputs: list[Output], names: dict[str, str], tenant: str) -> Iterator[OutMessage]:
    key = tenant.encode()  # keyed by tenant, as the ledger's workers expect (schemas.topics.tenant_partition)
    for kind, document in outputs:
        topic = names["dead_letter"] if kind == "dead_letter" else names[str(document["kind"])]
        yield topic, key, orjson.dumps(document)


def _commit(consumer: Consumer, adapter: DebeziumAdapter, next_offsets: dict[tuple[str, int], int],
            committed: dict[tuple[str, int], int]) -> None:
    """Commit each partition's next offset, held back to the oldest row still waiting there."""
    committable = dict(next_offsets)
    for origin in adapter.waiting_origins():
        position = (origin.name, origin.partition or 0)
        committable[position] = min(committable.get(position, origin.position), origin.position)
    moved = [TopicPartition(topic, partition, offset) for (topic, partition), offset in committable.items()
             if committed.get((topic, partition)) != offset]
    if moved:
        consumer.commit(offsets=moved, asynchronous=False)
        committed.update(committable)


def _catch_up(adapter: DebeziumAdapter, follower: Consumer, settings: StreamSettings, stop: threading.Event) -> None:
    """Read every partition of the topics from the beginning to its end, learning referenced rows."""
    partitions = []
    for topic in settings.topics:
        metadata = follower.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            raise RuntimeError(f"topic {topic} is not on the cluster at {settings.bootstrap}"
                               f" ({metadata.error if metadata is not None else 'no such topic'})")
        partitions += [TopicPartition(topic, partition, OFFSET_BEGINNING) for partition in metadata.partitions]
    follower.assign(partitions)
    unread = {(p.topic, p.partition) for p in partitions}
    deadline = time.monotonic() + CATCH_UP_TIMEOUT
    while unread and not stop.is_set():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Debezium topics were not read to their end within {CATCH_UP_TIMEOUT:.0f} s: "
                               f"{sorted(unread)}")
        for message in follower.consume(settings.batch_size, timeout=0.2):
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                unread.discard((message.topic(), message.partition()))
            elif error is None and (value := message.value()) is not None:
                adapter.learn(value, _origin(message))
    log.info("adapter %s: directory read from %d partitions (%d entities)", adapter.system, len(partitions),
             len(adapter.directory.entries))


def _origin(message: Message) -> Origin:
    """Where a consumed record was read (a record, not an error, always has all three)."""
    return Origin(message.topic() or "", message.partition() or 0, message.offset() or 0)


def _failed(message: Message) -> bool:
    """Whether a consumed message is an error rather than a record (a partition's end is not a failure)."""
    error = message.error()
    if error is None:
        return False
    if error.code() != KafkaError._PARTITION_EOF:
        if error.fatal():
            raise RuntimeError(f"consuming {message.topic()}: {error.str()}")
        log.warning("consuming %s: %s", message.topic(), error.str())
    return True


def _stop_on_signals() -> threading.Event:
    from streams.log.replica import stop_on_signals

    return stop_on_signals()
