"""Stored input offsets belong to the topics they were read from: a worker restarted on a broker
started anew, or on topics made again under the same names, reads them from their start and applies
every event once."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from streams.cli.load import load_into
from streams.kafka.broker import EmbeddedBroker
from streams.kafka.config import ADMIN_DEFAULTS
from streams.kafka.produce import produce_files
from streams.kafka.topics import TopicSettings, ensure_topics
from tests.support.generate import tenants_interleaved
from tests.support.pipeline import comparable_state, count_applied, fresh_topics
from tests.support.wait import wait_until
from tests.support.workers import replicate, run_to_the_end

pytestmark = pytest.mark.integration
TENANTS = ("acme", "globex", "initech", "umbrella")


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple[Path, Path, Path]:
    """6,000 events over four tenants in two files (the first third, the rest), and the state `load`
    reaches on all of them."""
    folder = tmp_path_factory.mktemp("history")
    lines = tenants_interleaved(1500, 300, TENANTS)
    first, rest = folder / "first.jsonl", folder / "rest.jsonl"
    first.write_text("\n".join(lines[:2000]) + "\n")
    rest.write_text("\n".join(lines[2000:]) + "\n")
    load_into(folder / "expected", [first, rest], simulated_clock=False, ontology_path=None)
    return first, rest, folder / "expected"


def produced(bootstrap: str, topics: TopicSettings, *files: Path) -> None:
    ensure_topics(bootstrap, topics)
    produce_files(list(files), bootstrap, topics, progress=False)


def test_a_restart_on_a_broker_started_anew_applies_every_new_event(history, tmp_path: Path) -> None:
    """The stored offsets (about 500 a partition) point past the new topics' first records: resumed
    from, they would skip them. The worker reads the new topics from their start instead, and so
    does a replica of the log the new log's."""
    first, rest, expected = history
    state, replica, topics = tmp_path / "state", tmp_path / "replica", fresh_topics()
    with EmbeddedBroker() as broker:
        produced(broker.bootstrap, topics, first)
        run_to_the_end(state, broker.bootstrap, topics, "g-new-broker")
        replicate(replica, broker.bootstrap, topics)
    assert count_applied(state) == 2000
    with EmbeddedBroker() as broker:
        produced(broker.bootstrap, topics, rest)
        restarted = run_to_the_end(state, broker.bootstrap, topics, "g-new-broker")
        replicate(replica, broker.bootstrap, topics)
    assert comparable_state(replica) == comparable_state(expected), "the old log's versions and the new one's"
    assert restarted.summary()["events_read"] == 4000, "every record of the new topics"
    assert count_applied(state) == 6000
    assert comparable_state(state) == comparable_state(expected)
    resets = [line for _, line in restarted.stderr if "reads an input partition from its start" in line]
    assert resets and all("is not the one this offset was read from" in line for line in resets)


def test_topics_made_again_under_their_names_are_read_from_their_start(kafka_broker, history,
                                                                       tmp_path: Path) -> None:
    """Deleted and made again with every event: the ones the state applied are dropped as duplicates."""
    first, rest, expected = history
    state, topics = tmp_path / "state", fresh_topics()
    produced(kafka_broker.bootstrap, topics, first)
    run_to_the_end(state, kafka_broker.bootstrap, topics, "g-remade")
    admin = AdminClient({**ADMIN_DEFAULTS, "bootstrap.servers": kafka_broker.bootstrap})
    names = [topics.name(topic) for topic in topics.partitions]
    for future in admin.delete_topics(names, operation_timeout=30).values():
        future.result()
    wait_until(lambda: not set(names) & set(admin.list_topics(timeout=10).topics), "the topics are deleted", 30)
    produced(kafka_broker.bootstrap, topics, first, rest)
    restarted = run_to_the_end(state, kafka_broker.bootstrap, topics, "g-remade")
    summary = restarted.summary()
    assert summary["events_read"] == 6000 and summary["duplicates"] == 2000
    assert count_applied(state) == 6000
    assert comparable_state(state) == comparable_state(expected)
