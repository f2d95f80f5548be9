"""Ordered key-value stores behind one small interface: RocksDB (rocksdict) and an in-memory twin.

Both pass the same contract tests; the in-memory one serves unit tests and tells a store bug
from an encoding bug.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from rocksdict import AccessType, Options, Rdict, WriteBatch
from sortedcontainers import SortedDict

from state.keys import prefix_end


class OrderedKV(Protocol):
    def get(self, key: bytes) -> bytes | None: ...

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) whose key starts with ``prefix``, in byte order."""
        ...

    def write(self, puts: list[tuple[bytes, bytes]], deletes: list[bytes] = ()) -> None:
        """Apply all puts and deletes atomically."""
        ...

    def close(self) -> None: ...


class MemoryKV:
    def __init__(self) -> None:
        self._data: SortedDict = SortedDict()

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        upper = prefix_end(prefix) if prefix.rstrip(b"\xff") else None
        for key in self._data.irange(prefix, upper, inclusive=(True, False)):
            yield key, self._data[key]

    def write(self, puts: list[tuple[bytes, bytes]], deletes: list[bytes] = ()) -> None:
        for key, value in puts:
            self._data[key] = value
        for key in deletes:
            self._data.pop(key, None)

    def close(self) -> None:
        self._data = SortedDict()


class RocksKV:
    """rocksdict in raw mode. ``read_only`` opens a secondary instance that never takes the writer's lock."""

    def __init__(self, path: str | Path, read_only: bool = False) -> None:
        self.path = Path(path)
        options = Options(raw_mode=True)
        options.set_max_open_files(-1 if read_only else 512)
        if read_only:
            if not (self.path / "CURRENT").exists():
                raise FileNotFoundError(f"no ledger state at {self.path} (run `edgeledger load` first)")
            secondary = self.path.parent / f".{self.path.name}.secondary"
            self._db = Rdict(str(self.path), options=options,
                             access_type=AccessType.secondary(str(secondary)))
            self._db.try_catch_up_with_primary()
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            options.create_if_missing(True)
            options.increase_parallelism(2)
            self._db = Rdict(str(self.path), options=options)

    def get(self, key: bytes) -> bytes | None:
        return self._db.get(key)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        iterator = self._db.iter()
        iterator.seek(prefix)
        while iterator.valid():
            key = iterator.key()
            if not key.startswith(prefix):
                return
            yield key, iterator.value()
            iterator.next()

    def write(self, puts: list[tuple[bytes, bytes]], deletes: list[bytes] = ()) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, value in puts:
            batch.put(key, value)
        for key in deletes:
            batch.delete(key)
        self._db.write(batch)

    def close(self) -> None:
        self._db.close()
