"""Run a sequence of raw events through the ledger processor in atomic batches."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from processors.heap import SettledHeap
from processors.ledger import LedgerProcessor
from processors.pending import BatchCounts, PendingLedger
from processors.ports import LedgerReader


@dataclass
class BatchRunner:
    processor: LedgerProcessor
    reader: LedgerReader
    commit: Callable[[PendingLedger], None]
    batch_size: int = 2000

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
