"""Partition claims: which ledger state took each input partition over last.

At every assignment, before anything it processes from them is sent, a worker records on
``partition-claims`` that its state (named by its lineage, ``PipelineStore.lineage``) now owns its
input partitions. A worker that comes back with a parked outbox re-sends it only while the last
claim of every partition its batch consumed is its own state's (``LedgerWorker._settle_parked``):
another claim there means another worker took the partition over since, and may have sent a redo
of that batch, whole or cut short, that the group's offsets do not show.

Claims are keyed by group and partition number, so each key's claims stay in order on one
partition of the topic; a reader takes the last one per key. The group's offset commits would be
the natural place for this (their metadata), but the embedded broker does not keep commit metadata.
"""

from __future__ import annotations

import time

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from streams.kafka_config import consumer_config
from streams.produce import deliver
from streams.topics import Topic, TopicSettings


def claim_key(group: str, partition: int) -> str:
    return f"{group}/{partition}"


def claim_record(group: str, partition: int, lineage: str, worker: str) -> bytes:
    return orjson.dumps({"group": group, "partition": partition, "lineage": lineage, "worker": worker,
                         "claimed_at": time.time()})


def claim_partitions(producer: Producer, topics: TopicSettings, group: str, partitions: list[int], lineage: str,
                     worker: str) -> None:
    """Record, and wait until the broker has, that ``lineage`` owns these input partition numbers of
    ``group`` now. Raises if a claim is not delivered: the worker must not go on without it."""
    name = topics.name(Topic.PARTITION_CLAIMS)
    deliver(producer, ((name, claim_key(group, partition).encode(), claim_record(group, partition, lineage, worker))
                       for partition in partitions), 30)


def last_claims(values: list[bytes], group: str) -> dict[int, str]:
    """The lineage of the last claim of each input partition number of ``group``, from claim records
    read in order."""
    latest: dict[int, str] = {}
    for value in values:
        claim = orjson.loads(value)
        if claim.get("group") == group:
            latest[int(claim["partition"])] = str(claim["lineage"])
    return latest


def latest_claims(bootstrap: str, topics: TopicSettings, group: str, quiet_for: float = 1.0) -> dict[int, str]:
    """``last_claims`` of the whole ``partition-claims`` topic, read until quiet (the embedded broker's
    watermarks count record batches, not records, so they cannot bound the read)."""
    name = topics.name(Topic.PARTITION_CLAIMS)
    reader = Consumer(consumer_config(bootstrap, f"{group}-claims", **{"enable.auto.commit": False}))
    values: list[bytes] = []
    try:
        metadata = reader.list_topics(name, timeout=30).topics.get(name)
        numbers = sorted(metadata.partitions) if metadata is not None and metadata.partitions else [0]
        reader.assign([TopicPartition(name, number, OFFSET_BEGINNING) for number in numbers])
        while True:
            message = reader.poll(quiet_for)
            if message is None:
                break
            if not message.error() and message.value():
                values.append(message.value())
    finally:
        reader.close()
    return last_claims(values, group)
