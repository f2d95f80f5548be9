"""`edgeledger load`: the same processors as the streaming pipeline, in-process, from JSONL files."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from processors.batch import BatchRunner
from processors.clock import TransactionClock
from processors.ledger import LedgerProcessor
from processors.pending import BatchCounts
from schemas.ontology import Ontology, default_ontology, load_ontology
from state.open import open_writer
from state.store import LedgerStore


def wall_clock_micros() -> int:
    return time.time_ns() // 1000


def read_lines(paths: list[Path]) -> Iterator[bytes]:
    for path in paths:
        with open(path, "rb") as handle:
            yield from handle


def make_processor(ontology: Ontology, simulated_clock: bool) -> LedgerProcessor:
    return LedgerProcessor(ontology, TransactionClock(wall_clock_micros, simulated=simulated_clock))


def load_files(
    paths: list[Path],
    store: LedgerStore,
    simulated_clock: bool = False,
    ontology: Ontology | None = None,
    batch_size: int = 2000,
) -> BatchCounts:
    """Apply the files' events in atomic batches, then compact the store: a bulk import leaves many
    overlapping level-0 files that every later seek would have to merge (25 % of a scan's cost,
    measured on a 300k-event load; compacting it took 1.4 s)."""
    processor = make_processor(ontology or default_ontology(), simulated_clock)
    counts = BatchRunner(processor, store, store.commit, batch_size).run(read_lines(paths))
    store.kv.compact()
    return counts


def load_into(state_dir: Path, paths: list[Path], simulated_clock: bool, ontology_path: Path | None,
              batch_size: int = 2000) -> dict[str, int | bool]:
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {path}")
    ontology = load_ontology(ontology_path) if ontology_path else default_ontology()
    store = open_writer(state_dir, bulk=True)
    try:
        counts = load_files(paths, store, simulated_clock, ontology, batch_size)
    finally:
        store.close()
    summary: dict[str, int | bool] = dict(asdict(counts))
    summary["balanced"] = counts.balanced()
    return summary


