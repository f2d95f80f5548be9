"""Whether the consumer group still counts a worker as the owner of its partitions, and joining it again.

A worker the group evicted while it applied a batch (a paused process, a batch or rebuild longer
than ``max.poll.interval.ms``) must not send that batch: another worker may have rebuilt those
partitions from the log and redone the inputs, and the two copies on the log would contradict each
other. The worker asks right before it sends, by a synchronous commit that moves no offset past what
the log holds: the coordinator refuses it from a member of an earlier generation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from streams.worker.holdings import Holdings

log = logging.getLogger(__name__)

NOT_A_MEMBER = frozenset({KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION,
                          KafkaError.REBALANCE_IN_PROGRESS, KafkaError.FENCED_INSTANCE_ID})
"""What the group coordinator answers a commit from a member it no longer counts in this generation."""
OWNERSHIP_CHECK_ATTEMPTS = 3
"""How often a worker asks before it gives up on an answer other than "not a member" (and stops)."""


class Membership:
    """Asks the group coordinator whether this worker is a member of the current generation."""

    def __init__(self, consumer: Consumer, holdings: Holdings, worker_id: str,
                 subscribe: Callable[[], None], abandon_rebuilds: Callable[[], None]) -> None:
        self.consumer = consumer
        self.holdings = holdings
        self.worker_id = worker_id
        self._subscribe = subscribe
        self._abandon_rebuilds = abandon_rebuilds

    def still_a_member(self, batch: int) -> bool:
        """Whether the group still counts this worker as the owner of its partitions, asked right before
        batch ``batch`` is sent (see the module docstring). The question is a synchronous commit of the
        offsets the batch started from. Other errors than "not a member" are retried, then raised (the
        worker stops, and its restart settles the batch from the outbox)."""
        started = [TopicPartition(topic, partition, offset)
                   for (topic, partition), offset in self.holdings.batch_first.items()]
        if self.ask(started):
            return True
        log.warning("worker %s does not send batch %d", self.worker_id, batch)
        return False

    def ask(self, offsets: list[TopicPartition]) -> bool:
        """Commit ``offsets`` synchronously: True once the coordinator takes them, False when it answers
        that this worker is not a member of its generation; other errors are retried, then raised."""
        attempt = 1
        while True:
            try:
                self.consumer.commit(offsets=offsets, asynchronous=False)
                return True
            except KafkaException as error:
                if error.args[0].code() in NOT_A_MEMBER:
                    log.warning("worker %s is no longer a member of the group (%s)", self.worker_id,
                                error.args[0].str())
                    return False
                if attempt == OWNERSHIP_CHECK_ATTEMPTS:
                    raise
                log.warning("worker %s could not confirm it is still a member of the group (%s); asking again",
                            self.worker_id, error.args[0].str())
                time.sleep(0.5 * attempt)
                attempt += 1

    def confirm_member(self, partition: int) -> bool:
        """Whether the group counts this worker a member now, asked as ``still_a_member`` asks: a
        synchronous commit, here of the offsets the group holds for the input partitions of that number
        (0 where it holds none), which moves nothing. The fencer asks it before it fences a partition."""
        inputs = self.holdings.inputs
        asked = self.consumer.committed([TopicPartition(topic, partition) for topic in inputs], timeout=30)
        held = [tp for tp in asked if tp.offset >= 0]
        return self.ask(held or [TopicPartition(inputs[0], partition, 0)])

    def join_again(self) -> None:
        """Let every partition go and join the group anew: the next assignment settles what is held."""
        self.holdings.assigned.clear()
        self._abandon_rebuilds()
        self.consumer.unsubscribe()
        self._subscribe()
