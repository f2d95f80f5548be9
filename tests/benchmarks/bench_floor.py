"""How far the ledger's event path is from the storage floor, side by side on the same events.

    python -m tests.benchmarks.bench_floor [--events N] [--entities N] [--rounds R] [--seed S]

The floor does what no implementation of the ledger can skip, in plain Python against the same
RocksDB layout:
- validate every line from its bytes, a batch at a time (as ``load`` does);
- read each batch's re-delivery checks in one multi-get (as ``load`` does);
- for each assertion, one new version with a derived id and its four rows (V, A out, A in, B);
- the event's ``I`` row, and per write batch one ``T`` row listing the batch's new versions;
- a write batch per ``BATCH_EVENTS`` events, without the write-ahead log, as ``load`` writes.

It resolves no mentions, reads no believed versions, closes nothing and appends no remainders.
The real ledger writes about two versions per event here, not one, so the floor is a lower bound.
The ledger's run also times its own RocksDB write (one per batch) and counts the rows it writes:
what those rows cost RocksDB alone, whatever code builds them.

The yardstick is the loop the ledger issue states its target beside: "a bare loop of decode
(pydantic ``model_validate_json``) + rocksdict WriteBatch runs at about 150k events/s"; the target,
25,000, is a sixth of that. Here it validates each line from its bytes and puts the line under its
event id, a write batch per ``BATCH_EVENTS`` events without the write-ahead log. The machine's speed
moves by tens of percent between days and the yardstick moves with it, so the ledger's rate as a
share of the yardstick's says where the code stands whatever the day.

All three run ``--rounds`` times, interleaved, on one generated file, the yardstick once before the
others and once after them: the mean of the two is the machine's speed while the ledger ran (a single
10-second pass moved by a quarter between rounds). The report gives the loading-thread CPU of each
run. The machine is shared: compare rates within one report only.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import orjson
from rocksdict import WriteBatch

from processors.batch import BATCH_EVENTS
from schemas.events import EVENT_ADAPTER, ChangeEvent
from schemas.times import to_micros
from state import codec
from state.keys import encode_int, pack
from state.kv import OrderedKV, RocksKV
from state.store import LedgerStore
from streams.cli.load import load_files
from tests.benchmarks.bench_ledger import TENANT, command_line, generated_history
from tests.benchmarks.stats import load_average

YARDSTICK_RATE = 150_000
"""The ledger issue's figure for its yardstick loop on this machine kind, events/s."""
TARGET_RATE = 25_000
"""The ledger issue's target for ``load``, events/s on one core."""


def floor_load(state: Path, events_file: Path) -> tuple[int, float]:
    """(change events written, loading-thread CPU seconds)."""
    kv = RocksKV(state, bulk=True)
    validate_json = EVENT_ADAPTER.validator.validate_json
    started = time.thread_time()
    changes = tx = 0
    with open(events_file, "rb") as lines:
        for batch in _batches(lines):
            # As ``load`` does: the batch validated first, its re-delivery checks read in one multi-get.
            events = [event for event in map(validate_json, batch) if isinstance(event, ChangeEvent)]
            keys = [b"I" + pack(event.tenant, event.event_id) for event in events]
            kv.get_many(keys)
            puts: list[tuple[bytes, bytes]] = []
            appended: list[tuple[int, str, str]] = []
            for event, seen_key in zip(events, keys, strict=True):
                changes += 1
                tx += 1
                puts += version_rows(event, pack(event.tenant), tx, appended)
                puts.append((seen_key, b"applied"))
            kv.write(_with_changes(puts, pack(TENANT), appended))
    elapsed = time.thread_time() - started
    kv.close()
    return changes, elapsed


def _batches(lines: Iterator[bytes]) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    for line in lines:
        batch.append(line)
        if len(batch) == BATCH_EVENTS:
            yield batch
            batch = []
    if batch:
        yield batch


def yardstick_load(state: Path, events_file: Path) -> float:
    """The issue's yardstick loop over the file's events; loading-thread CPU seconds."""
    shutil.rmtree(state, ignore_errors=True)
    kv = RocksKV(state, bulk=True)
    db = kv._db  # rocksdict's own WriteBatch and write, with no layer of ours between
    validate_json = EVENT_ADAPTER.validator.validate_json
    started = time.thread_time()
    batch, in_batch = WriteBatch(raw_mode=True), 0
    with open(events_file, "rb") as lines:
        for line in lines:
            event = validate_json(line)
            batch.put(b"I" + (event.__dict__["event_id"] or "clock").encode(), line)  # a clock event has none
            in_batch += 1
            if in_batch == BATCH_EVENTS:
                db.write(batch)
                batch, in_batch = WriteBatch(raw_mode=True), 0
    db.write(batch)
    elapsed = time.thread_time() - started
    kv.close()
    return elapsed


def yardstick_summary(changes: int, rounds: list[tuple[float, float]]) -> str:
    """Where the ledger stands against the yardstick: per round (``rounds``: the yardstick's mean
    seconds and the ledger's), the ledger's rate as a share of the yardstick's, beside the target's share of
    the issue's figure, and the target scaled to the speed the machine ran the yardstick at."""
    target_share = TARGET_RATE / YARDSTICK_RATE
    lines = [f"The ledger's rate as a share of the yardstick's; the target is {TARGET_RATE:,} of "
             f"{YARDSTICK_RATE:,}, {target_share:.1%}:", ""]
    for round_number, (yardstick_s, ledger_s) in enumerate(rounds, 1):
        yardstick_rate = changes / yardstick_s
        share = yardstick_s / ledger_s
        lines.append(f"- round {round_number}: the yardstick ran at {yardstick_rate:,.0f} events/s on average "
                     f"({yardstick_rate / YARDSTICK_RATE:.0%} of the issue's figure) and the ledger at "
                     f"{share:.1%} of it. The target scaled to this machine is "
                     f"{target_share * yardstick_rate:,.0f} events/s; the ledger reached "
                     f"{share / target_share:.0%} of it.")
    return "\n".join(lines)


def _with_changes(puts: list[tuple[bytes, bytes]], tenant: bytes,
                  appended: list[tuple[int, str, str]]) -> list[tuple[bytes, bytes]]:
    """The batch's rows and its one ``T`` row, as the store files them."""
    if appended:
        puts.append((b"T" + tenant + encode_int(appended[-1][0]), codec.encode_changes(appended)))
    return puts


def version_rows(event: ChangeEvent, tenant: bytes, tx: int,
                 appended: list[tuple[int, str, str]]) -> list[tuple[bytes, bytes]]:
    rows: list[tuple[bytes, bytes]] = []
    source = event.source
    detected_at = to_micros(event.detected_at)
    for index, item in enumerate(event.assert_):
        src, dst = f"{item.src.type}:{item.src.id}", f"{item.dst.type}:{item.dst.id}"
        digest = hashlib.blake2b(f"{event.tenant}\x1f{event.event_id}\x1f{index}".encode(), digest_size=8)
        edge_id = "e" + digest.hexdigest()
        valid_from = to_micros(item.valid_from) if item.valid_from else None
        valid_to = to_micros(item.valid_to) if item.valid_to else None
        value = orjson.dumps([edge_id, event.tenant, src, item.rel, dst, valid_from, valid_to, tx, None,
                              source.system, source.record, source.version, item.evidence, item.confidence,
                              edge_id, [], event.event_id, detected_at, item.phrase])
        edge, rel, recorded = pack(edge_id), pack(item.rel), encode_int(tx) + pack(edge_id)
        appended.append((tx, "a", edge_id))
        rows += [(b"V" + tenant + edge, value),
                 (b"A" + tenant + pack(src) + rel + pack("o") + recorded, b""),
                 (b"A" + tenant + pack(dst) + rel + pack("i") + recorded, b""),
                 (b"B" + tenant + pack(source.system, source.record or "") + edge, value)]
    return rows


class TimedWrites:
    """An ``OrderedKV`` that passes everything to ``kv`` and adds up the thread CPU of its writes.
    Reads are ``kv``'s own bound methods, so the ledger reads as it does in ``load`` (``RocksKV.get``
    is rocksdict's method itself, not a Python wrapper around it)."""

    def __init__(self, kv: OrderedKV) -> None:
        self.kv = kv
        self.get: Callable[[bytes], bytes | None] = kv.get
        self.get_many: Callable[[list[bytes]], list[bytes | None]] = kv.get_many
        self.scan: Callable[..., Iterator[tuple[bytes, bytes]]] = kv.scan
        self.write_seconds = 0.0
        self.rows = 0

    def write(self, puts: list[tuple[bytes, bytes]], deletes: Sequence[bytes] = ()) -> None:
        started = time.thread_time()
        self.kv.write(puts, deletes)
        self.write_seconds += time.thread_time() - started
        self.rows += len(puts) + len(deletes)

    def compact(self) -> None:
        self.kv.compact()

    def close(self) -> None:
        self.kv.close()


def ledger_load(state: Path, events_file: Path) -> tuple[float, TimedWrites]:
    """What ``load`` does (``load_into``), on a store whose writes are timed."""
    timed = TimedWrites(RocksKV(state, bulk=True))
    store = LedgerStore(timed)
    started = time.thread_time()
    try:
        load_files([events_file], store, simulated_clock=True)
    finally:
        store.close()
    return time.thread_time() - started, timed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_floor", description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--entities", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    with generated_history("edgeledger-floor-", args.events, args.entities, args.seed) as (work, events_file):
        print(f"### The ledger against the storage floor: {args.events:,} events, {args.entities:,} entities\n")
        print(f"Command: `{command_line(args, parser.prog)}`\n")
        print("| round | path | loading-thread CPU s | events/s | µs per event | RocksDB rows per event |")
        print("|---|---|---|---|---|---|")
        against_yardstick = []
        for round_number in range(1, args.rounds + 1):
            before_s = yardstick_load(work / "yardstick-before", events_file)
            shutil.rmtree(work / "floor", ignore_errors=True)
            changes, floor_s = floor_load(work / "floor", events_file)
            shutil.rmtree(work / "ledger", ignore_errors=True)
            ledger_s, timed = ledger_load(work / "ledger", events_file)
            after_s = yardstick_load(work / "yardstick-after", events_file)
            # The yardstick brackets the ledger: their mean is the machine's speed while the ledger ran.
            against_yardstick.append(((before_s + after_s) / 2, ledger_s))
            rows = f"{timed.rows / changes:.2f}"
            for name, seconds, per_event in (("the issue's yardstick, before", before_s, "1.00"),
                                             ("floor", floor_s, ""), ("ledger (`load`)", ledger_s, rows),
                                             ("ledger: its RocksDB writes alone", timed.write_seconds, rows),
                                             ("the issue's yardstick, after", after_s, "1.00")):
                print(f"| {round_number} | {name} | {seconds:.2f} | {changes / seconds:,.0f} | "
                      f"{seconds / changes * 1e6:.1f} | {per_event} |")
        print(f"\n{yardstick_summary(changes, against_yardstick)}\n\nLoad average {load_average()} at the end.")


if __name__ == "__main__":
    main()
