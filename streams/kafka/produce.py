"""`edgeledger produce`: send event files to the input topics with an idempotent producer.

Each event goes to the topic for its kind, keyed by tenant: the tenant is the write path's unit of
ordering and parallelism, because identity resolution, revocation by edge id and snapshots all
cross entities within a tenant. Lines that are not JSON objects still go to ``source-changes``
(keyed by nothing), so the worker dead-letters them with their reason instead of losing them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import KafkaError, KafkaException, Producer
from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs; the compiled core type-checks what it imports

from schemas.topics import Topic
from streams.kafka.config import FAILURES_ONLY, producer_config
from streams.kafka.topics import TopicSettings

TOPIC_FOR_KIND = {
    "change": Topic.SOURCE_CHANGES,
    "clock": Topic.SOURCE_CHANGES,
    "revoke": Topic.CORRECTIONS,
    "revoke_source": Topic.CORRECTIONS,
    "merge": Topic.ALIAS_COMMANDS,
    "split": Topic.ALIAS_COMMANDS,
    "alias": Topic.ALIAS_COMMANDS,
    "decision": Topic.ALIAS_COMMANDS,
    "trace": Topic.TRACES,
    "heartbeat": Topic.SOURCE_HEARTBEATS,
}


def route(line: bytes) -> tuple[str, bytes | None]:
    """(logical topic, key) for one raw event line."""
    try:
        document = orjson.loads(line)
    except orjson.JSONDecodeError:
        return Topic.SOURCE_CHANGES, None
    if not isinstance(document, dict):
        return Topic.SOURCE_CHANGES, None
    tenant = document.get("tenant")
    key = tenant.encode() if isinstance(tenant, str) and tenant else None
    kind = document.get("kind")  # any JSON value: only a name can look up its topic (a list is unhashable)
    topic = TOPIC_FOR_KIND.get(kind) if isinstance(kind, str) else None
    return topic or Topic.SOURCE_CHANGES, key


class RecordRefused(RuntimeError):
    """The producer refused a record before sending it; the records before it were delivered."""

    def __init__(self, error: KafkaError, size: int, sent_before: int) -> None:
        self.error, self.size, self.sent_before = error, size, sent_before
        super().__init__(f"a record of {size:,} bytes was refused: {error.str()}. The {sent_before:,} records "
                         "before it were sent; none after it")

    @property
    def too_large(self) -> bool:
        return self.error.code() == KafkaError.MSG_SIZE_TOO_LARGE


def delivery_producer(bootstrap: str, **overrides: Any) -> Producer:
    """A producer for ``deliver``: the recommended settings, and delivery reports for failures only
    (the only ones ``deliver`` looks at; a worker sends two to three records per event)."""
    return Producer(producer_config(bootstrap, **FAILURES_ONLY, **overrides))


Message = tuple[str, bytes | None, bytes] | tuple[str, bytes | None, bytes, int]
"""(topic, key, value), or (topic, key, value, partition) with partition -1 for the key's."""


def deliver(producer: Producer, messages: Iterable[Message], timeout: float = 60,
            on_sent: Callable[[], None] | None = None) -> int:
    """Produce ``(topic, key, value)`` messages, or ``(topic, key, value, partition)`` to name the
    partition (-1: by key), waiting when the local queue is full, then flush;
    raise if any was not delivered. Returns how many were sent. Delivery reports are served when
    the queue is full and by the flush, not after every record (a call per record into librdkafka);
    a ``delivery_producer`` reports only the failures this looks at. A record the producer refuses
    outright (too large, say) stops the run with ``RecordRefused``, after the ones before it are
    flushed: a failure never takes accepted records down with it."""
    failures: list[str] = []

    def delivered(error, message) -> None:
        if error is not None:
            failures.append(str(error))

    sent = 0
    for message in messages:
        topic, key, value = message[0], message[1], message[2]
        partition = message[3] if len(message) > 3 else -1  # type: ignore[misc]
        while True:
            try:
                # Speed: positional arguments, in the order of ``Producer.produce``'s signature (topic,
                # value, key, partition, on_delivery): keywords cost 0.6 µs more a record to parse, about
                # 2 % of a worker's main thread at two to three records an event.
                producer.produce(topic, value, key, partition, delivered)
                break
            except BufferError:
                producer.poll(0.05)
            except KafkaException as error:
                producer.flush(timeout)
                raise RecordRefused(error.args[0], len(value), sent) from None
        sent += 1
        if on_sent is not None:
            on_sent()
    unconfirmed = producer.flush(timeout)
    if failures:
        raise RuntimeError(f"{len(failures)} of {sent} records were not delivered: {failures[0]}")
    if unconfirmed:
        # Still queued when the flush gave up: neither delivered nor failed yet, so not sent either
        # (a worker must not trim its outbox on them).
        raise RuntimeError(f"{unconfirmed} of {sent} records were not confirmed within {timeout} s")
    return sent


def produce_lines(lines: Iterable[bytes], bootstrap: str, topics: TopicSettings | None = None,
                  progress: bool = False, total: int | None = None) -> int:
    topics = topics or TopicSettings()

    def messages() -> Iterable[tuple[str, bytes | None, bytes]]:
        for raw in lines:
            line = raw.strip()
            if line:
                logical, key = route(line)
                yield topics.name(logical), key, line

    with tqdm(total=total, unit="ev", disable=not progress, desc="produce") as bar:
        return deliver(delivery_producer(bootstrap), messages(), on_sent=lambda: bar.update(1))


def produce_files(paths: list[Path], bootstrap: str, topics: TopicSettings | None = None,
                  progress: bool = True) -> int:
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {path}")
    total = sum(1 for path in paths for line in path.open("rb") if line.strip()) if progress else None

    reading = ("", 0)

    def lines() -> Iterable[bytes]:
        nonlocal reading
        for path in paths:
            with path.open("rb") as handle:
                for number, line in enumerate(handle, 1):
                    reading = (str(path), number)
                    yield line

    try:
        return produce_lines(lines(), bootstrap, topics, progress=progress, total=total)
    except RecordRefused as refused:
        # Records are produced as they are read, so the line being read is the one refused.
        raise ValueError(f"{reading[0]}:{reading[1]}: {_advice(refused)}. The {refused.sent_before:,} events "
                         "before it were sent; none after it") from None


def _advice(refused: RecordRefused) -> str:
    if refused.too_large:
        return (f"the event is {refused.size:,} bytes, more than the producer and topic accept (message.max.bytes): "
                "send its assertions as several delta events (parts of one snapshot would retract each other), "
                "or raise the producer's message.max.bytes and the topic's max.message.bytes")
    return f"the producer refused it: {refused.error.str()}"
