"""`serve`'s answers under a steady stream of requests: latency percentiles, the collector, memory.

    python -m tests.benchmarks.bench_serve [--events N] [--entities N] [--requests N] [--rounds R]
        [--trees DIR,DIR...]

Loads ``--events`` generated change events (``generate_events``, default 300,000 over 30,000
entities) into a ledger once. Then, once per round and tree, a child process builds the API over it
(``streams.api.http.create_app``, its lifespan run by Starlette's ``TestClient``, in-process: no
network port) and sends ``--requests`` GET requests one after another: owners-of, 3-hop
dependents-of and approvals-required-for (1:2:1) at random services, both clocks at a random day
of the history, after 200 unmeasured ones. With ``--trees``, each child runs that source tree's code
(the trees interleaved round by round: a, b, then b, a, ...), so checkouts compare side by side on
the same ledger.

Reported per run: request latency p50 / p99 / p99.9 / max (wall clock, ``TestClient``'s own cost
included, the same for every tree), the collections of each generation and the seconds they took
(``gc.callbacks``), the child's CPU seconds and peak RSS, and the objects in reference cycles left
unreachable once the child hands the heap back (``gc.collect()`` after ``gc.unfreeze()``): garbage
a settled heap would have kept.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUERY_MIX = ("owners-of", "dependents-of", "dependents-of", "approvals-required-for")
WARM_UP = 200


def child(state: Path, requests: int, seed: int) -> dict:
    """One run, in this process, of the tree on ``sys.path``."""
    from fastapi.testclient import TestClient

    from state.keys import unpack
    from state.kv import RocksKV
    from streams.api.http import create_app
    from tests.benchmarks.stats import percentile

    kv = RocksKV(state, read_only=True)
    try:
        services = [str(unpack(key[1:])[-1]) for key, _ in kv.scan(b"E") if b"Service:" in key]
    finally:
        kv.close()
    collections = {generation: [0, 0.0] for generation in range(3)}
    began = [0.0]

    def timed(phase: str, info: dict) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            collections[info["generation"]][0] += 1
            collections[info["generation"]][1] += time.perf_counter() - began[0]

    rng = random.Random(seed)

    def request() -> tuple[str, dict]:
        name = rng.choice(QUERY_MIX)
        day = f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        params: dict = {"entity": rng.choice(services), "valid_at": day, "known_at": day}
        if name == "dependents-of":
            params["depth"] = 3
        return f"/v1/tenants/acme/{name}", params

    latencies = []
    with tempfile.TemporaryDirectory(prefix="bench-serve-cache-") as cache, \
            TestClient(create_app(state, cache_dir=Path(cache))) as client:
        for _ in range(WARM_UP):
            path, params = request()
            client.get(path, params=params)
        gc.callbacks.append(timed)
        cpu = time.process_time()
        for _ in range(requests):
            path, params = request()
            started = time.perf_counter()
            response = client.get(path, params=params)
            latencies.append(time.perf_counter() - started)
            if response.status_code != 200:
                raise RuntimeError(f"{path} {params}: {response.status_code} {response.text}")
        cpu = time.process_time() - cpu
        gc.callbacks.remove(timed)
    gc.unfreeze()

    def at(share: float) -> float:
        return percentile(latencies, share) * 1e3

    return {"p50": at(0.5), "p99": at(0.99), "p999": at(0.999), "max": max(latencies) * 1e3, "cpu_s": cpu,
            "collections": collections, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "unreachable": gc.collect()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--entities", type=int, default=30_000)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--trees", default=str(ROOT), help="comma-separated source trees (default: this one)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child, args.requests, args.seed)))
        return 0
    # Here, not at the top: a child runs this file against another tree, which may not have these.
    from streams.cli.load import load_into
    from tests.benchmarks.stats import load_average
    from tests.benchmarks.trees import in_round_order, parse_trees, tree_environment
    from tests.support.generate import generate_events

    trees = parse_trees(args.trees)
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as scratch:
        events, state = Path(scratch) / "events.jsonl", Path(scratch) / "ledger"
        with events.open("w") as out:
            for line in generate_events(args.events, args.entities, seed=7):
                out.write(line + "\n")
        load_into(state, [events], simulated_clock=True, ontology_path=None)
        print(f"# `serve` under {args.requests:,} requests (`python -m tests.benchmarks.bench_serve "
              f"{' '.join(argv if argv is not None else sys.argv[1:])}`)\n")
        print("| round | tree | p50 ms | p99 ms | p99.9 ms | max ms | collections: generation 0, 1, 2 (seconds) "
              "| CPU s | peak RSS MB | unreachable after | load average |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for round_no in range(args.rounds):
            for tree in in_round_order(trees, round_no):
                command = [sys.executable, str(Path(__file__).resolve()), "--child", str(state),
                           "--requests", str(args.requests), "--seed", str(args.seed)]
                done = subprocess.run(command, cwd=tree, env=tree_environment(tree),
                                      capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    raise RuntimeError(f"the run from {tree} failed:\n{done.stderr[-2000:]}")
                run = json.loads(done.stdout.splitlines()[-1])
                gcs = ", ".join(f"{count} ({seconds:.2f})" for count, seconds in run["collections"].values())
                print(f"| {round_no} | {tree} | {run['p50']:.2f} | {run['p99']:.2f} | {run['p999']:.2f} "
                      f"| {run['max']:.1f} | {gcs} | {run['cpu_s']:.1f} | {run['rss_mb']:.0f} "
                      f"| {run['unreachable']:,} | {load_average()} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
