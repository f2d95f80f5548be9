"""What RocksDB's write-ahead log costs a worker's commit: the same batches written with and without it.

    python -m tests.benchmarks.bench_wal [--rounds R] [--batches N] [--outbox-bytes B]

A worker writes each batch with the log (``RocksKV`` as ``run`` opens it): the input offsets, the
state and the outbox land whole or not at all, also across kill -9. ``load`` writes without it
(``bulk``). Here synthetic batches shaped like a worker's at 2,000 events are written both ways,
the two interleaved round by round (with, without, then without, with, ...): 16,000 rows of about
300 bytes (8 rows an event, random keys) and one outbox row of 2.4 MB (about 1.2 kB an event;
``--outbox-bytes``, 0 for none), the previous batch's outbox row deleted, as the worker trims it.
Reported: CPU of the writing thread per event, the Python loop that fills the ``WriteBatch``
included, as in ``RocksKV.write``.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

from rocksdict import WriteOptions

from state.kv import RocksKV

EVENTS_PER_BATCH = 2000
ROWS_PER_BATCH = 16_000


def batch(sequence: int, outbox_bytes: int) -> list[tuple[bytes, bytes]]:
    rng = random.Random(sequence)
    rows = [(b"V" + rng.randbytes(8) + str(rng.random()).encode(), rng.randbytes(120) + b"x" * 180)
            for _ in range(ROWS_PER_BATCH)]
    if outbox_bytes:
        rows.append((b"W" + str(sequence).encode(), rng.randbytes(outbox_bytes // 2) + b"y" * (outbox_bytes // 2)))
    return rows


def write_all(path: Path, batches: list[list[tuple[bytes, bytes]]], logged: bool) -> float:
    """Writing-thread CPU µs per event over all ``batches`` into a fresh store."""
    kv = RocksKV(path)
    if not logged:
        unlogged = WriteOptions()
        unlogged.disable_wal = True  # type: ignore[method-assign, assignment]  # a property; the stub says method
        kv._db.set_write_options(unlogged)
    cpu = 0.0
    try:
        for sequence, rows in enumerate(batches):
            started = time.thread_time()
            kv.write(rows, [b"W" + str(sequence - 1).encode()] if sequence else [])
            cpu += time.thread_time() - started
    finally:
        kv.close()
    return cpu / (len(batches) * EVENTS_PER_BATCH) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--outbox-bytes", type=int, default=2_400_000)
    args = parser.parse_args(argv)
    batches = [batch(sequence, args.outbox_bytes) for sequence in range(args.batches)]
    results: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="bench-wal-") as scratch:
        for round_no in range(args.rounds):
            for logged in ((True, False) if round_no % 2 == 0 else (False, True)):
                path = Path(scratch) / f"{round_no}-{logged}"
                results[logged].append(write_all(path, batches, logged))
    print(f"# A worker's batch write with and without RocksDB's write-ahead log "
          f"(`python -m tests.benchmarks.bench_wal --rounds {args.rounds} --batches {args.batches} "
          f"--outbox-bytes {args.outbox_bytes}`, "
          f"load average {os.getloadavg()[0]:.1f})\n")
    print("| write-ahead log | writing-thread CPU µs per event, round by round |")
    print("|---|---|")
    for logged in (True, False):
        print(f"| {'on (run)' if logged else 'off (load)'} | {', '.join(f'{v:.2f}' for v in results[logged])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
