"""The same load on different interpreter builds, side by side.

    python -m tests.benchmarks.bench_interpreters --trees DIR,DIR... [--events N] [--entities N]
                                                  [--rounds R] [--seed S]

Each tree runs with the interpreter of its own ``.venv`` (made by ``./dev``, or by hand from another
interpreter) and its own compiled core, built by that interpreter; a tree must hold this module
(this commit or a later one). One generated history is loaded by every tree in each round, in ABBA
order (``trees.in_round_order``), each load in a child process measured as ``./dev bench`` measures
it (``bench_ledger.timed_load``): loading-thread CPU, process CPU and wall clock. Children inherit
the environment, so run this under ``LD_PRELOAD`` of tcmalloc to compare as ``./dev bench`` loads;
every row names the interpreter, the allocator and the core it ran on.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def child(events_file: Path, state: Path, events: int, lines: int) -> int:
    """One load, run by the tree's own interpreter; prints its figures as one JSON line."""
    from processors import native
    from tests.benchmarks.allocator import allocator_in_use
    from tests.benchmarks.bench_ledger import timed_load
    from tests.benchmarks.interpreter import interpreter_in_use

    figures = timed_load(state, events_file, events, lines)
    print(json.dumps({
        "interpreter": interpreter_in_use(), "allocator": allocator_in_use(),
        "core": native.describe(),
        "thread_cpu_s": figures.thread_cpu_s, "cpu_s": figures.cpu_s, "wall_s": figures.wall_s,
        "balanced": bool(figures.summary["balanced"]),
    }))
    return 0


def run_child(tree: Path, events_file: Path, state: Path, events: int, lines: int) -> dict:
    from tests.benchmarks.trees import tree_environment

    python = tree / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{tree} has no .venv/bin/python: run ./dev there, or make one by hand")
    process = subprocess.run(
        [str(python), "-m", "tests.benchmarks.bench_interpreters", "--child", str(events_file), str(state),
         str(events), str(lines)],
        cwd=tree, env=tree_environment(tree), capture_output=True, text=True, check=False)
    if process.returncode != 0:
        raise SystemExit(f"the load in {tree} failed:\n{process.stderr[-2000:]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        events_file, state, events, lines = argv[1:5]
        return child(Path(events_file), Path(state), int(events), int(lines))
    from tests.benchmarks.bench_ledger import generated_history
    from tests.benchmarks.stats import load_average
    from tests.benchmarks.trees import in_round_order, parse_trees

    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_interpreters", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", default=str(ROOT), help="comma-separated source trees, each with its .venv")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    trees = parse_trees(args.trees)
    print(f"### The load on each tree's interpreter: {args.events:,} events, {args.entities:,} entities\n")
    print("| round | tree | loading-thread CPU | events/s | process CPU | wall | load avg | interpreter | "
          "allocator | core | balanced |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    per_tree: dict[Path, list[float]] = {tree: [] for tree in trees}
    with generated_history("edgeledger-interpreters-", args.events, args.entities, args.seed) as (work, events_file):
        with open(events_file, "rb") as handle:
            lines = sum(1 for _ in handle)
        for round_no in range(args.rounds):
            for tree in in_round_order(trees, round_no):
                with tempfile.TemporaryDirectory(dir=work) as scratch:
                    result = run_child(tree, events_file, Path(scratch) / "state", args.events, lines)
                per_tree[tree].append(result["thread_cpu_s"])
                print(f"| {round_no + 1} | {tree} | {result['thread_cpu_s']:.1f} s | "
                      f"{args.events / result['thread_cpu_s']:,.0f} | {result['cpu_s']:.1f} s | "
                      f"{result['wall_s']:.1f} s | {load_average()} | {result['interpreter']} | "
                      f"{result['allocator']} | {result['core']} | {result['balanced']} |", flush=True)
    print()
    for tree, seconds in per_tree.items():
        mean = sum(seconds) / len(seconds)
        print(f"- {tree}: mean loading-thread CPU {mean:.1f} s ({args.events / mean:,.0f} events/s) "
              f"over {len(seconds)} loads")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
