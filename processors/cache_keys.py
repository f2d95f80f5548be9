"""What a cached answer is keyed by and what it read: the request key, the valid-time window an
entry serves, the adjacencies a version touches, and the entry a cache backend stores
(``processors.cache`` has the rules that use them)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Protocol

from processors.model import Direction, EdgeVersion
from processors.queries import QueryRequest

ReadKey = tuple[str, str, str, Direction]
"""(tenant, node, relationship, direction): one adjacency list a traversal read."""

def is_current(known_at: int, last_tx: int) -> bool:
    """Whether a request sees every belief the ledger holds (and so may change with the next write)."""
    return known_at >= last_tx


def touched_read_keys(version: EdgeVersion) -> tuple[ReadKey, ReadKey]:
    """The two adjacency lists an appended or closed version changes."""
    return (version.tenant, version.src, version.rel, "out"), (version.tenant, version.dst, version.rel, "in")


def is_cacheable(request: QueryRequest, current: bool) -> bool:
    return not (current and request.name == "changed-between" and request.changed_to is None)


def _canonical(value: object) -> object:
    """A value whose ``repr`` is the same in every process (sets sorted, dataclasses as field tuples)."""
    if value is None or isinstance(value, str | int | float):
        return value
    if isinstance(value, frozenset | set):
        return sorted(_canonical(v) for v in value)
    if isinstance(value, tuple | list):
        return tuple(_canonical(v) for v in value)
    if hasattr(value, "__dataclass_fields__"):
        return tuple((f.name, _canonical(getattr(value, f.name))) for f in fields(value))
    raise TypeError(f"cannot key a {type(value).__name__}")


_KEYED_FIELDS = tuple(f.name for f in fields(QueryRequest) if f.name not in ("valid_at", "known_at"))


def request_key(request: QueryRequest, current: bool) -> str:
    """Every field of the request except ``valid_at`` (an entry's window covers it) and, when current,
    ``known_at``. Derived from the dataclass fields, so a field added to ``QueryRequest`` joins the key;
    the same in every process, so replicas name the same answer the same way."""
    parts = [(name, _canonical(getattr(request, name))) for name in _KEYED_FIELDS]
    parts.append(("known_at", "current" if current else request.known_at))
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=16).hexdigest()
    return f"{request.name}:{digest}"


@dataclass(frozen=True, slots=True)
class ValidWindow:
    """``[start, end)`` in valid time; ``None`` is unbounded."""

    start: int | None = None
    end: int | None = None

    def contains(self, instant: int) -> bool:
        return (self.start is None or self.start <= instant) and (self.end is None or instant < self.end)


def valid_window(boundaries: Iterable[int], valid_at: int) -> ValidWindow:
    """The widest window around ``valid_at`` that no boundary splits."""
    below = [b for b in boundaries if b <= valid_at]
    above = [b for b in boundaries if b > valid_at]
    return ValidWindow(max(below) if below else None, min(above) if above else None)


def entry_key(base: str, window: ValidWindow) -> str:
    """Deterministic, so replicas name the same answer the same way in invalidation records."""
    start = "-" if window.start is None else str(window.start)
    end = "-" if window.end is None else str(window.end)
    return f"{base}:{start}:{end}"


def base_of(key: str) -> str:
    return key.rsplit(":", 2)[0]


@dataclass(frozen=True, slots=True)
class CacheEntry:
    key: str
    base: str
    tenant: str
    current: bool
    window: ValidWindow
    read_set: frozenset[ReadKey]
    result_json: bytes


class CacheBackend(Protocol):
    """Where entries live; ``state.cache_store.CacheStore`` implements it."""

    def find(self, base: str, valid_at: int) -> CacheEntry | None:
        """An entry for ``base`` whose window contains ``valid_at``."""
        ...

    def put(self, entry: CacheEntry) -> int:
        """Store (or replace) an entry; returns how many old entries were evicted to stay in bounds."""
        ...

    def remove(self, keys: Iterable[str]) -> int:
        """Drop entries and their index rows; returns how many existed."""
        ...

    def keys_reading(self, read_key: ReadKey) -> list[str]: ...

    def keys_reading_node(self, tenant: str, node: str) -> list[str]:
        """Entries that read any adjacency of ``node``."""
        ...

    def clear(self) -> None: ...
