"""Where a worker resumes an input partition: right after the offset its state applied, while that
offset still points into the topic it was read from (``processors.positions``).

An untrusted offset is dropped and the partition read from its start: the ledger's event-id
de-duplication drops what the state applied already. Every reader of the log must drop the input
offsets it keeps for that partition as well, or it would take the new topic's first batches for
ones it applied: so before the state forgets the offset, the worker writes an ``input_reset``
record to the log partition of the same number, carrying the epoch of its fence there (a late
writer's reset, below the fence, is ignored like its batches).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

import orjson
from confluent_kafka import Producer, TopicPartition

from processors.model import Epoch
from processors.positions import Position, Untrusted, untrusted_offsets
from state.pipeline_store import PipelineStore
from streams.kafka.identity import TopicIdentities
from streams.kafka.produce import deliver
from streams.worker.holdings import Holdings

log = logging.getLogger(__name__)

ResetObserver = Callable[[str, int], None]
"""(topic, partition) of an offset reset."""


def input_reset_record(partition: int, inputs: list[Position], epoch: Epoch | None, reason: str) -> bytes:
    """The log record that tells a reader to forget the input offsets it keeps for ``inputs``."""
    return orjson.dumps({"kind": "input_reset", "record_id": f"input_reset/{uuid.uuid4().hex}",
                         "partition": partition, "inputs": [list(position) for position in inputs],
                         "epoch": list(epoch) if epoch is not None else None, "reason": reason})


class Positions:
    """Checks and records the topic identity behind each input offset a worker resumes from."""

    def __init__(self, bookkeeping: PipelineStore, holdings: Holdings, producer: Producer,
                 identities: TopicIdentities, log_topic: str, worker_id: str,
                 on_reset: ResetObserver | None = None) -> None:
        self.bookkeeping = bookkeeping
        self.holdings = holdings
        self.producer = producer
        self.identities = identities
        self.log_topic = log_topic
        self.worker_id = worker_id
        self.on_reset = on_reset or (lambda topic, partition: None)
        self.resets = 0

    def resume(self, partitions: list[TopicPartition]) -> None:
        """Set each partition's offset to where the worker resumes it; reset the untrusted ones first."""
        if not partitions:
            return
        positions = [(tp.topic, tp.partition) for tp in partitions]
        current = self.identities.of({topic for topic, _ in positions})
        untrusted = self._untrusted(positions, current)
        if untrusted:
            self._reset(untrusted)
        adopted = {position: identity for position in positions
                   if (identity := current.get(position[0])) is not None}
        self.bookkeeping.adopt_positions(adopted, [u.position for u in untrusted])
        for tp in partitions:
            tp.offset = self.holdings.resume_offset(tp.topic, tp.partition)

    def check_log(self, partitions: list[int]) -> None:
        """Note the identity of the log partitions the worker takes. Where the log is not the one this
        state wrote (a broker started anew), the notes of where the state gave partitions up point
        into a log that is gone: they are dropped, so a rebuild reads the new log from its start."""
        current = self.identities.of([self.log_topic]).get(self.log_topic)
        if current is None or not partitions:
            return
        recorded = self.bookkeeping.topic_identities()
        positions = [(self.log_topic, partition) for partition in partitions]
        other = [p for (_, p) in positions if recorded.get((self.log_topic, p), current) != current]
        if other:
            log.warning("worker %s: %s is not the log this state wrote (identity %s, now %s): the versions it "
                        "holds from before are not on it, and readers of this log will not see them",
                        self.worker_id, self.log_topic, recorded[(self.log_topic, other[0])], current)
            self.bookkeeping.take_back(other)
        self.bookkeeping.adopt_positions(dict.fromkeys(positions, current), [])

    def _untrusted(self, positions: list[Position], current: dict[str, str | None]) -> list[Untrusted]:
        """By identity alone: the ends a broker reports are not exact everywhere (the embedded broker's
        count record batches), and an offset past a real cluster's end is out of range for the
        consumer, which then reads from the start (``auto.offset.reset``)."""
        return untrusted_offsets(positions, self.holdings.applied_offsets, self.bookkeeping.topic_identities(),
                                 current)

    def _reset(self, untrusted: list[Untrusted]) -> None:
        """Tell the log's readers, then forget the offsets (``PipelineStore.adopt_positions``)."""
        by_partition: dict[int, list[Untrusted]] = {}
        for entry in untrusted:
            by_partition.setdefault(entry.position[1], []).append(entry)
        records = [(self.log_topic, b"", input_reset_record(partition, [e.position for e in entries],
                                                            self.holdings.fences.get(partition),
                                                            "; ".join(e.reason for e in entries)), partition)
                   for partition, entries in sorted(by_partition.items()) if partition < self.holdings.log_partitions]
        deliver(self.producer, records, 30)
        for entry in untrusted:
            log.warning("worker %s reads an input partition from its start, not after its stored offset: %s; "
                        "event-id de-duplication drops what it applied already", self.worker_id, entry.describe())
            self.holdings.applied_offsets[entry.position] = -1
            self.resets += 1
            self.on_reset(*entry.position)
