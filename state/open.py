"""Open a ledger store at a directory, as the writer or as a lock-free reader."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from state.kv import RocksKV
from state.store import LedgerStore


def open_writer(path: str | Path, bulk: bool = False) -> LedgerStore:
    """The one writer of a directory; ``bulk`` for a re-runnable import (see ``RocksKV``)."""
    return LedgerStore(RocksKV(path, bulk=bulk))


def open_reader(path: str | Path) -> LedgerStore:
    """A secondary instance: safe while ``run`` or ``serve`` writes the same directory."""
    return LedgerStore(RocksKV(path, read_only=True), names_in_memory=0)


@contextmanager
def reading(path: str | Path) -> Iterator[LedgerStore]:
    """A lock-free reader for the duration of a ``with`` block."""
    store = open_reader(path)
    try:
        yield store
    finally:
        store.close()
