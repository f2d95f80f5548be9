"""What a worker asks the cluster: the partition counts it must agree with before it starts, and, as
it runs, how far behind the high watermarks its partitions are."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, TopicPartition

from schemas.topics import Topic
from streams.kafka.topics import INPUT_TOPICS, TopicSettings
from streams.worker.holdings import Holdings

log = logging.getLogger(__name__)

LagObserver = Callable[[str, int, int], None]
"""(topic, partition, records not yet applied)."""


def partitions_of(consumer: Consumer, topic: str, configured: int) -> int:
    """The topic's partition count as the cluster has it (``configured`` if it cannot say): markers are
    sent to partitions by number, and a topic made elsewhere may have fewer."""
    metadata = consumer.list_topics(topic, timeout=30).topics.get(topic)
    if metadata is None or metadata.error is not None or not metadata.partitions:
        return configured
    return len(metadata.partitions)


def check_co_partitioned(consumer: Consumer, topics: TopicSettings, log_partitions: int) -> None:
    """Refuse to start unless every input topic has as many partitions as ``edge-versions``: a tenant's
    inputs and its log records must share a partition number (the worker's routing rule), and with other
    counts a correctly keyed tenant's every record would be refused."""
    configured = topics.partitions_for(Topic.EDGE_VERSIONS)
    uneven = {name: count for name in (topics.name(t) for t in INPUT_TOPICS)
              if (count := partitions_of(consumer, name, configured)) != log_partitions}
    if uneven:
        listed = ", ".join(f"{name} has {count}" for name, count in sorted(uneven.items()))
        raise ValueError(f"the input topics must have as many partitions as {topics.name(Topic.EDGE_VERSIONS)} "
                         f"({log_partitions}), so that a tenant's inputs and log records share a partition "
                         f"number: {listed}")


class LagReport:
    """Records behind the high watermark per assigned partition, every ``interval`` seconds at most.

    On the embedded broker the watermark counts record batches, so this understates lag there. The
    watermark is the one the consumer's fetches last brought back: asking the broker would block the
    loop for a round trip per partition. A partition nothing was fetched from yet has none and is skipped.
    """

    def __init__(self, consumer: Consumer, holdings: Holdings, observe: LagObserver | None, interval: float) -> None:
        self.consumer = consumer
        self.holdings = holdings
        self.observe = observe
        self.interval = interval
        self._due = time.monotonic()

    def __call__(self) -> None:
        if self.observe is None or time.monotonic() < self._due:
            return
        self._due = time.monotonic() + self.interval
        for topic, partition in sorted(self.holdings.assigned):
            try:
                _, high = self.consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            except Exception as error:
                log.debug("no watermark for %s[%d]: %s", topic, partition, error)
                continue
            if high < 0:
                continue
            applied = self.holdings.applied_offsets.get((topic, partition), -1)
            self.observe(topic, partition, max(0, high - applied - 1))
