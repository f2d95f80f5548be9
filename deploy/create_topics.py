"""Create the topics of deploy/k8s/topics.yaml (Strimzi KafkaTopic resources) on a cluster with no topic
operator, such as deploy/compose.yaml's: one list of topics for both deployments, and a cluster that
never creates one itself. Waits until enough brokers are up for the replicas asked; leaves existing
topics as they are.

    python deploy/create_topics.py deploy/k8s/topics.yaml --bootstrap kafka-1:9092
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import yaml
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from streams.kafka.config import ADMIN_DEFAULTS

BOOTSTRAP_ENV = "EDGELEDGER_KAFKA_BOOTSTRAP"


def topics_from(path: Path) -> list[NewTopic]:
    """A ``NewTopic`` per KafkaTopic resource of the file: name, partitions, replicas and configs."""
    topics = []
    for document in yaml.safe_load_all(path.read_text()):
        if document and document.get("kind") == "KafkaTopic":
            spec = document["spec"]
            topics.append(NewTopic(spec["topicName"], num_partitions=int(spec["partitions"]),
                                   replication_factor=int(spec["replicas"]),
                                   config={key: str(value) for key, value in spec.get("config", {}).items()}))
    return topics


def wait_for_brokers(admin: AdminClient, count: int, timeout: float) -> None:
    """Return once the cluster reports ``count`` brokers: compose starts the brokers and this together."""
    deadline = time.monotonic() + timeout
    seen = 0
    while True:
        try:
            seen = len(admin.list_topics(timeout=5).brokers)
        except KafkaException:
            seen = 0
        if seen >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{seen} of the {count} brokers the topics' replicas need are up after {timeout:.0f} s")
        time.sleep(1)


def create_missing(admin: AdminClient, topics: list[NewTopic], timeout: float = 30) -> list[str]:
    """Create the topics the cluster lacks; the names created. One created meanwhile by another is fine."""
    existing = admin.list_topics(timeout=timeout).topics
    missing = [topic for topic in topics if topic.topic not in existing]
    if not missing:
        return []
    created = []
    for name, future in admin.create_topics(missing, operation_timeout=timeout, request_timeout=timeout).items():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not (isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise
        else:
            created.append(name)
    return sorted(created)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, help="KafkaTopic resources (deploy/k8s/topics.yaml)")
    parser.add_argument("--bootstrap", default=os.environ.get(BOOTSTRAP_ENV),
                        help=f"Kafka bootstrap servers (default: ${BOOTSTRAP_ENV})")
    parser.add_argument("--min-brokers", type=int, default=None,
                        help="brokers to wait for (default: the most replicas a topic asks for)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the brokers")
    args = parser.parse_args(argv)
    if not args.bootstrap:
        parser.error(f"give --bootstrap or set {BOOTSTRAP_ENV}")
    topics = topics_from(args.file)
    admin = AdminClient({**ADMIN_DEFAULTS, "bootstrap.servers": args.bootstrap})
    wait_for_brokers(admin, args.min_brokers or max(topic.replication_factor for topic in topics), args.timeout)
    created = create_missing(admin, topics)
    print(f"created {len(created)} of {len(topics)} topics: {', '.join(created) or '(all existed)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
