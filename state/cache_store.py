"""The traversal cache's storage: bounded entries in an ``OrderedKV``, with an in-memory LRU in front.

Tables (one-byte prefix, then ``state.keys.pack`` parts; free in ``state.store``'s list):

=====  ==========================================  ===========================================
``C``  ``e``, base key, entry key                   entry: JSON header, newline, result JSON
``C``  ``o``, sequence, entry key                   insertion order (the oldest is evicted first)
``C``  ``m``, ``seq``                               last sequence number
``Q``  tenant, node, rel, ``out``/``in``, entry key   read-set index (invalidation)
=====  ==========================================  ===========================================

The KV layer keeps at most ``max_entries`` entries, evicting by insertion order. The memory front
keeps the entries of recently used base keys (at most ``memory_entries`` entries and ``memory_bytes``
of answers in all, none larger than a sixteenth of that); it holds a subset of the KV and every
removal goes through both. Not thread-safe: callers serialise.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice

import orjson

from processors.cache_keys import CacheEntry, ReadKey, ValidWindow, base_of
from state.keys import pack, unpack
from state.kv import OrderedKV

_ENTRY = b"C" + pack("e")
_ORDER = b"C" + pack("o")
_SEQUENCE = b"C" + pack("m", "seq")
_INDEX = b"Q"


@dataclass(frozen=True, slots=True)
class _Stored:
    entry: CacheEntry
    sequence: int


def _entry_row(entry: CacheEntry) -> bytes:
    return _ENTRY + pack(entry.base, entry.key)


def _index_row(read_key: ReadKey, key: str) -> bytes:
    return _INDEX + pack(*read_key, key)


def encode_entry(entry: CacheEntry, sequence: int) -> bytes:
    header = orjson.dumps({
        "key": entry.key, "base": entry.base, "tenant": entry.tenant, "current": entry.current,
        "window": [entry.window.start, entry.window.end], "read_set": sorted(entry.read_set), "seq": sequence,
    })
    return header + b"\n" + entry.result_json


def decode_entry(data: bytes) -> _Stored:
    header, _, result_json = data.partition(b"\n")
    fields = orjson.loads(header)
    entry = CacheEntry(
        key=fields["key"],
        base=fields["base"],
        tenant=fields["tenant"],
        current=fields["current"],
        window=ValidWindow(*fields["window"]),
        read_set=frozenset((t, n, r, d) for t, n, r, d in fields["read_set"]),
        result_json=result_json,
    )
    return _Stored(entry, fields["seq"])


MEMORY_BYTES = 64 << 20
"""The memory front's answers, as JSON, at most: a review held 11 MB per cached 5.7 MB answer there,
and a count alone let a few thousand large answers take gigabytes."""


class CacheStore:
    """Implements ``processors.cache_keys.CacheBackend`` over an ``OrderedKV``."""

    def __init__(self, kv: OrderedKV, max_entries: int = 50_000, memory_entries: int = 2_000,
                 memory_bytes: int = MEMORY_BYTES) -> None:
        if max_entries < 1 or memory_entries < 0 or memory_bytes < 0:
            raise ValueError("max_entries must be at least 1, memory_entries and memory_bytes at least 0")
        self.kv = kv
        self.max_entries = max_entries
        self.memory_entries = memory_entries
        self.memory_bytes = memory_bytes
        self._memory: OrderedDict[str, dict[str, _Stored]] = OrderedDict()
        self._in_memory = 0
        self._memory_used = 0
        """Bytes of the answers in the memory front (their JSON)."""
        raw = kv.get(_SEQUENCE)
        self._sequence = int(raw) if raw else 0
        self._count = sum(1 for _ in kv.scan(_ORDER))

    def __len__(self) -> int:
        return self._count

    def close(self) -> None:
        self.kv.close()

    # -- reads ------------------------------------------------------------------------------------------
    def find(self, base: str, valid_at: int) -> CacheEntry | None:
        group = self._memory.get(base)
        if group is not None:
            self._memory.move_to_end(base)
            for stored in group.values():
                if stored.entry.window.contains(valid_at):
                    return stored.entry
        group = {stored.entry.key: stored for stored in (decode_entry(v) for _, v in self.kv.scan(_ENTRY + pack(base)))}
        self._remember(base, group)
        for stored in group.values():
            if stored.entry.window.contains(valid_at):
                return stored.entry
        return None

    def keys_reading(self, read_key: ReadKey) -> list[str]:
        return [str(unpack(key[1:])[-1]) for key, _ in self.kv.scan(_INDEX + pack(*read_key))]

    def keys_reading_node(self, tenant: str, node: str) -> list[str]:
        return sorted({str(unpack(key[1:])[-1]) for key, _ in self.kv.scan(_INDEX + pack(tenant, node))})

    def _load(self, key: str) -> _Stored | None:
        base = base_of(key)
        group = self._memory.get(base)
        if group is not None and key in group:
            return group[key]
        raw = self.kv.get(_ENTRY + pack(base, key))
        return decode_entry(raw) if raw else None

    # -- writes -----------------------------------------------------------------------------------------
    def put(self, entry: CacheEntry) -> int:
        previous = self._load(entry.key)
        self._sequence += 1
        puts = [(_entry_row(entry), encode_entry(entry, self._sequence)),
                (_ORDER + pack(self._sequence, entry.key), b""),
                (_SEQUENCE, str(self._sequence).encode())]
        puts += [(_index_row(read_key, entry.key), b"") for read_key in entry.read_set]
        written = {key for key, _ in puts}
        deletes = [row for row in self._rows(previous) if row not in written] if previous else []
        self.kv.write(puts, deletes)
        if previous is None:
            self._count += 1
        # The entry just computed is the likeliest next hit: keep it decoded. A group may hold only
        # some of a base's entries; ``find`` reads the store when none of them covers valid_at.
        self._forget(entry)
        stored = _Stored(entry, self._sequence)
        if self._fits(stored):
            group = self._memory.get(entry.base)
            if group is None:
                group = self._memory[entry.base] = {}
            group[entry.key] = stored
            self._in_memory += 1
            self._memory_used += len(entry.result_json)
            self._memory.move_to_end(entry.base)
            self._shrink_memory()
        return self._evict()

    def remove(self, keys: Iterable[str]) -> int:
        deletes: list[bytes] = []
        removed = 0
        for key in dict.fromkeys(keys):
            stored = self._load(key)
            if stored is None:
                continue
            removed += 1
            deletes += self._rows(stored)
            self._forget(stored.entry)
        if deletes:
            self.kv.write([], deletes)
        self._count -= removed
        return removed

    def clear(self) -> None:
        for prefix in (b"C", _INDEX):
            rows = [key for key, _ in self.kv.scan(prefix)]
            for start in range(0, len(rows), 10_000):
                self.kv.write([], rows[start:start + 10_000])
        self._memory.clear()
        self._in_memory = 0
        self._memory_used = 0
        self._sequence = 0
        self._count = 0

    # -- bookkeeping --------------------------------------------------------------------------------------
    @staticmethod
    def _rows(stored: _Stored) -> list[bytes]:
        entry = stored.entry
        rows = [_entry_row(entry), _ORDER + pack(stored.sequence, entry.key)]
        rows += [_index_row(read_key, entry.key) for read_key in entry.read_set]
        return rows

    def _evict(self) -> int:
        excess = self._count - self.max_entries
        if excess <= 0:
            return 0
        oldest = [str(unpack(key[1:])[-1]) for key, _ in islice(self.kv.scan(_ORDER), excess)]
        return self.remove(oldest)

    def _fits(self, stored: _Stored) -> bool:
        """Whether an entry may be kept in memory: a large answer is read from the store each time."""
        return self.memory_entries > 0 and len(stored.entry.result_json) <= self.memory_bytes // 16

    def _remember(self, base: str, group: dict[str, _Stored]) -> None:
        self._drop_group(base)
        kept = {key: stored for key, stored in group.items() if self._fits(stored)}
        if not kept:
            return
        self._memory[base] = kept
        self._in_memory += len(kept)
        self._memory_used += sum(len(stored.entry.result_json) for stored in kept.values())
        self._shrink_memory()

    def _drop_group(self, base: str) -> None:
        group = self._memory.pop(base, {})
        self._in_memory -= len(group)
        self._memory_used -= sum(len(stored.entry.result_json) for stored in group.values())

    def _forget(self, entry: CacheEntry) -> None:
        group = self._memory.get(entry.base)
        stored = group.pop(entry.key, None) if group is not None else None
        if stored is not None:
            self._in_memory -= 1
            self._memory_used -= len(stored.entry.result_json)
            if not group:
                del self._memory[entry.base]

    def _shrink_memory(self) -> None:
        while (self._in_memory > self.memory_entries or self._memory_used > self.memory_bytes) and self._memory:
            self._drop_group(next(iter(self._memory)))
