"""The ledger's storage work alone: recorded from a real load, replayed under other RocksDB settings.

    python -m tests.benchmarks.bench_storage [--events N] [--entities N] [--rounds R] [--seed S]
        [--variants NAME,...]

1. Loads ``--events`` generated events (``tests/support/generate.py``) with ``load_files``, what
   ``edgeledger load --simulated-clock`` runs, on a store that records in order every point read,
   every prefix scan (with how many rows the ledger took of it) and every write batch.
2. Replays that sequence, with no ledger code in between, through ``RocksKV`` into a fresh
   directory per variant; the variants take turns in each round. It reports the loading thread's
   CPU for the writes (per row), the point reads and the scans, the CPU of RocksDB's background
   threads (flushes, compactions) until the store is closed, and the rows the scans returned.
   After the replay, untimed, it scans prefixes that do hold rows (``probe_prefixes``: names'
   aliases and nodes' adjacencies, as the ledger scans them). A variant whose scans return other
   rows than the ledger's (or, for the probes, than the store's own settings) changes what the
   ledger reads, and is marked: it could not be used as it is. (Run ``store`` first for the probe
   comparison; the default order does.)
3. Asks whether a write can overlap the processing of the next batch: one thread makes rocksdict's
   write of each recorded batch (built beforehand) while this one counts. The report gives both
   threads' CPU over the writes' wall time: about 1 core in all means they took turns (the write
   holds the GIL, so while it runs no other thread of the process runs Python), about 2 that they
   ran at once.

Variants (``VARIANTS``): ``store`` (the store's own settings: 64 MB memtables, a bloom filter over
them), ``memtable-16mb``, ``memtable-8mb``, ``hash-skiplist`` (a hash of skip lists by the first 24
bytes of a key, with that prefix extractor). The machine is shared: compare within one report.
"""

from __future__ import annotations

import argparse
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rocksdict import MemtableFactory, Options, Rdict, SliceTransform, WriteBatch

from state.keys import pack, unpack
from state.kv import RocksKV
from state.store import LedgerStore
from streams.cli.load import load_files
from tests.benchmarks.bench_ledger import command_line, generated_history

DIFFERS = " (differs: not usable as is)"
Get = tuple[bytes] | tuple[list[bytes]]
Scan = tuple[bytes, bytes | None, int]
Write = tuple[list[tuple[bytes, bytes]], Sequence[bytes]]


@dataclass
class RecordingKV:
    """An ``OrderedKV`` over ``kv`` that records every operation, in order: ``("get", key)``,
    ``("get_many", keys)``, ``("scan", prefix, start, rows taken)`` (``scan_before`` alike),
    ``("write", puts, deletes)``."""

    kv: RocksKV
    operations: list[tuple[str, Get | Scan | Write]] = field(default_factory=list)

    def get(self, key: bytes) -> bytes | None:
        self.operations.append(("get", (key,)))
        return self.kv.get(key)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        self.operations.append(("get_many", (list(keys),)))
        return self.kv.get_many(keys)

    def scan(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        taken = 0
        try:
            for row in self.kv.scan(prefix, start):
                taken += 1
                yield row
        finally:
            self.operations.append(("scan", (prefix, start, taken)))

    def scan_before(self, prefix: bytes, before: bytes) -> Iterator[tuple[bytes, bytes]]:
        taken = 0
        try:
            for row in self.kv.scan_before(prefix, before):
                taken += 1
                yield row
        finally:
            self.operations.append(("scan_before", (prefix, before, taken)))

    def write(self, puts: list[tuple[bytes, bytes]], deletes: Sequence[bytes] = ()) -> None:
        self.operations.append(("write", (list(puts), list(deletes))))
        self.kv.write(puts, deletes)

    def compact(self) -> None:
        self.kv.compact()

    def close(self) -> None:
        self.kv.close()


def _memtable_size(megabytes: int) -> Callable[[Options], None]:
    def tune(options: Options) -> None:
        options.set_write_buffer_size(megabytes << 20)
    return tune


def _hash_skiplist(options: Options) -> None:
    options.set_prefix_extractor(SliceTransform.create_max_len_prefix(24))
    options.set_allow_concurrent_memtable_write(False)  # this memtable takes one writer at a time
    options.set_memtable_factory(MemtableFactory.hash_skip_list(1_000_000, 4, 4))


VARIANTS: dict[str, Callable[[Options], None] | None] = {
    "store": None,
    "memtable-16mb": _memtable_size(16),
    "memtable-8mb": _memtable_size(8),
    "hash-skiplist": _hash_skiplist,
}


@dataclass
class Replayed:
    write_s: float = 0.0
    get_s: float = 0.0
    scan_s: float = 0.0
    background_s: float = 0.0
    rows_written: int = 0
    rows_scanned: int = 0
    probe_rows: int = 0


def record(state: Path, events_file: Path) -> list[tuple[str, Get | Scan | Write]]:
    recording = RecordingKV(RocksKV(state, bulk=True))
    store = LedgerStore(recording)
    try:
        load_files([events_file], store, simulated_clock=True)
    finally:
        store.close()
    return recording.operations


def probe_prefixes(operations: list[tuple[str, Get | Scan | Write]], per_table: int = 2_000) -> list[bytes]:
    """Scan prefixes that hold rows at the end of the load, as the ledger scans them: a name's
    aliases (``N``: tenant, sort key, name) and a node's adjacency of one relationship and direction (``A``:
    tenant, node, rel, direction), evenly sampled from the rows written."""
    found: dict[bytes, list[bytes]] = {b"N": [], b"A": []}
    parts_kept = {b"N": 3, b"A": 4}
    for kind, arguments in operations:
        if kind != "write":
            continue
        for key, _ in arguments[0]:  # type: ignore[index, misc]
            table = key[:1]
            if table in found:
                found[table].append(b"".join((table, pack(*unpack(key[1:])[:parts_kept[table]]))))
    prefixes: list[bytes] = []
    for keys in found.values():
        distinct = sorted(set(keys))
        step = max(1, len(distinct) // per_table)
        prefixes += distinct[::step][:per_table]
    return prefixes


def replay(state: Path, operations: list[tuple[str, Get | Scan | Write]],
           tune: Callable[[Options], None] | None, probes: Sequence[bytes] = ()) -> Replayed:
    """The recorded operations through a fresh ``RocksKV`` opened with ``tune``; a scan takes as
    many rows as the ledger took (fewer if the variant returns fewer). Then, untimed, a full scan
    of each of ``probes``: the rows they return must not depend on the settings."""
    kv = RocksKV(state, bulk=True, tune=tune)
    result = Replayed()
    process_started, thread_started = time.process_time(), time.thread_time()
    clock = time.thread_time
    for kind, arguments in operations:
        started = clock()
        if kind == "get":
            kv.get(arguments[0])  # type: ignore[arg-type]
            result.get_s += clock() - started
        elif kind == "get_many":
            kv.get_many(arguments[0])  # type: ignore[arg-type]
            result.get_s += clock() - started
        elif kind in ("scan", "scan_before"):
            prefix, start, taken = arguments  # type: ignore[misc]
            rows = kv.scan(prefix, start) if kind == "scan" else kv.scan_before(prefix, start)  # type: ignore[arg-type]
            for count, _ in enumerate(rows, 1):
                result.rows_scanned += 1
                if count == taken:
                    break
            result.scan_s += clock() - started
        else:
            puts, deletes = arguments  # type: ignore[misc]
            kv.write(puts, deletes)  # type: ignore[arg-type]
            result.write_s += clock() - started
            result.rows_written += len(puts) + len(deletes)  # type: ignore[arg-type]
    thread_s = time.thread_time() - thread_started
    for prefix in probes:
        result.probe_rows += sum(1 for _ in kv.scan(prefix))
    kv.close()  # flushes the memtables: their cost is background work too
    result.background_s = time.process_time() - process_started - thread_s
    return result


def write_overlap(state: Path, operations: list[tuple[str, Get | Scan | Write]]) -> tuple[float, float, float]:
    """(writes' wall seconds, their thread's CPU, this thread's CPU meanwhile): rocksdict's write of
    each recorded batch, built beforehand, runs on a second thread while this one counts. Only the
    write itself runs there, so the answer is about the write, not about building the batch in Python."""
    batches = []
    for kind, arguments in operations:
        if kind == "write":
            batch = WriteBatch(raw_mode=True)
            puts, deletes = arguments  # type: ignore[misc]
            for key, value in puts:  # type: ignore[attr-defined]
                batch.put(key, value)
            for key in deletes:  # type: ignore[attr-defined]
                batch.delete(key)
            batches.append(batch)
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    db = Rdict(str(state), options=options)
    writer_cpu: list[float] = []

    def write_all() -> None:
        started = time.thread_time()
        for batch in batches:
            db.write(batch)
        writer_cpu.append(time.thread_time() - started)

    writer = threading.Thread(target=write_all)
    wall_started, own_started = time.perf_counter(), time.thread_time()
    writer.start()
    counted = 0
    while writer.is_alive():
        counted += 1
    own = time.thread_time() - own_started
    wall = time.perf_counter() - wall_started
    db.close()
    return wall, writer_cpu[0], own


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_storage",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--entities", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args(argv)
    names = args.variants.split(",")
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    with generated_history("edgeledger-storage-", args.events, args.entities, args.seed) as (work, events_file):
        operations = record(work / "recorded", events_file)
        shutil.rmtree(work / "recorded", ignore_errors=True)
        counts = {kind: sum(1 for k, _ in operations if k == kind) for kind in ("get", "get_many", "scan", "write")}
        print(f"### The ledger's storage work, replayed: {args.events:,} events, {args.entities:,} entities\n")
        print(f"Command: `{command_line(args, parser.prog)}`\n")
        print(f"Recorded: {counts['get']:,} point reads, {counts['get_many']:,} multi-gets, {counts['scan']:,} scans, "
              f"{counts['write']:,} write batches.\n")
        probes = probe_prefixes(operations)
        print("| round | variant | writes s | ns per row | point reads s | scans s | background CPU s "
              f"| rows the ledger's scans got | rows {len(probes):,} probe scans got |")
        print("|---|---|---|---|---|---|---|---|---|")
        expected_rows = sum(arguments[2] for kind, arguments in operations if kind == "scan")  # type: ignore[misc]
        expected_probe_rows: int | None = None
        for round_number in range(1, args.rounds + 1):
            for name in names:
                shutil.rmtree(work / name, ignore_errors=True)
                result = replay(work / name, operations, VARIANTS[name], probes)
                shutil.rmtree(work / name, ignore_errors=True)
                if name == "store":
                    expected_probe_rows = result.probe_rows
                differs = result.rows_scanned != expected_rows or (
                    expected_probe_rows is not None and result.probe_rows != expected_probe_rows)
                per_row = 1e9 * result.write_s / result.rows_written
                print(f"| {round_number} | {name} | {result.write_s:.2f} | {per_row:,.0f} | "
                      f"{result.get_s:.2f} | {result.scan_s:.2f} | {result.background_s:.2f} | "
                      f"{result.rows_scanned:,} | {result.probe_rows:,}{DIFFERS if differs else ''} |", flush=True)
        wall, writer_cpu, own = write_overlap(work / "overlap", operations)
        print(f"\nWrites on a second thread: {wall:.2f} s wall, {writer_cpu:.2f} s CPU on that thread, "
              f"{own:.2f} s on this one meanwhile: {(writer_cpu + own) / wall:.2f} cores in all.")


if __name__ == "__main__":
    main()
