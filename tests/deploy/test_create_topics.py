"""deploy/create_topics.py, as compose runs it, against the embedded broker: every topic of
deploy/k8s/topics.yaml created with its partitions, replicas and configs, and a second run a no-op."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from streams.kafka.broker import EmbeddedBroker
from streams.kafka.config import ADMIN_DEFAULTS
from tests.deploy.test_manifests import DEPLOY, topic_specs

SCRIPT = DEPLOY / "create_topics.py"
TOPICS = DEPLOY / "k8s" / "topics.yaml"


@pytest.fixture
def own_broker() -> Iterator[EmbeddedBroker]:
    """A broker of its own: the topics have the default names, which the shared broker's tests leave alone.
    (By this name, tests/conftest.py marks the test ``integration``.)"""
    with EmbeddedBroker() as broker:
        yield broker


def create_topics(bootstrap: str) -> str:
    """Run the script as compose does, on a one-broker cluster; its output."""
    done = subprocess.run([sys.executable, str(SCRIPT), str(TOPICS), "--min-brokers", "1", "--timeout", "30"],
                          env={"EDGELEDGER_KAFKA_BOOTSTRAP": bootstrap, "PATH": "/usr/bin:/bin"},
                          cwd=Path(__file__).parent, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_creates_every_listed_topic_as_listed_then_nothing(own_broker: EmbeddedBroker) -> None:
    """Tansu keeps one copy, but records the replicas asked for and reports the configs given."""
    specs = topic_specs()
    assert create_topics(own_broker.bootstrap).startswith(f"created {len(specs)} of {len(specs)} topics")

    admin = AdminClient({**ADMIN_DEFAULTS, "bootstrap.servers": own_broker.bootstrap})
    topics = admin.list_topics(timeout=5).topics
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in specs]
    configs = {resource.name: {key: entry.value for key, entry in future.result(timeout=5).items()}
               for resource, future in admin.describe_configs(resources).items()}
    for name, spec in specs.items():
        partitions = topics[name].partitions
        assert len(partitions) == spec["partitions"], name
        assert {len(partition.replicas) for partition in partitions.values()} == {spec["replicas"]}, name
        assert {key: configs[name][key] for key in spec["config"]} == spec["config"], name

    assert create_topics(own_broker.bootstrap).startswith(f"created 0 of {len(specs)} topics: (all existed)")
