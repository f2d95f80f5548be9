"""Run a sequence of raw events through the ledger processor in atomic batches."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from processors.heap import SettledHeap
from processors.ledger import LedgerProcessor
from processors.pending import BatchCounts, PendingLedger
from processors.ports import LedgerReader

BATCH_EVENTS = 250
"""Events per atomic write when loading. Smaller batches keep a batch's pending changes and its write
batch within the CPU caches, so they take less loading-thread CPU, down to about this size
(docs/performance.md); each write also drops the store's idle iterators, so much smaller batches pay
that more often. State does not depend on where batches split."""


@dataclass
class BatchRunner:
    processor: LedgerProcessor
    reader: LedgerReader
    commit: Callable[[PendingLedger], None]
    batch_size: int = BATCH_EVENTS

    def run(self, lines: Iterable[bytes | str]) -> BatchCounts:
        totals = BatchCounts()
        pending = PendingLedger(self.reader)
        with SettledHeap() as heap:
            batch: list[bytes | str] = []
            for line in lines:
                if not line or line.isspace():  # blank (``strip`` would copy every line to say so)
                    continue
                batch.append(line)
                if len(batch) >= self.batch_size:
                    self._apply(batch, pending, heap)
                    totals.add(self._flush(pending))
                    batch, pending = [], PendingLedger(self.reader)
            self._apply(batch, pending, heap)
            totals.add(self._flush(pending))
        return totals

    def _apply(self, batch: list[bytes | str], pending: PendingLedger, heap: SettledHeap) -> None:
        processor = self.processor
        for line, validated in zip(batch, processor.prepare(batch, pending), strict=True):
            processor.process(line, pending, None, validated)
            heap.after_event()

    def _flush(self, pending: PendingLedger) -> BatchCounts:
        if pending.counts.events_read:
            self.commit(pending)
        return pending.counts
