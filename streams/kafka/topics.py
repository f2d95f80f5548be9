"""Topic names, per-topic settings and idempotent topic creation."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from schemas.topics import Topic
from streams.kafka.config import ADMIN_DEFAULTS, MAX_RECORD_BYTES

log = logging.getLogger(__name__)

SEVEN_DAYS_MS = 7 * 24 * 60 * 60 * 1000
CLEANUP_POLICIES = frozenset({"delete", "compact", "compact,delete", "delete,compact"})


LOGICAL_TOPICS: tuple[str, ...] = tuple(t.value for t in Topic)

#: What the ledger worker consumes. They are co-partitioned with edge-versions (same key, same
#: partition count), so one tenant's inputs and its log all live on the same partition number.
INPUT_TOPICS: tuple[str, ...] = (
    Topic.SOURCE_CHANGES, Topic.CORRECTIONS, Topic.ALIAS_COMMANDS, Topic.TRACES, Topic.SOURCE_HEARTBEATS,
)
# Keyed, high-volume topics get 4 partitions (co-partitioned: same key, same count); the rest 1.
_WIDE_TOPICS = frozenset({*INPUT_TOPICS, Topic.EDGE_VERSIONS, Topic.EDGE_CORRECTIONS})
DEFAULT_PARTITIONS: Mapping[str, int] = MappingProxyType({t: 4 if t in _WIDE_TOPICS else 1 for t in LOGICAL_TOPICS})
# The event-sourced edge log is the system of record: keep it forever (-1), and the partition
# claims too (compacted: each key's last claim is what counts); everything else a week.
_KEPT_FOREVER = frozenset({Topic.EDGE_VERSIONS, Topic.PARTITION_CLAIMS})
DEFAULT_RETENTION_MS: Mapping[str, int] = MappingProxyType(
    {t: -1 if t in _KEPT_FOREVER else SEVEN_DAYS_MS for t in LOGICAL_TOPICS}
)
COMPACTED_TOPICS = frozenset({Topic.PARTITION_CLAIMS})
"""Topics whose cleanup policy is ``compact`` whatever ``TopicSettings.cleanup_policy`` says."""


_LEGAL_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def _check_topic_name(name: str) -> str:
    """``name`` if Kafka accepts it as a topic name; ``ValueError`` saying why not otherwise."""
    if not _LEGAL_TOPIC.match(name) or name in (".", ".."):
        raise ValueError(f"{name!r} is not a legal Kafka topic name: use letters, digits, '.', '_' and '-', "
                         f"at most 249 characters (check the topic prefix)")
    return name


def _check_logical(logical: str) -> str:
    """Return ``logical`` as a plain str, or raise for an unknown topic."""
    if logical not in LOGICAL_TOPICS:
        raise ValueError(f"unknown logical topic {logical!r}; expected one of {', '.join(LOGICAL_TOPICS)}")
    return str(logical)


@dataclass(frozen=True)
class TopicSettings:
    """Physical naming and creation parameters for every logical topic (missing keys use the defaults)."""

    prefix: str = "edgeledger."
    partitions: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_PARTITIONS))
    replication_factor: int = 1
    min_insync_replicas: int | None = None
    retention_ms: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_RETENTION_MS))
    cleanup_policy: str = "delete"

    def __post_init__(self) -> None:
        for key, count in self.partitions.items():
            _check_logical(key)
            if count < 1:
                raise ValueError(f"partitions for {key!r} must be >= 1, got {count}")
        for key, ms in self.retention_ms.items():
            _check_logical(key)
            if ms < -1 or ms == 0:
                raise ValueError(f"retention_ms for {key!r} must be -1 (forever) or > 0, got {ms}")
        if self.replication_factor < 1:
            raise ValueError(f"replication_factor must be >= 1, got {self.replication_factor}")
        if self.min_insync_replicas is not None and not 1 <= self.min_insync_replicas <= self.replication_factor:
            # A topic needing more in-sync replicas than it has refuses every acks=all write.
            raise ValueError(f"min_insync_replicas must be between 1 and the replication factor "
                             f"({self.replication_factor}), got {self.min_insync_replicas}")
        if self.cleanup_policy not in CLEANUP_POLICIES:
            raise ValueError(f"cleanup_policy must be one of {sorted(CLEANUP_POLICIES)}")
        # Freeze the mappings too, so a settings object cannot change after it is shared.
        object.__setattr__(self, "partitions", MappingProxyType({**DEFAULT_PARTITIONS, **self.partitions}))
        object.__setattr__(self, "retention_ms", MappingProxyType({**DEFAULT_RETENTION_MS, **self.retention_ms}))
        # Speed: names are asked for per record sent (a worker sends two to three per event). Each is
        # checked here: a client subscribed to an illegal name waits for it silently, forever.
        object.__setattr__(self, "_names", {logical: _check_topic_name(self.prefix + logical)
                                            for logical in LOGICAL_TOPICS})

    def name(self, logical: str) -> str:
        """Physical topic name: ``prefix + logical``."""
        physical = self._names.get(logical)  # type: ignore[attr-defined]
        return physical if physical is not None else self.prefix + _check_logical(logical)

    def partitions_for(self, logical: str) -> int:
        """Partition count for a logical topic."""
        return self.partitions[_check_logical(logical)]

    def retention_for(self, logical: str) -> int:
        """``retention.ms`` for a logical topic (-1 keeps records forever)."""
        return self.retention_ms[_check_logical(logical)]

    def topic_config(self, logical: str) -> dict[str, str]:
        """Explicit topic configs sent at creation (the embedded broker reports only these).
        ``min.insync.replicas`` is sent only when set, so the cluster's default applies otherwise."""
        policy = "compact" if logical in COMPACTED_TOPICS else self.cleanup_policy
        config = {"retention.ms": str(self.retention_for(logical)), "cleanup.policy": policy,
                  "max.message.bytes": str(MAX_RECORD_BYTES)}
        if self.min_insync_replicas is not None:
            config["min.insync.replicas"] = str(self.min_insync_replicas)
        return config

    def new_topics(self) -> list[NewTopic]:
        """A ``NewTopic`` for every logical topic."""
        return [
            NewTopic(
                self.name(t),
                num_partitions=self.partitions_for(t),
                replication_factor=self.replication_factor,
                config=self.topic_config(t),
            )
            for t in LOGICAL_TOPICS
        ]


def _admin(admin_or_bootstrap: AdminClient | str) -> AdminClient:
    """Accept an ``AdminClient`` or a bootstrap string."""
    if isinstance(admin_or_bootstrap, AdminClient):
        return admin_or_bootstrap
    return AdminClient({**ADMIN_DEFAULTS, "bootstrap.servers": admin_or_bootstrap})


def ensure_topics(
    admin_or_bootstrap: AdminClient | str,
    settings: TopicSettings | None = None,
    *,
    timeout: float = 15.0,
    only: Iterable[str] | None = None,
) -> list[str]:
    """Create every missing topic (or only the logical topics in ``only``) with explicit configs; return
    the physical names created by this call.

    Existing topics are left untouched (a partition-count mismatch is only logged), and a concurrent
    creator winning the race (``TOPIC_ALREADY_EXISTS``) is tolerated.
    """
    settings = settings or TopicSettings()
    wanted = None if only is None else {settings.name(logical) for logical in only}
    admin = _admin(admin_or_bootstrap)
    existing = admin.list_topics(timeout=timeout).topics
    missing: list[NewTopic] = []
    for new in settings.new_topics():
        if wanted is not None and new.topic not in wanted:
            continue
        meta = existing.get(new.topic)
        if meta is None or meta.error is not None:
            missing.append(new)
        elif len(meta.partitions) != new.num_partitions:
            log.warning(
                "topic %s exists with %d partitions, settings say %d; leaving it as is",
                new.topic,
                len(meta.partitions),
                new.num_partitions,
            )
    if not missing:
        return []
    futures = admin.create_topics(missing, operation_timeout=timeout, request_timeout=timeout)
    created: list[str] = []
    for topic, future in futures.items():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                log.info("topic %s was created concurrently", topic)
                continue
            raise
        created.append(topic)
    log.info("created topics: %s", ", ".join(created) or "(none)")
    return sorted(created, key=[t.topic for t in missing].index)

