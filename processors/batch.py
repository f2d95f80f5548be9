"""Run a sequence of raw events through the ledger processor in atomic batches."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

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
        with _rare_full_collections():
            for line in lines:
                if not line.strip():
                    continue
                self.processor.process(line, pending)
                if pending.counts.events_read >= self.batch_size:
                    totals.add(self._flush(pending))
                    pending = PendingLedger(self.reader)
            totals.add(self._flush(pending))
        return totals

    def _flush(self, pending: PendingLedger) -> BatchCounts:
        if pending.counts.events_read:
            self.commit(pending)
        return pending.counts


@contextmanager
def _rare_full_collections(threshold: int = 100) -> Iterator[None]:
    """Speed: a batch keeps its pending changes (tens of thousands of objects) alive until commit, so
    the cyclic garbage collector promotes them to its oldest generation and, at the default threshold
    (10), then scans the whole heap about once per batch: some 10 % of load time. While a run lasts,
    a full pass needs ``threshold`` passes over the middle generation instead of 10; the young
    generations are collected as usual, and the thresholds are restored afterwards."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, max(old, threshold))
    try:
        yield
    finally:
        gc.set_threshold(young, middle, old)
