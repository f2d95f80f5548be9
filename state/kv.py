"""Ordered key-value stores behind one small interface: RocksDB (rocksdict) and an in-memory twin.

Both pass the same contract tests; the in-memory one serves unit tests and tells a store bug
from an encoding bug.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol, cast

from rocksdict import AccessType, BlockBasedOptions, Cache, Options, Rdict, RdictIter, WriteBatch, WriteOptions
from sortedcontainers import SortedDict  # type: ignore[import-untyped]

from state.keys import prefix_end


class OrderedKV(Protocol):
    def get(self, key: bytes) -> bytes | None: ...

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """``get`` of each key, in order, in one call (RocksDB's multi-get)."""
        ...

    def scan(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) whose key starts with ``prefix``, in byte order; with ``start``, only
        from the first such key at or after ``start``."""
        ...

    def scan_before(self, prefix: bytes, before: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) whose key starts with ``prefix`` and sorts before ``before``, nearest
        first (descending byte order): the other side of a neighbourhood ``scan`` starts at."""
        ...

    def write(self, puts: list[tuple[bytes, bytes]], deletes: Sequence[bytes] = ()) -> None:
        """Apply all puts and deletes atomically."""
        ...

    def compact(self) -> None:
        """Reorganise storage for reads after a bulk write (may take a while; changes no data)."""
        ...

    def clear(self) -> None:
        """Delete every key, atomically."""
        ...

    def close(self) -> None: ...


class MemoryKV:
    def __init__(self) -> None:
        self._data: SortedDict = SortedDict()

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        return [self._data.get(key) for key in keys]

    def scan(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        upper = prefix_end(prefix) if prefix.rstrip(b"\xff") else None
        for key in self._data.irange(max(prefix, start or prefix), upper, inclusive=(True, False)):
            yield key, self._data[key]

    def scan_before(self, prefix: bytes, before: bytes) -> Iterator[tuple[bytes, bytes]]:
        for key in self._data.irange(prefix, before, inclusive=(True, False), reverse=True):
            yield key, self._data[key]

    def write(self, puts: list[tuple[bytes, bytes]], deletes: Sequence[bytes] = ()) -> None:
        for key, value in puts:
            self._data[key] = value
        for key in deletes:
            self._data.pop(key, None)

    def compact(self) -> None:
        """Nothing to reorganise in memory."""

    def clear(self) -> None:
        self._data.clear()

    def close(self) -> None:
        self._data = SortedDict()


def _table_options() -> BlockBasedOptions:
    """Bloom filters: most point reads miss (is this event id new? is this entity known?), and a
    filter answers those without reading a block."""
    # Not ``set_cache_index_and_filter_blocks``: with index blocks in the block cache, a prefix seek
    # on a fresh reader measured 15x slower here.
    table = BlockBasedOptions()
    table.set_bloom_filter(10, False)
    table.set_block_cache(Cache(256 << 20))
    return table


_IDLE_ITERATORS = 4


class RocksKV:
    """rocksdict in raw mode. ``read_only`` opens a secondary instance that never takes the writer's lock.

    ``bulk`` is for an import that can be run again (``edgeledger load``): writes skip the write-ahead
    log, and ``close`` flushes them to table files. A write batch still lands whole in one memtable, and
    memtables reach disk whole and in order, so a crash loses a suffix of batches, never part of one;
    re-running the import applies what was lost (event ids make the rest no-ops). Readers (secondary
    instances) see a bulk writer's batches only once they are flushed.
    """

    def __init__(self, path: str | Path, read_only: bool = False, bulk: bool = False,
                 tune: Callable[[Options], object] | None = None) -> None:
        """``tune`` changes a writer's options just before it opens, after every default here (a
        benchmark compares RocksDB settings on the ledger's own writes)."""
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise NotADirectoryError(f"{self.path} is a file, not a ledger state directory")
        options = Options(raw_mode=True)
        options.set_max_open_files(-1 if read_only else 512)
        options.set_block_based_table_factory(_table_options())
        if read_only:
            if not (self.path / "CURRENT").exists():
                raise FileNotFoundError(f"no ledger state at {self.path} (run `edgeledger load` first)")
            secondary = self.path.parent / f".{self.path.name}.secondary"
            self._db = Rdict(str(self.path), options=options,
                             access_type=AccessType.secondary(str(secondary)))
            self._db.try_catch_up_with_primary()
        else:
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise NotADirectoryError(f"cannot make the state directory {self.path}: "
                                         "a file is in the way on its path") from None
            options.create_if_missing(True)
            options.increase_parallelism(2)
            # Every event's re-delivery check is a point read that misses; a bloom filter over the
            # memtable answers it without a skiplist search (-0.7 % instructions, 200k-event load).
            options.set_memtable_whole_key_filtering(True)
            options.set_memtable_prefix_bloom_ratio(0.1)
            if tune is not None:
                tune(options)
            self._db = Rdict(str(self.path), options=options)
            if bulk:
                unlogged = WriteOptions()
                unlogged.disable_wal = True  # type: ignore[method-assign, assignment]  # a property; the stub says method
                self._db.set_write_options(unlogged)
        self._bulk = bulk and not read_only
        self._idle: list[RdictIter] = []
        self._generation = 0
        # Speed: the point read is rocksdict's own method, not a Python method wrapping it (an
        # interpreted call per read, 1.6 reads an event when loading).
        self.get: Callable[[bytes], bytes | None] = self._db.get

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        # rocksdict's ``get`` of a list is RocksDB's MultiGet (its stub types only single keys).
        return cast(list[bytes | None], self._db.get(keys))  # type: ignore[arg-type]

    def scan(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        return self._walk(prefix, lambda iterator: iterator.seek(max(prefix, start or prefix)), backwards=False)

    def scan_before(self, prefix: bytes, before: bytes) -> Iterator[tuple[bytes, bytes]]:
        def position(iterator: RdictIter) -> None:
            iterator.seek_for_prev(before)
            if iterator.valid() and iterator.key() == before:
                iterator.prev()

        return self._walk(prefix, position, backwards=True)

    def _walk(self, prefix: bytes, position: Callable[[RdictIter], object],
              backwards: bool) -> Iterator[tuple[bytes, bytes]]:
        """The rows of ``prefix`` from where ``position`` puts an iterator, one way, while the prefix holds."""
        # Speed: creating a RocksDB iterator builds one child iterator per memtable and SST file (up to
        # 0.4 ms on a freshly loaded store with many level-0 files); seeking an existing one is a few
        # µs. An iterator sees the store as of its creation, so idle ones are dropped on every write;
        # scans in progress (nested, or abandoned by a caller) each hold their own.
        generation = self._generation
        iterator = self._idle.pop() if self._idle else self._db.iter()
        try:
            position(iterator)
            step = iterator.prev if backwards else iterator.next
            while iterator.valid():
                key = iterator.key()
                if not key.startswith(prefix):
                    return
                yield key, iterator.value()
                step()
        finally:
            if generation == self._generation and len(self._idle) < _IDLE_ITERATORS:
                self._idle.append(iterator)

    def write(self, puts: list[tuple[bytes, bytes]], deletes: Sequence[bytes] = ()) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, value in puts:
            batch.put(key, value)
        for key in deletes:
            batch.delete(key)
        self._db.write(batch)
        self._generation += 1
        self._idle.clear()

    def compact(self) -> None:
        self._db.flush(wait=True)
        self._db.compact_range(None, None)

    def clear(self) -> None:
        # Every key starts with a table letter, below 0xff, so one range tombstone covers them all.
        self._db.delete_range(b"", b"\xff")
        self._generation += 1
        self._idle.clear()

    def close(self) -> None:
        self._idle.clear()
        self._generation += 1
        if self._bulk:
            self._db.flush(wait=True)
        self._db.close()
