"""``./dev bench``: run the benchmarks and print their report as Markdown.

    python -m tests.benchmarks.run [--events N] [--entities N] [--queries N] [--seed S] [--quick]

Runs ``tests/benchmarks/bench_ledger.py``: load throughput of ``--events`` generated events (default
1,000,000 over 100,000 entities) through ``edgeledger load``, then ``--queries`` (default 10,000)
``owners-of`` and 3-hop ``dependents-of`` at random (valid_at, known_at). ``--quick`` uses small sizes
(20,000 events, 5,000 entities, 1,000 queries) for a smoke run. The traversal and pipeline benchmarks
have their own entry points: ``python -m tests.benchmarks.bench_traversals`` and
``python -m tests.benchmarks.bench_pipeline``.
"""

from __future__ import annotations

import sys

from tests.benchmarks import bench_ledger


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = bench_ledger.parse_args(argv, prog="python -m tests.benchmarks.run")
    report = bench_ledger.run(args)
    print(bench_ledger.markdown(report, " ".join(["python -m tests.benchmarks.run", *argv])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
