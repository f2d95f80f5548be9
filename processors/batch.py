"""Run a sequence of raw events through the ledger processor in atomic batches."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from processors.heap import SettledHeap
from processors.ledger import LedgerProcessor
from processors.pending import BatchCounts, PendingLedger
from processors.ports import LedgerReader

BATCH_EVENTS = 500
"""Events per atomic write when loading. Smaller batches keep a batch's pending changes and its write
batch within the CPU caches: 500 against 2,000 took 7 % less CPU on the loading thread at 1M events
(3 interleaved pairs: 73.0 s against 78.5 s on average) and 8 % less at 300k (4 pairs). Each write
also drops the store's idle iterators, so much smaller batches pay that more often. State does not
depend on where batches split."""


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
            for line in lines:
                if not line.strip():
                    continue
                self.processor.process(line, pending)
                heap.after_event()
                if pending.counts.events_read >= self.batch_size:
                    totals.add(self._flush(pending))
                    pending = PendingLedger(self.reader)
            totals.add(self._flush(pending))
        return totals

    def _flush(self, pending: PendingLedger) -> BatchCounts:
        if pending.counts.events_read:
            self.commit(pending)
        return pending.counts
