"""Topic replication settings: what ``TopicSettings`` accepts, and what ``ensure_topics`` asks the broker for."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from streams.kafka.broker import EmbeddedBroker
from streams.kafka.config import ADMIN_DEFAULTS
from streams.kafka.topics import LOGICAL_TOPICS, TopicSettings, ensure_topics


def test_replication_defaults_to_one_replica_and_the_clusters_min_insync() -> None:
    settings = TopicSettings()
    assert settings.replication_factor == 1 and settings.min_insync_replicas is None
    assert all("min.insync.replicas" not in settings.topic_config(t) for t in LOGICAL_TOPICS)
    assert {new.replication_factor for new in settings.new_topics()} == {1}


def test_replication_factor_and_min_insync_replicas_reach_every_new_topic() -> None:
    settings = TopicSettings(replication_factor=3, min_insync_replicas=2)
    for new in settings.new_topics():
        assert new.replication_factor == 3
        assert new.config["min.insync.replicas"] == "2"
        assert new.config["retention.ms"]  # the other configs are still sent


@pytest.mark.parametrize(("replication_factor", "min_insync_replicas"), [(1, 1), (3, 1), (3, 3)])
def test_min_insync_replicas_from_one_to_the_replication_factor_is_accepted(
        replication_factor: int, min_insync_replicas: int) -> None:
    settings = TopicSettings(replication_factor=replication_factor, min_insync_replicas=min_insync_replicas)
    assert settings.topic_config("traces")["min.insync.replicas"] == str(min_insync_replicas)


@pytest.mark.parametrize(("replication_factor", "min_insync_replicas"), [(3, 0), (3, -1), (1, 2), (3, 4)])
def test_min_insync_replicas_outside_one_to_the_replication_factor_is_refused(
        replication_factor: int, min_insync_replicas: int) -> None:
    with pytest.raises(ValueError, match="min_insync_replicas must be between 1 and the replication factor"):
        TopicSettings(replication_factor=replication_factor, min_insync_replicas=min_insync_replicas)


def test_replication_factor_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="replication_factor must be >= 1"):
        TopicSettings(replication_factor=0)


@pytest.mark.integration
def test_a_topic_created_with_replication_settings_reports_them(kafka_broker: EmbeddedBroker) -> None:
    """Tansu runs one broker, but it records the requested replica count (the one broker listed that many
    times) and reports ``min.insync.replicas`` among the topic's configs."""
    settings = TopicSettings(prefix=f"t{uuid.uuid4().hex[:8]}.", replication_factor=3, min_insync_replicas=2)
    admin = AdminClient({**ADMIN_DEFAULTS, "bootstrap.servers": kafka_broker.bootstrap})
    topic = settings.name("traces")

    assert ensure_topics(admin, settings, only=["traces"]) == [topic]

    partitions = admin.list_topics(topic, timeout=5).topics[topic].partitions
    assert partitions and {len(p.replicas) for p in partitions.values()} == {3}
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    config = {k: v.value for k, v in admin.describe_configs([resource])[resource].result(timeout=5).items()}
    assert config["min.insync.replicas"] == "2"
    assert config["retention.ms"] == str(settings.retention_for("traces"))
