"""Entity resolution: a name-only mention against 100,000 entities, and load with name-only mentions.

    python -m tests.benchmarks.bench_resolution [--entities N] [--lookups L] [--events E] [--rounds R]
                                                [--instructions]

1. Resolving: a RocksDB state with ``--entities`` Services named by three words (of a 200-word
   vocabulary, so every word is shared by thousands and most names have near neighbours);
   ``--lookups`` name-only mentions with no exact alias hit (half a known name with one slip, half an
   unknown name) each resolved by ``MentionResolver.resolve`` (blocking, fuzzy matching, nothing
   written), wall time per mention: p50, p99, max.
2. Loading: the same ``--events`` generated events (``tests.support.generate``), every mention with
   its entity's name, loaded into fresh states side by side: once with every mention's id, once with
   30 % of the mentions name-only (seeded). Events per second, best of ``--rounds``, interleaved.
   ``--instructions``: instead of all that, the two loads' instructions on the loading thread.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

from processors.identity import Mention, MentionResolver
from processors.model import AliasEntry, Entity
from processors.pending import PendingLedger
from state.open import open_writer
from streams.cli.load import load_files
from tests.support.generate import generate_events

WORDS = [f"{a}{b}" for a in ("led", "pay", "set", "ord", "inv", "fra", "cus", "pri", "shi", "aud") for b in (
    "ger", "ment", "tle", "er", "oice", "ud", "tom", "cing", "pment", "it", "ex", "or", "ant", "ion", "ure",
    "ast", "ive", "olt", "ara", "ink")]
"""200 made-up words (10 x 20 syllables): names share words the way an organisation's do."""


def name_of(index: int) -> str:
    words = []
    for _ in range(3):
        index, digit = divmod(index, len(WORDS))
        words.append(WORDS[digit])
    return " ".join(words)


def slip(name: str, rng: random.Random) -> str:
    i = rng.randrange(1, len(name) - 2)
    return name[:i] + name[i + 1] + name[i] + name[i + 2:] if name[i] != " " and name[i + 1] != " " else name + "x"


def build_entities(state: Path, count: int) -> None:
    store = open_writer(state, bulk=True)
    try:
        for start in range(0, count, 10_000):
            pending = PendingLedger(store)
            for index in range(start, min(count, start + 10_000)):
                entity_id, name = f"Service:cmdb:S{index}", name_of(index)
                pending.add_entity(Entity("acme", entity_id, "Service", name, 1))
                pending.add_alias(AliasEntry("acme", name, entity_id, 1))
            pending.tx = 1
            store.commit(pending)
        store.kv.compact()
    finally:
        store.close()


def time_lookups(state: Path, count: int, entities: int) -> dict[str, float]:
    rng = random.Random(7)
    names = [slip(name_of(rng.randrange(entities)), rng) if i % 2 == 0 else f"{name_of(i)} zzq{i}"
             for i in range(count)]
    store = open_writer(state)
    timings, kinds = [], {}
    try:
        for name in names[:50]:  # warm the process (imports, caches of the interpreter), not the blocks
            MentionResolver(store, "acme").resolve(Mention("Service", None, name))
        for name in names:
            started = time.perf_counter_ns()
            resolution = MentionResolver(store, "acme").resolve(Mention("Service", None, name))
            timings.append(time.perf_counter_ns() - started)
            kinds[resolution.kind] = kinds.get(resolution.kind, 0) + 1
    finally:
        store.close()
    timings.sort()
    return {"p50_ms": timings[len(timings) // 2] / 1e6, "p99_ms": timings[int(len(timings) * 0.99)] / 1e6,
            "max_ms": timings[-1] / 1e6, "mean_ms": statistics.fmean(timings) / 1e6, **kinds}


def event_files(folder: Path, events: int) -> tuple[Path, Path]:
    """The same events twice: every mention with id and name, and 30 % of the mentions name-only."""
    rng = random.Random(11)
    with_ids, mixed = [], []
    for line in generate_events(events, max(10, events // 10)):
        event = json.loads(line)
        for item in (*event.get("assert", ()), *event.get("retract", ())):
            for end in ("src", "dst"):
                item[end]["name"] = name_of(zlib.crc32(item[end]["id"].encode()) % 7_999_999)
        with_ids.append(json.dumps(event))
        for item in (*event.get("assert", ()), *event.get("retract", ())):
            for end in ("src", "dst"):
                if rng.random() < 0.3:
                    del item[end]["id"]
        mixed.append(json.dumps(event))
    paths = folder / "ids.jsonl", folder / "names.jsonl"
    for path, lines in zip(paths, (with_ids, mixed), strict=True):
        path.write_text("\n".join(lines) + "\n")
    return paths


def load_rate(path: Path, state: Path, events: int) -> float:
    store = open_writer(state, bulk=True)
    try:
        started = time.perf_counter()
        counts = load_files([path], store, simulated_clock=True)
        elapsed = time.perf_counter() - started
    finally:
        store.close()
    assert counts.balanced()
    return events / elapsed


def count_load_instructions(events: int) -> int:
    """The loading thread's instructions for each of the two event files (``bench_instructions --file``):
    a ratio the machine's noise cannot move, where the timed one swings."""
    with tempfile.TemporaryDirectory() as folder:
        counted = {}
        for label, path in zip(("all ids", "30 % name-only"), event_files(Path(folder), events), strict=True):
            done = subprocess.run([sys.executable, "-m", "tests.benchmarks.bench_instructions", "--file", str(path)],
                                  capture_output=True, text=True, check=False)
            found = re.search(r"([\d,]+) instructions on the loading thread", done.stdout)
            if done.returncode != 0 or found is None:
                print(done.stdout + done.stderr, file=sys.stderr)
                return 1
            counted[label] = int(found.group(1).replace(",", ""))
            print(f"{label}: {counted[label]:,} instructions")
        print(f"ratio all ids / 30 % name-only: {counted['all ids'] / counted['30 % name-only']:.3f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--lookups", type=int, default=2_000)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--instructions", action="store_true",
                        help="count the two loads' instructions instead of timing anything (needs valgrind)")
    args = parser.parse_args(argv)
    if args.instructions:
        return count_load_instructions(args.events)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        started = time.perf_counter()
        build_entities(root / "entities", args.entities)
        print(f"built {args.entities:,} entities in {time.perf_counter() - started:.1f} s")
        print("resolving a name-only mention:", json.dumps(time_lookups(root / "entities", args.lookups,
                                                                         args.entities)))
        ids, names = event_files(root, args.events)
        rates: dict[str, list[float]] = {"all ids": [], "30 % name-only": []}
        for round_ in range(args.rounds):
            for label, path in (("all ids", ids), ("30 % name-only", names)):
                rates[label].append(load_rate(path, root / f"{label[:3]}-{round_}", args.events + args.events // 100))
        best = {label: max(values) for label, values in rates.items()}
        print("load, events/s (best of rounds):", json.dumps({k: round(v) for k, v in best.items()}),
              f"ratio {best['30 % name-only'] / best['all ids']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
