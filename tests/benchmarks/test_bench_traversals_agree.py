"""The traversal benchmark's three engines (networkx, DuckDB, edgeledger) agree on a tiny generated graph.

The same generator, ledger load and export as ``bench_traversals``, at a few hundred entities: every
sampled owners-of, 3-hop dependents-of and approvals-required-for, current and as of past instants
(a quarter of them on interval boundaries), gives the same distinct answer three ways; the default
200-expansion cap only ever drops answers, and only when it says so.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("networkx")
pytest.importorskip("duckdb")

from state.open import open_reader
from tests.benchmarks.bench_traversals import (
    CLOCKS,
    DEFAULT_CAP,
    NO_CAP,
    QUERY_TYPES,
    DuckdbTraversals,
    Engines,
    LedgerTraversals,
    LedgerTraverseOnly,
    NetworkxTraversals,
    RocksScanTraversals,
    Sampler,
    explain,
)
from tests.support.graph_fixture import GraphSpec, build_graph, to_duckdb, to_networkx

QUERIES_PER_CASE = 120


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    built = build_graph(GraphSpec(entities=400, seed=11), workdir=tmp_path_factory.mktemp("bench-graph"))
    reader = None
    try:
        built.close_store()
        assert built.load_summary["balanced"] and built.load_summary["dead_lettered"] == 0
        reader = open_reader(built.state_dir)
        rocks, note = RocksScanTraversals.create(reader, built.rows)
        assert rocks is not None, note
        engines = Engines(NetworkxTraversals(to_networkx(built.rows)),
                          DuckdbTraversals(to_duckdb(built.rows, built.workdir)),
                          LedgerTraversals(reader, NO_CAP), LedgerTraversals(reader, DEFAULT_CAP),
                          LedgerTraverseOnly(reader, DEFAULT_CAP), rocks)
        now = max(time.time_ns() // 1000, reader.last_tx() + 1)
        yield {"engines": engines, "sampler": Sampler(built.rows, now, seed=5, hub_share=0.3),
               "rows": {row[0]: row for row in built.rows}, "reader": reader}
    finally:
        if reader is not None:
            reader.close()
        built.close()


def test_the_graph_has_history_hubs_and_approvals(bench: dict[str, Any]) -> None:
    rows = bench["rows"].values()
    rels = {row[2] for row in rows}
    assert {"depends_on", "owned_by", "governed_by", "requires", "member_of"} <= rels
    assert sum(1 for row in rows if row[7] is not None) > 0.1 * len(rows), "closed versions: history"
    assert any(row[4] is None for row in rows), "some valid_from unknown"
    degrees = sorted(bench["sampler"].in_degree.values())
    assert degrees[-1] >= 5 * degrees[len(degrees) // 2], "power-law in-degree: hubs"


@pytest.mark.parametrize("clock", CLOCKS)
@pytest.mark.parametrize(("name", "depth"), QUERY_TYPES)
def test_networkx_duckdb_and_edgeledger_agree(bench: dict[str, Any], name: str, depth: int, clock: str) -> None:
    engines: Engines = bench["engines"]
    queries = bench["sampler"].queries(name, depth, clock, QUERIES_PER_CASE)
    answered = 0
    for query in queries:
        by_networkx = engines.nx.run(query)
        by_duckdb = engines.duck.run(query)
        ledger = engines.full.run(query)
        assert not ledger.truncated, query.describe()
        assert by_networkx == by_duckdb == ledger.entities, explain(
            query, by_networkx, by_duckdb, ledger, engines, bench["rows"], bench["reader"])
        capped = engines.capped.run(query)
        assert capped.entities <= ledger.entities, query.describe()
        if not capped.truncated:
            assert capped.entities == ledger.entities, query.describe()
        assert engines.walk_only.run(query) == capped.entities, query.describe()
        assert engines.rocks is not None and engines.rocks.run(query) == by_networkx, query.describe()
        answered += bool(ledger.entities)
    assert answered >= QUERIES_PER_CASE // 10, "most queries empty: the comparison would prove little"
