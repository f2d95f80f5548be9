"""`edgeledger produce`: send event files to the input topics with an idempotent producer.

Each event goes to the topic for its kind, keyed by tenant: the tenant is the write path's unit of
ordering and parallelism, because identity resolution, revocation by edge id and snapshots all
cross entities within a tenant. Lines that are not JSON objects still go to ``source-changes``
(keyed by nothing), so the worker dead-letters them with their reason instead of losing them.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import orjson
from confluent_kafka import Producer
from tqdm import tqdm

from streams.kafka_config import producer_config
from streams.topics import Topic, TopicSettings

TOPIC_FOR_KIND = {
    "change": Topic.SOURCE_CHANGES,
    "clock": Topic.SOURCE_CHANGES,
    "revoke": Topic.CORRECTIONS,
    "revoke_source": Topic.CORRECTIONS,
    "merge": Topic.ALIAS_COMMANDS,
    "split": Topic.ALIAS_COMMANDS,
    "alias": Topic.ALIAS_COMMANDS,
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
    return TOPIC_FOR_KIND.get(document.get("kind"), Topic.SOURCE_CHANGES), key


def produce_lines(lines: Iterable[bytes], bootstrap: str, topics: TopicSettings | None = None,
                  progress: bool = False, total: int | None = None) -> int:
    topics = topics or TopicSettings()
    producer = Producer(producer_config(bootstrap))
    failures: list[str] = []

    def delivered(error, message) -> None:
        if error is not None:
            failures.append(str(error))

    sent = 0
    with tqdm(total=total, unit="ev", disable=not progress, desc="produce") as bar:
        for raw in lines:
            line = raw.strip()
            if not line:
                continue
            logical, key = route(line)
            while True:
                try:
                    producer.produce(topics.name(logical), key=key, value=line, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
            sent += 1
            bar.update(1)
        producer.flush(60)
    if failures:
        raise RuntimeError(f"{len(failures)} events were not delivered: {failures[0]}")
    return sent


def produce_files(paths: list[Path], bootstrap: str, topics: TopicSettings | None = None,
                  progress: bool = True) -> int:
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {path}")
    total = sum(1 for path in paths for line in path.open("rb") if line.strip()) if progress else None

    def lines() -> Iterable[bytes]:
        for path in paths:
            with path.open("rb") as handle:
                yield from handle

    return produce_lines(lines(), bootstrap, topics, progress=progress, total=total)
