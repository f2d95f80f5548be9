"""Partition claims: which ledger state took each input partition over last.

At every assignment, before anything it processes from them is sent, a worker records on
``partition-claims`` that its state (named by its lineage, ``PipelineStore.lineage``) now owns its
input partitions. Another state's claim there means another worker took the partition over
since, and may have sent batches, whole or cut short, that the group's offsets do not show. So a
worker assigned such a partition rebuilds it from the log first (``Assignment._behind``), and
one that comes back with a parked outbox re-sends it only while the last claim of every partition
its batch consumed is its own state's (``Assignment._settle_parked``).

Claims are keyed by group and partition number, so each key's claims stay in order on one
partition of the topic; a reader takes the last one per key. The topic is compacted and kept
forever: only each key's last claim matters, and an expired one would be no claim at all. The
group's offset commits would be the natural place for this (their metadata), but the embedded
broker does not keep commit metadata.
"""

from __future__ import annotations

import time
import uuid

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from schemas.topics import Topic
from streams.kafka.config import consumer_config
from streams.kafka.produce import deliver
from streams.kafka.topics import TopicSettings


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


def latest_claims(producer: Producer, bootstrap: str, topics: TopicSettings, group: str,
                  timeout: float = 30) -> dict[int, str]:
    """``last_claims`` of the whole ``partition-claims`` topic as it is now.

    Read up to a probe record this call sends to each partition first, so that the read ends at
    what the broker held when it began: neither early (a claim not yet fetched would be missed)
    nor late (the embedded broker's watermarks count record batches, so they cannot bound it).
    Raises if the topic is missing or a probe does not come back within ``timeout``."""
    name = topics.name(Topic.PARTITION_CLAIMS)
    reader = Consumer(consumer_config(bootstrap, f"{group}-claims", **{"enable.auto.commit": False}))
    values: list[bytes] = []
    try:
        metadata = reader.list_topics(name, timeout=timeout).topics.get(name)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise RuntimeError(f"topic {name} is missing ({metadata.error if metadata else 'not in the cluster'}): "
                               "create it (edgeledger run does) before running a worker")
        numbers = sorted(metadata.partitions)
        probe = uuid.uuid4().hex
        deliver(producer, ((name, f"probe/{group}".encode(), orjson.dumps({"probe": probe}), number)
                           for number in numbers), timeout)
        reader.assign([TopicPartition(name, number, OFFSET_BEGINNING) for number in numbers])
        waiting, deadline = set(numbers), time.monotonic() + timeout
        while waiting:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the claims read of {name} did not reach its probe on partition(s) "
                                   f"{sorted(waiting)} within {timeout} s")
            message = reader.poll(0.2)
            if message is None or message.error() or not message.value():
                continue
            value = message.value()
            if value.startswith(b'{"probe":'):
                if orjson.loads(value)["probe"] == probe:
                    waiting.discard(message.partition())
                continue
            values.append(value)
    finally:
        reader.close()
    return last_claims(values, group)
