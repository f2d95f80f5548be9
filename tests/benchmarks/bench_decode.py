"""Decoding and validating events: one step from the bytes against orjson then the model.

    python -m tests.benchmarks.bench_decode [--events N] [--rounds R]

The ledger validates each event from its bytes (``validate_event_json``) and decodes in two steps
(``orjson.loads`` then ``validate_event``) only what that refuses. This times both, and orjson alone,
over the same generated change events (``tests.support.generate``), CPU time per event, best of
``--rounds`` passes, interleaved. A micro-measure: in a large load the event's other work and its
memory traffic dominate.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import orjson

from schemas.events import validate_event, validate_event_json
from tests.support.generate import generate_events


def per_event_us(decode: Callable[[bytes], object], lines: list[bytes]) -> float:
    started = time.process_time()
    for line in lines:
        decode(line)
    return (time.process_time() - started) / len(lines) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    lines = [line.encode() for line in generate_events(args.events, max(1, args.events // 10))]
    ways: dict[str, Callable[[bytes], object]] = {
        "one step: validate_event_json": validate_event_json,
        "two steps: orjson.loads, validate_event": lambda line: validate_event(orjson.loads(line)),
        "orjson.loads alone": orjson.loads,
    }
    best = dict.fromkeys(ways, float("inf"))
    for _ in range(args.rounds):
        for name, decode in ways.items():
            best[name] = min(best[name], per_event_us(decode, lines))
    print(f"{len(lines):,} lines, best of {args.rounds} interleaved passes, CPU µs an event:")
    for name, micros in best.items():
        print(f"  {name:42s} {micros:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
