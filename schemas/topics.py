"""The topics by their logical names, and the rule that puts a tenant's records on one partition.

Users and other programs produce to and consume from these topics; their physical names are a
prefix plus these (``streams.kafka.topics.TopicSettings``).
"""

from __future__ import annotations

import zlib
from enum import StrEnum


class Topic(StrEnum):
    """Logical topic names; the physical name is ``TopicSettings.prefix + value``."""

    SOURCE_CHANGES = "source-changes"
    CORRECTIONS = "corrections"
    ALIAS_COMMANDS = "alias-commands"
    REVIEW_QUEUE = "review-queue"
    EDGE_VERSIONS = "edge-versions"
    EDGE_CORRECTIONS = "edge-corrections"
    CACHE_INVALIDATIONS = "cache-invalidations"
    TRACES = "traces"
    REPLAY_RESULTS = "replay-results"
    SOURCE_HEARTBEATS = "source-heartbeats"
    SOURCE_STATUS = "source-status"
    DEAD_LETTER = "dead-letter"
    PARTITION_CLAIMS = "partition-claims"
    """Internal: which ledger state took each input partition over last (``streams.worker.claims``)."""


def tenant_partition(tenant: str, partitions: int) -> int:
    """The partition of ``partitions`` that a record keyed by ``tenant`` lands on with librdkafka's
    default partitioner (``consistent_random``: the key's CRC-32, modulo the partition count). The
    worker's log records of a tenant go there, and so must every input record of the tenant."""
    return zlib.crc32(tenant.encode()) % partitions
