"""Rebuilding one partition's state from the ``edge-versions`` log, a slice at a time.

A worker that takes over a partition (or lost its disk) replays the partition's log into its state
before it applies any input of that partition. The replay runs in the worker's loop, in slices,
with the partition's inputs paused, not inside the rebalance callback, where it held up every
partition of the worker, also those that needed no rebuild. Between slices the loop polls the
consumer and applies the input of those.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from processors.pending import PendingLedger
from state.pipeline_store import PipelineStore
from state.store import LedgerStore
from streams.kafka_config import consumer_config
from streams.ledger_log import Replay

log = logging.getLogger(__name__)

InputPosition = tuple[str, int]
"""(input topic, partition number)."""


class RebuildStalled(RuntimeError):
    """The broker stopped handing over the log short of the end it reported."""


@dataclass
class PartitionRebuild:
    """Replays ``log_topic[partition]`` into ``store``, restoring the input offsets it records.

    It reads to the partition's end as the broker gives it when the rebuild starts (the previous
    owner has sent its last batch by then: a group gives partitions up between batches), then on
    until quiet for ``quiet_for`` seconds. Quiet alone ended a rebuild early when the broker paused
    for longer: the worker then resumed from offsets too low and applied inputs already on the log
    a second time (a review reproduced it). Short of the end with nothing arriving for
    ``stalled_after`` seconds, it raises ``RebuildStalled``. The batches the state applied already
    (``applied``, its input offsets on this partition number) are read and skipped (``Replay``)."""

    store: LedgerStore
    bookkeeping: PipelineStore
    bootstrap: str
    group_id: str
    log_topic: str
    partition: int
    applied: dict[InputPosition, int]
    """On entry the state's input offsets on this partition number; kept up to date as batches apply."""
    quiet_for: float = 1.0
    stalled_after: float = 120.0
    slowed_by: float = 0.0
    """Seconds added to each log record's replay: a test stands in for a long log this way."""
    records: int = 0
    started_at: float = field(default_factory=time.monotonic)
    _reader: Consumer | None = None
    _replay: Replay | None = None
    _end: int = 0
    _read_to: int = 0
    _heard_at: float = 0.0

    def __post_init__(self) -> None:
        self._reader = Consumer(consumer_config(self.bootstrap, f"{self.group_id}-rebuild",
                                                **{"enable.auto.commit": False}))
        self._replay = Replay(self.store)
        try:
            _, self._end = self._reader.get_watermark_offsets(TopicPartition(self.log_topic, self.partition),
                                                              timeout=30, cached=False)
            self._reader.assign([TopicPartition(self.log_topic, self.partition, OFFSET_BEGINNING)])
        except BaseException:
            self.close()
            raise
        self._heard_at = time.monotonic()

    def read_on(self) -> None:
        """Go on after a pause (the partition was revoked and assigned again): to the log's end as it
        is now, since another worker may have held the partition and sent batches meanwhile."""
        assert self._reader is not None, "a closed rebuild does not go on"
        _, self._end = self._reader.get_watermark_offsets(TopicPartition(self.log_topic, self.partition),
                                                          timeout=30, cached=False)
        self._heard_at = time.monotonic()

    def step(self, budget: float) -> bool:
        """Replay for about ``budget`` seconds (a record, at least, when one is there); True once done."""
        assert self._reader is not None and self._replay is not None, "a closed rebuild does not step"
        deadline = time.monotonic() + budget
        while True:
            now = time.monotonic()
            if now >= deadline:
                return False
            at_end = self._read_to >= self._end
            message = self._reader.poll(min(deadline - now, self.quiet_for) if at_end else deadline - now)
            if message is None:
                # Done only on a poll that came back empty: records already fetched count as heard.
                silent_for = time.monotonic() - self._heard_at
                if at_end and silent_for >= self.quiet_for:
                    return True
                if not at_end and silent_for > self.stalled_after:
                    raise RebuildStalled(f"the rebuild of {self.log_topic}[{self.partition}] read to offset "
                                         f"{self._read_to} of {self._end} and got nothing more for "
                                         f"{self.stalled_after:.0f} s")
                continue
            self._heard_at = time.monotonic()
            if not message.error():
                if self.slowed_by:
                    time.sleep(self.slowed_by)
                self._read_to = message.offset() + 1
                self.records += self._replay.feed([message.value()], self._commit, self.applied, self.partition)

    def _commit(self, pending: PendingLedger) -> None:
        mine = {position: offset for position, offset in self.applied.items() if position[1] == self.partition}
        self.store.commit(pending, self.bookkeeping.offset_puts(mine))

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
