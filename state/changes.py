"""How a query replica that shares the state directory learns what changed.

``versions_changed_since`` reads the ``T`` table (one row per batch: what it appended and closed) from
the first transaction time after a given one: one scan of the tenant's prefix, started at that key.

``LedgerFollower`` is a read-only view of a directory another process writes. A RocksDB secondary
sees new writes only after catching up with the primary, which ``RocksKV`` does when it opens; the
follower reopens its reader when the directory's files changed (every write appends to the
write-ahead log, so a write always changes a file's size or modification time), at most once per
``min_interval_s``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from processors.identity_map import IdentityMap
from processors.matching import Candidate
from processors.model import Direction, EdgeVersion, Entity, Filing, Merge, SourceActivity
from state.open import open_reader
from state.store import LedgerStore

log = logging.getLogger(__name__)
_AS_OF_KEPT = 4_096
"""Past instants whose source activity a follower keeps per view (a few hundred bytes each)."""


def versions_changed_since(store: LedgerStore, tenant: str, after_tx: int) -> list[EdgeVersion]:
    """The tenant's versions appended or closed at a transaction time after ``after_tx``, each once, in
    the order of their first change, as stored now (a version appended and then closed carries its ``tx_to``)."""
    edge_ids = dict.fromkeys(edge_id for _, edge_id, _ in store.versions_in_tx_order(tenant, after_tx))
    versions = (store.version(tenant, edge_id) for edge_id in edge_ids)
    return [version for version in versions if version is not None]


_NOT_DATA = ("LOG", "LOCK", "rocksdict-config.json")
"""Files that change without a write: RocksDB's info log and lock, and rocksdict's config (rewritten on
every open, also by a reader)."""


def directory_fingerprint(path: Path) -> tuple[tuple[str, int, int], ...]:
    """(name, size, mtime) of the directory's files: any RocksDB write changes it (the write-ahead log
    grows, or a flush adds files)."""
    found = []
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.is_file() and not entry.name.startswith(_NOT_DATA):
                stat = entry.stat()
                found.append((entry.name, stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(found))


class LedgerFollower:
    """A ``GraphReader`` over the ledger another process writes, refreshed on demand. Not thread-safe."""

    def __init__(self, path: Path, min_interval_s: float = 0.25,
                 opener: Callable[[Path], LedgerStore] = open_reader,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self.min_interval_s = min_interval_s
        self._open = opener
        self._monotonic = monotonic
        self._fingerprint = directory_fingerprint(self.path)
        self.store = opener(self.path)
        self._checked_at = monotonic()
        self.reopened = 0
        self._activity: dict[str, dict[str, SourceActivity]] = {}
        """Per tenant, as this view of the store holds it: it changes only when the view is reopened."""
        self._activity_as_of: dict[tuple[str, int], dict[str, SourceActivity]] = {}
        """Per (tenant, known_at) that needed ``P``, as this view holds it (at most ``_AS_OF_KEPT``)."""

    def refresh(self) -> bool:
        """Reopen the reader if the directory changed since the last look; whether it did. The new reader
        is opened before the old one closes, so a failed open leaves the old view in place (and the
        next look tries again)."""
        now = self._monotonic()
        if now - self._checked_at < self.min_interval_s:
            return False
        self._checked_at = now
        fingerprint = directory_fingerprint(self.path)
        if fingerprint == self._fingerprint:
            return False
        try:
            fresh = self._open(self.path)
        except Exception:
            log.warning("could not reopen the ledger at %s; answering from the previous view", self.path,
                        exc_info=True)
            return False
        self.store, stale = fresh, self.store
        stale.close()
        self._activity.clear()
        self._activity_as_of.clear()
        self._fingerprint = fingerprint
        self.reopened += 1
        return True

    def close(self) -> None:
        self.store.close()

    # -- GraphReader and what the cache needs --------------------------------------------------------------
    def adjacent(self, tenant: str, node: str, rel: str, direction: Direction) -> list[EdgeVersion]:
        return self.store.adjacent(tenant, node, rel, direction)

    def iter_adjacent(self, tenant: str, node: str, rel: str, direction: Direction,
                      known_at: int | None = None) -> Iterator[EdgeVersion]:
        return self.store.iter_adjacent(tenant, node, rel, direction, known_at)

    def adjacent_any(self, tenant: str, node: str) -> list[EdgeVersion]:
        return self.store.adjacent_any(tenant, node)

    def version(self, tenant: str, edge_id: str) -> EdgeVersion | None:
        return self.store.version(tenant, edge_id)

    def record_filings(self, tenant: str, system: str, record: str) -> list[Filing]:
        return self.store.record_filings(tenant, system, record)

    def lineage_joins(self, tenant: str, lineage: str) -> list[str]:
        return self.store.lineage_joins(tenant, lineage)

    def entity(self, tenant: str, entity_id: str) -> Entity | None:
        return self.store.entity(tenant, entity_id)

    def alias_targets(self, tenant: str, normalised: str, known_at: int | None = None) -> list[str]:
        return self.store.alias_targets(tenant, normalised, known_at)

    def merges(self, tenant: str) -> Sequence[Merge]:
        return self.store.merges(tenant)

    def identity(self, tenant: str, known_at: int | None) -> IdentityMap | None:
        return self.store.identity(tenant, known_at)

    def neighbours(self, tenant: str, entity_type: str | None, normalised: str,
                   known_at: int | None = None) -> list[Candidate]:
        return self.store.neighbours(tenant, entity_type, normalised, known_at)

    def last_tx(self) -> int:
        return self.store.last_tx()

    def source_activity(self, tenant: str, known_at: int | None = None) -> dict[str, SourceActivity]:
        """The ``L`` rows read once per view: coverage asks on every request, cache hits included. As of
        a ``known_at`` that every source was last heard by (a current request) they are the answer;
        otherwise ``LedgerStore.activity_as_of`` seeks the sources heard since."""
        activity = self._activity.get(tenant)
        if activity is None:
            activity = self._activity[tenant] = self.store.source_activity(tenant)
        if known_at is None:
            return activity
        # A past answer's cache hit asks again: what it sought is kept for the view (it never changes).
        key = (tenant, known_at)
        as_of = self._activity_as_of.get(key)
        if as_of is None:
            as_of = self.store.activity_as_of(tenant, activity, known_at)
            if as_of is not activity:
                if len(self._activity_as_of) >= _AS_OF_KEPT:
                    self._activity_as_of.clear()
                self._activity_as_of[key] = as_of
        return as_of

    def changes_since(self, tenant: str, after_tx: int) -> list[EdgeVersion]:
        return versions_changed_since(self.store, tenant, after_tx)
