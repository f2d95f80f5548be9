"""Traversal latency, edgeledger side by side with networkx and DuckDB, checking they agree.

    python -m tests.benchmarks.bench_traversals [--quick] [--entities N] [--queries N] [--repeat R]

On a generated graph (``tests/support/graph_fixture.py``: default 200,000 entities, about 1,000,000
edge versions, hubs, history, late corrections) loaded through the real ledger into RocksDB, this runs
``owners-of``, 3-hop ``dependents-of`` and ``approvals-required-for`` (depth 1), each for ``--queries``
sampled (anchor, valid_at, known_at), *current* (both clocks now) and *past* (points inside the
history, a quarter of them exactly on the interval bounds of a version the query reads first), through

- ``networkx``: a Python breadth-first search over a ``MultiDiGraph`` of every edge version, the
  predicate checked per edge;
- ``DuckDB``: a recursive CTE over the bi-temporal table ``edges``, the predicates in the recursive step;
- ``edgeledger``: ``QueryEngine(reader, default_ontology()).run(QueryRequest(...))`` over a RocksDB
  secondary reader (as the read commands open it), with limits so large nothing truncates (*no cap*)
  and with the default limits (*200 cap*: 200 expansions, 25 paths, degree 50); ``traverse()`` alone
  under the default limits (the walk without result assembly); and, when ``processors.cache`` provides
  ``CachedQueryEngine``, cache hits (each request run once to fill, then timed: first hit, repeat hit);

and, for scale, two floors: a Python dict of precomputed answers (the timer and the machine's noise) and
the same node-level search straight over the ledger's RocksDB adjacency prefix scans (``rocksdict scan``).
A *cold start* table times queries on a freshly opened reader each.

An edge is usable at (valid_at, known_at) iff ``tx_from <= known_at < coalesce(tx_to, +inf)`` and
``coalesce(valid_from, -inf) <= valid_at < coalesce(valid_to, +inf)``. edgeledger walks *paths* that
never revisit a node; the reference engines walk *nodes*. Their distinct answers are the same: a node
other than the anchor that some walk of at most k usable hops reaches is reached by a simple path of
at most k hops (the shortest such walk), and the later steps of ``approvals-required-for`` (owned_by,
governed_by, requires) end in disjoint entity types (ontology ranges), so they cannot revisit a node.

Every no-cap answer of networkx, DuckDB, edgeledger (and the rocksdict scan) is compared; a 200-cap
answer must be a subset of the full answer, and equal to it when not truncated; a cached answer must
equal the uncached one, also when asked at another valid_at that the entry's window covers. The report
(Markdown, stdout) gives p50/p99/max per query x clock x implementation, the edgeledger/DuckDB and
past/current ratios, the issue's targets, the agreement counts with up to five failed checks explained
(a witness path with its edge versions and what the store says about each), the versions edgeledger
decodes per query, and a cProfile of the 3-hop query. The exit status is 1 when any check failed.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import pstats
import random
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from processors.matching import Candidate
from processors.queries import QueryEngine, QueryRequest, plan_for
from processors.traversal import Limits, traverse
from schemas.ontology import default_ontology
from schemas.times import format_micros
from state import codec
from state.keys import pack
from state.open import open_reader
from state.store import LedgerStore
from tests.benchmarks.stats import percentile
from tests.support.graph_fixture import TENANT, BuiltGraph, GraphSpec, Row, build_graph, to_duckdb, to_networkx

QUICK_ENTITIES = 10_000
QUERY_TYPES: tuple[tuple[str, int], ...] = (("owners-of", 1), ("dependents-of", 3), ("approvals-required-for", 1))
CLOCKS = ("current", "past")
NO_CAP = Limits(max_depth=64, max_expansions=10**12, max_paths=10**12, max_evidence_tokens=10**15,
                max_degree=10**12)
DEFAULT_CAP = Limits()
ONTOLOGY = default_ontology()


@dataclass(frozen=True)
class Query:
    name: str
    depth: int
    clock: str
    anchor: str
    valid_at: int
    known_at: int
    hub: bool

    def describe(self) -> str:
        return (f"{self.name} {self.anchor!r} depth={self.depth} valid_at={format_micros(self.valid_at)} "
                f"known_at={format_micros(self.known_at)} ({self.clock}{', hub' if self.hub else ''})")


# -- the reference engines ------------------------------------------------------------------------------------
class NetworkxTraversals:
    """Node-level breadth-first search over the version MultiDiGraph, the predicate per edge."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph

    def step(self, nodes: set[str], rel: str, direction: str, valid_at: int, known_at: int) -> set[str]:
        adjacency = self.graph.succ if direction == "out" else self.graph.pred
        found: set[str] = set()
        for node in nodes:
            if node not in adjacency:
                continue
            for other, versions in adjacency[node].items():
                if other in found:
                    continue
                for d in versions.values():
                    if (d["rel"] == rel and d["tx_from"] <= known_at
                            and (d["tx_to"] is None or known_at < d["tx_to"])
                            and (d["valid_from"] is None or d["valid_from"] <= valid_at)
                            and (d["valid_to"] is None or valid_at < d["valid_to"])):
                        found.add(other)
                        break
        return found

    def dependents(self, anchor: str, depth: int, valid_at: int, known_at: int) -> set[str]:
        seen, frontier, found = {anchor}, {anchor}, set()
        for _ in range(depth):
            frontier = self.step(frontier, "depends_on", "in", valid_at, known_at) - seen
            if not frontier:
                break
            seen |= frontier
            found |= frontier
        return found

    def run(self, query: Query) -> set[str]:
        v, k = query.valid_at, query.known_at
        if query.name == "owners-of":
            return self.step({query.anchor}, "owned_by", "out", v, k)
        dependents = self.dependents(query.anchor, query.depth, v, k)
        if query.name == "dependents-of":
            return dependents
        owners = self.step(dependents, "owned_by", "out", v, k)
        policies = self.step(owners, "governed_by", "out", v, k)
        return self.step(policies, "requires", "out", v, k)

    def witness(self, query: Query, target: str) -> list[tuple] | None:
        """A shortest usable path from the anchor to ``target`` under the query's plan, as edge attributes."""
        v, k = query.valid_at, query.known_at

        def usable(d: dict, rel: str) -> bool:
            return (d["rel"] == rel and d["tx_from"] <= k and (d["tx_to"] is None or k < d["tx_to"])
                    and (d["valid_from"] is None or d["valid_from"] <= v)
                    and (d["valid_to"] is None or v < d["valid_to"]))

        stages = {"owners-of": [("owned_by", "out", 1)], "dependents-of": [("depends_on", "in", query.depth)],
                  "approvals-required-for": [("depends_on", "in", query.depth), ("owned_by", "out", 1),
                                             ("governed_by", "out", 1), ("requires", "out", 1)]}[query.name]
        # Search states (node, stage, hops) breadth-first with parent pointers.
        start = (query.anchor, 0, 0)
        parents: dict[tuple, tuple | None] = {start: None}
        frontier = [start]
        while frontier:
            following = []
            for state in frontier:
                node, stage, hops = state
                moves = []
                rel, direction, max_hops = stages[stage]
                if hops < max_hops:
                    moves.append((rel, direction, stage, hops + 1))
                if hops >= 1 and stage + 1 < len(stages):
                    moves.append((*stages[stage + 1][:2], stage + 1, 1))
                for rel, direction, next_stage, next_hops in moves:
                    adjacency = self.graph.succ if direction == "out" else self.graph.pred
                    if node not in adjacency:
                        continue
                    for other, versions in adjacency[node].items():
                        for edge_id, d in versions.items():
                            if not usable(d, rel):
                                continue
                            nxt = (other, next_stage, next_hops)
                            if nxt in parents or other == query.anchor:
                                continue
                            parents[nxt] = (state, edge_id, d, direction)
                            if other == target and next_stage == len(stages) - 1:
                                path = []
                                cursor: tuple | None = nxt
                                while parents[cursor] is not None:
                                    prev, eid, attrs, way = parents[cursor]
                                    src, dst = (prev[0], cursor[0]) if way == "out" else (cursor[0], prev[0])
                                    path.append((eid, attrs["rel"], src, dst, attrs["valid_from"], attrs["valid_to"],
                                                 attrs["tx_from"], attrs["tx_to"]))
                                    cursor = prev
                                return path[::-1]
                            following.append(nxt)
            frontier = following
        return None


_USABLE = ("e.tx_from <= $known AND (e.tx_to IS NULL OR $known < e.tx_to) "
           "AND (e.valid_from IS NULL OR e.valid_from <= $valid) AND (e.valid_to IS NULL OR $valid < e.valid_to)")
_WALK = f"""walk(node, depth) AS (
    SELECT CAST($anchor AS VARCHAR), 0
    UNION
    SELECT e.src, w.depth + 1 FROM walk w JOIN edges e ON e.dst = w.node
    WHERE w.depth < $depth AND e.rel = 'depends_on' AND {_USABLE}
)"""
DUCKDB_SQL = {
    "owners-of": f"SELECT DISTINCT e.dst FROM edges e WHERE e.src = $anchor AND e.rel = 'owned_by' AND {_USABLE}",
    "dependents-of": f"WITH RECURSIVE {_WALK} SELECT DISTINCT node FROM walk WHERE depth > 0 AND node <> $anchor",
    "approvals-required-for": f"""WITH RECURSIVE {_WALK},
    deps AS (SELECT DISTINCT node FROM walk WHERE depth > 0 AND node <> $anchor),
    owners AS (SELECT DISTINCT e.dst AS node FROM deps JOIN edges e ON e.src = deps.node
               WHERE e.rel = 'owned_by' AND {_USABLE}),
    policies AS (SELECT DISTINCT e.dst AS node FROM owners JOIN edges e ON e.src = owners.node
                 WHERE e.rel = 'governed_by' AND {_USABLE})
    SELECT DISTINCT e.dst FROM policies JOIN edges e ON e.src = policies.node
    WHERE e.rel = 'requires' AND {_USABLE}""",
}


class DuckdbTraversals:
    def __init__(self, con: Any) -> None:
        self.con = con

    def run(self, query: Query) -> set[str]:
        params: dict[str, Any] = {"anchor": query.anchor, "valid": query.valid_at, "known": query.known_at}
        if query.name != "owners-of":
            params["depth"] = query.depth
        return {row[0] for row in self.con.execute(DUCKDB_SQL[query.name], params).fetchall()}


class RocksScanTraversals:
    """The floor under edgeledger's storage: the same node-level search as networkx, straight over the
    ledger's ``A`` (adjacency) prefix scans and the ``V`` row each key indexes, reading only the clock
    fields of each stored value.

    It relies on today's layout (``A`` + pack(tenant, node, rel, o|i) + encode_int(tx_from) +
    encode_str(edge_id) keys with empty values, ``V`` + pack(tenant, edge_id) rows, ``state.codec``'s
    JSON array with edge_id, tenant, src, rel, dst, valid_from, valid_to, tx_from, tx_to first);
    ``create`` checks that against the codec and the store and returns ``None`` when it no longer holds."""

    def __init__(self, reader: LedgerStore) -> None:
        self.kv = reader.kv

    @classmethod
    def create(cls, reader: LedgerStore, rows: list[Row]) -> tuple[RocksScanTraversals | None, str]:
        engine = cls(reader)
        for row in rows[:: max(1, len(rows) // 50)][:50]:
            _, src, rel, _ = row[:4]
            stored = reader.adjacent(TENANT, src, rel, "out")
            raw = list(engine.versions(b"A" + pack(TENANT, src, rel, "o")))
            if len(raw) != len(stored):
                return None, "the adjacency key layout changed"
            for value, version in zip(raw, stored, strict=True):
                fields = orjson.loads(value)
                expected = codec.decode_version(value)
                if fields[:9] != [version.edge_id, version.tenant, version.src, version.rel, version.dst,
                                  version.valid_from, version.valid_to, version.tx_from, version.tx_to] \
                        or expected != version:
                    return None, "the stored value layout changed"
        return engine, "ok"

    def versions(self, prefix: bytes) -> Iterator[bytes]:
        """The stored versions an adjacency prefix indexes: each key ends with a 9-byte tx_from and the
        encoded edge id, which after ``V`` and the tenant is the version's key."""
        edge_at, table, get = len(prefix) + 9, b"V" + pack(TENANT), self.kv.get
        for key, _ in self.kv.scan(prefix):
            value = get(table + key[edge_at:])
            if value is None:
                raise LookupError(f"{key!r} indexes no version")
            yield value

    def step(self, nodes: set[str], rel: str, direction: str, valid_at: int, known_at: int) -> set[str]:
        tag, end = ("o", 4) if direction == "out" else ("i", 2)
        found: set[str] = set()
        loads = orjson.loads
        for node in nodes:
            for value in self.versions(b"A" + pack(TENANT, node, rel, tag)):
                f = loads(value)
                if (f[7] <= known_at and (f[8] is None or known_at < f[8])
                        and (f[5] is None or f[5] <= valid_at) and (f[6] is None or valid_at < f[6])):
                    found.add(f[end])
        return found

    def run(self, query: Query) -> set[str]:
        v, k = query.valid_at, query.known_at
        if query.name == "owners-of":
            return self.step({query.anchor}, "owned_by", "out", v, k)
        seen, frontier, dependents = {query.anchor}, {query.anchor}, set()
        for _ in range(query.depth):
            frontier = self.step(frontier, "depends_on", "in", v, k) - seen
            seen |= frontier
            dependents |= frontier
        if query.name == "dependents-of":
            return dependents
        owners = self.step(dependents, "owned_by", "out", v, k)
        return self.step(self.step(owners, "governed_by", "out", v, k), "requires", "out", v, k)


def request_for(query: Query, limits: Limits) -> QueryRequest:
    return QueryRequest(query.name, TENANT, query.anchor, query.valid_at, query.known_at, limits, depth=query.depth)


@dataclass
class LedgerAnswer:
    entities: set[str]
    truncated: bool
    resolution: str
    edges_read: int


class LedgerTraversals:
    def __init__(self, reader: LedgerStore, limits: Limits) -> None:
        self.engine = QueryEngine(reader, ONTOLOGY)
        self.limits = limits

    def run(self, query: Query) -> LedgerAnswer:
        result = self.engine.run(request_for(query, self.limits))
        return LedgerAnswer({r.entity for r in result.results}, result.truncated, result.anchor.resolution,
                            result.counts.edges_read)


class LedgerTraverseOnly:
    """``traverse()`` alone: the walk without anchor resolution and result assembly."""

    def __init__(self, reader: LedgerStore, limits: Limits) -> None:
        self.reader = reader
        self.limits = limits

    def run(self, query: Query) -> set[str]:
        plan = plan_for(request_for(query, self.limits), ONTOLOGY)
        walk = traverse(self.reader, TENANT, query.anchor, plan, self.limits, query.valid_at, query.known_at)
        return {path.nodes[-1] for path in walk.paths}


class LedgerCached:
    """``processors.cache.CachedQueryEngine`` over an in-memory cache store; ``None`` when unavailable."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.statuses: Counter[str] = Counter()
        self.last_status = ""

    @classmethod
    def create(cls, reader: LedgerStore, entries: int) -> tuple[LedgerCached | None, str]:
        try:
            from processors.cache import CachedQueryEngine
            from state.cache_store import CacheStore
            from state.changes import versions_changed_since
            from state.kv import MemoryKV
        except ImportError as error:
            return None, f"not available: {error}"
        try:
            backend = CacheStore(MemoryKV(), max_entries=entries, memory_entries=entries)
            engine = CachedQueryEngine(reader, ONTOLOGY, backend, reader.last_tx,
                                       lambda tenant, after: versions_changed_since(reader, tenant, after))
        except Exception as error:  # the module is being written concurrently: report, do not fail
            return None, f"not available: {type(error).__name__}: {error}"
        return cls(engine), "processors.cache.CachedQueryEngine over state.cache_store.CacheStore(MemoryKV())"

    def run(self, query: Query, limits: Limits) -> LedgerAnswer:
        result, status = self.engine.run_with_status(request_for(query, limits))
        self.statuses[status] += 1
        self.last_status = status
        return LedgerAnswer({r.entity for r in result.results}, result.truncated, result.anchor.resolution,
                            result.counts.edges_read)


# -- sampling -------------------------------------------------------------------------------------------------
@dataclass
class Sampler:
    rows: list[Row]
    now: int
    seed: int
    hub_share: float = 0.1
    boundary_share: float = 0.25
    hubs: list[str] = field(init=False)
    ordinary: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        in_degree: Counter[str] = Counter()
        nodes: set[str] = set()
        self.at_node: dict[str, list[int]] = defaultdict(list)
        tx_points: list[int] = []
        valid_points: list[int] = []
        for index, (_, src, rel, dst, vf, vt, tf, tt) in enumerate(self.rows):
            self.at_node[src].append(index)
            self.at_node[dst].append(index)
            if rel == "depends_on":
                nodes.add(src)
                nodes.add(dst)
                if tt is None:
                    in_degree[dst] += 1
            elif rel == "owned_by":
                nodes.add(src)
            tx_points.append(tf)
            valid_points += [p for p in (vf, vt) if p is not None]
        ranked = [node for node, _ in in_degree.most_common()]
        self.hubs = ranked[: max(1, len(ranked) // 100)]
        self.in_degree = in_degree
        self.ordinary = sorted(nodes)
        self.tx_low, self.tx_high = min(tx_points), max(tx_points)
        self.valid_low = min(valid_points)

    def anchor(self) -> tuple[str, bool]:
        if self.rng.random() < self.hub_share:
            return self.rng.choice(self.hubs), True
        return self.rng.choice(self.ordinary), False

    def on_boundary(self, name: str, anchor: str, known_at: int, valid_at: int) -> tuple[int, int]:
        """Clocks exactly on the edges of one version the query reads first (owned_by out of the anchor,
        or depends_on into it): known_at at its tx_from or tx_to, valid_at at its valid_from, its
        valid_to, or inside its valid interval."""
        near = [self.rows[i] for i in self.at_node.get(anchor, ())]
        if name == "owners-of":
            first = [row for row in near if row[2] == "owned_by" and row[1] == anchor]
        else:
            first = [row for row in near if row[2] == "depends_on" and row[3] == anchor]
        candidates = first or near
        if not candidates:
            return known_at, valid_at
        rng = self.rng
        _, _, _, _, vf, vt, tf, tt = rng.choice(candidates)
        known_at = tt if tt is not None and rng.random() < 0.6 else tf
        low = vf if vf is not None else self.valid_low
        high = vt if vt is not None else max(low + 1, known_at)
        valid_at = rng.choice([p for p in (vf, vt) if p is not None] + [rng.randint(low, max(low, high - 1))])
        return known_at, valid_at

    def queries(self, name: str, depth: int, clock: str, count: int) -> list[Query]:
        rng = self.rng
        out = []
        for _ in range(count):
            anchor, hub = self.anchor()
            if clock == "current":
                valid_at = known_at = self.now
            else:
                known_at = rng.randint(self.tx_low, self.tx_high)
                roll = rng.random()
                valid_at = known_at if roll < 0.4 else rng.randint(self.valid_low, known_at)
                if rng.random() < self.boundary_share:
                    known_at, valid_at = self.on_boundary(name, anchor, known_at, valid_at)
            out.append(Query(name, depth, clock, anchor, valid_at, known_at, hub))
        return out


# -- measuring ------------------------------------------------------------------------------------------------
DICT = "Python dict (precomputed answers)"
NX = "networkx"
DUCK = "DuckDB"
ROCKS = "rocksdict scan BFS (no cap)"
FULL = "edgeledger no cap"
CAPPED = "edgeledger 200 cap"
WALK = "edgeledger traverse() 200 cap"
CACHED_FIRST = "edgeledger cached, first hit, 200 cap"
CACHED = "edgeledger cached, repeat hit, 200 cap"
IMPLEMENTATIONS = (DICT, NX, DUCK, ROCKS, FULL, CAPPED, WALK, CACHED_FIRST, CACHED)


@dataclass
class Series:
    micros: list[float] = field(default_factory=list)
    answers: list[Any] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)

    def stats(self) -> tuple[float, float, float]:
        """p50, p99, max in milliseconds."""
        ordered = sorted(self.micros)
        return percentile(ordered, 0.50) / 1000, percentile(ordered, 0.99) / 1000, ordered[-1] / 1000


def timed(run: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter_ns()
    answer = run()
    return answer, (time.perf_counter_ns() - started) / 1000


@dataclass
class Engines:
    nx: NetworkxTraversals
    duck: DuckdbTraversals
    full: LedgerTraversals
    capped: LedgerTraversals
    walk_only: LedgerTraverseOnly
    rocks: RocksScanTraversals | None = None
    rocks_note: str = "not used"
    cached: LedgerCached | None = None
    cached_note: str = "not used"


def measure(engines: Engines, queries: list[Query], chunk: int = 50, repeat: int = 1) -> dict[str, Series]:
    """Every implementation over the same queries, round-robin in chunks (the order rotating) so that
    the machine's noise spreads evenly. The dict looks up networkx's answers. The cache is filled with a
    chunk (misses), then each request is timed again (its first hit) and again (a repeat hit). With
    ``repeat`` > 1 each query (but the first hit) is timed that many times in a row and the fastest counts:
    the per-query cost without most of a shared machine's noise."""

    def timed_best(run: Callable[[], Any]) -> tuple[Any, float]:
        answer, best = timed(run)
        for _ in range(repeat - 1):
            best = min(best, timed(run)[1])
        return answer, best

    series = {name: Series() for name in IMPLEMENTATIONS}
    runners: list[tuple[str, Callable[[Query], Any]]] = [
        (NX, engines.nx.run), (DUCK, engines.duck.run), (FULL, engines.full.run), (CAPPED, engines.capped.run),
        (WALK, engines.walk_only.run)]
    if engines.rocks is not None:
        runners.append((ROCKS, engines.rocks.run))
    for start in range(0, len(queries), chunk):
        part = queries[start:start + chunk]
        turn = start // chunk % len(runners)
        for name, run in runners[turn:] + runners[:turn]:
            for query in part:
                answer, micros = timed_best(lambda run=run, query=query: run(query))
                series[name].micros.append(micros)
                series[name].answers.append(answer)
        table = dict(zip(part, series[NX].answers[start:start + len(part)], strict=True))
        for query in part:
            answer, micros = timed_best(lambda query=query, table=table: table[query])
            series[DICT].micros.append(micros)
            series[DICT].answers.append(answer)
        cached = engines.cached
        if cached is not None:
            for query in part:
                cached.run(query, DEFAULT_CAP)
            for name, timer in ((CACHED_FIRST, timed), (CACHED, timed_best)):
                for query in part:
                    answer, micros = timer(lambda query=query, cached=cached: cached.run(query, DEFAULT_CAP))
                    series[name].micros.append(micros)
                    series[name].answers.append(answer)
                    series[name].statuses[cached.last_status] += 1
    return series


@dataclass
class Cold:
    open_ms: list[float] = field(default_factory=list)
    first_ms: list[float] = field(default_factory=list)
    differs: int = 0


def cold_start(state_dir: Path, queries: list[Query], warm: list[LedgerAnswer]) -> Cold:
    """Each query on a freshly opened secondary reader (as every read command opens one): empty RocksDB
    block cache and entity cache, the OS page cache as the run left it. The answer must equal the warm one."""
    cold = Cold()
    for query, expected in zip(queries, warm, strict=True):
        started = time.perf_counter_ns()
        reader = open_reader(state_dir)
        try:
            opened = time.perf_counter_ns()
            result = QueryEngine(reader, ONTOLOGY).run(request_for(query, DEFAULT_CAP))
            done = time.perf_counter_ns()
        finally:
            reader.close()
        cold.open_ms.append((opened - started) / 1e6)
        cold.first_ms.append((done - opened) / 1e6)
        cold.differs += {r.entity for r in result.results} != expected.entities
    return cold


def cache_window_check(engines: Engines, queries: list[Query], sampler: Sampler,
                       seed: int) -> tuple[int, int, list[str]]:
    """A cache entry serves every valid_at in the window its versions' bounds leave open: ask the filled
    cache again at another valid_at (same known_at) and compare with the uncached answer there.
    Returns (hits, differences, examples)."""
    cached = engines.cached
    if cached is None:
        return 0, 0, []
    rng = random.Random(seed)
    hits = differs = 0
    examples: list[str] = []
    for query in queries:
        other = Query(query.name, query.depth, query.clock, query.anchor,
                      rng.randint(sampler.valid_low, sampler.now), query.known_at, query.hub)
        got = cached.run(other, DEFAULT_CAP)
        hits += cached.last_status == "hit"
        expected = engines.capped.run(other)
        if got.entities != expected.entities or got.truncated != expected.truncated:
            differs += 1
            examples.append(f"- cached answer ({cached.last_status}) at another valid_at differs from uncached: "
                            f"{other.describe()}: {sorted(got.entities)[:5]} vs {sorted(expected.entities)[:5]}")
    return hits, differs, examples


# -- agreement --------------------------------------------------------------------------------------------------
@dataclass
class Agreement:
    queries: int = 0
    nx_duck: int = 0
    nx_ledger: int = 0
    duck_ledger: int = 0
    all_three: int = 0
    rocks_nx: int | None = None
    empty: int = 0
    answer_sizes: list[int] = field(default_factory=list)
    full_truncated: int = 0
    unresolved_with_answers: int = 0
    capped_truncated: int = 0
    capped_truncated_empty: int = 0
    capped_not_subset: int = 0
    capped_untruncated_differs: int = 0
    cached_differs: int = 0
    cached_checked: int = 0
    window_hits: int = 0
    window_differs: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def failures(self) -> int:
        rocks = 0 if self.rocks_nx is None else self.queries - self.rocks_nx
        return (self.queries - self.all_three + rocks + self.full_truncated + self.capped_not_subset
                + self.capped_untruncated_differs + self.cached_differs + self.window_differs)


def compare(queries: list[Query], series: dict[str, Series], engines: Engines, rows_by_id: dict[str, Row],
            reader: LedgerStore, max_examples: int) -> Agreement:
    agreement = Agreement(queries=len(queries))
    nx_answers, duck_answers = series[NX].answers, series[DUCK].answers
    full, capped = series[FULL].answers, series[CAPPED].answers
    cached_first, cached, rocks = series[CACHED_FIRST].answers, series[CACHED].answers, series[ROCKS].answers
    if rocks:
        agreement.rocks_nx = 0

    def example(text: str) -> None:
        if len(agreement.examples) < max_examples:
            agreement.examples.append(text)

    for index, query in enumerate(queries):
        a, b, c = nx_answers[index], duck_answers[index], full[index]
        agreement.answer_sizes.append(len(a))
        agreement.empty += not a
        agreement.nx_duck += a == b
        agreement.nx_ledger += a == c.entities
        agreement.duck_ledger += b == c.entities
        agreement.full_truncated += c.truncated
        if c.resolution != "identifier" and (a or b):
            agreement.unresolved_with_answers += 1
        same = a == b == c.entities
        agreement.all_three += same
        if not same and len(agreement.examples) < max_examples:
            agreement.examples.append(explain(query, a, b, c, engines, rows_by_id, reader))
        if rocks:
            agreement.rocks_nx += rocks[index] == a
            if rocks[index] != a:
                example(f"- rocksdict scan differs from networkx: {query.describe()}: "
                        f"{sorted(rocks[index] ^ a)[:5]}")
        cap = capped[index]
        agreement.capped_truncated += cap.truncated
        agreement.capped_truncated_empty += cap.truncated and not cap.entities
        if not cap.entities <= c.entities:
            agreement.capped_not_subset += 1
            example(f"- 200-cap answer not a subset of the full answer: {query.describe()}: "
                    f"extra {sorted(cap.entities - c.entities)[:5]}")
        elif not cap.truncated and cap.entities != c.entities:
            agreement.capped_untruncated_differs += 1
            example(f"- 200-cap answer not truncated yet incomplete: {query.describe()}: "
                    f"missing {sorted(c.entities - cap.entities)[:5]}")
        for hit in (cached_first, cached):
            if index < len(hit):
                agreement.cached_checked += 1
                if hit[index].entities != cap.entities or hit[index].truncated != cap.truncated:
                    agreement.cached_differs += 1
                    example(f"- cached answer differs from uncached (200 cap): {query.describe()}: cached "
                            f"{sorted(hit[index].entities)[:5]} vs {sorted(cap.entities)[:5]}")
    return agreement


def _fmt_row(row: Row) -> str:
    edge_id, src, rel, dst, vf, vt, tf, tt = row
    return (f"{edge_id} {src} -{rel}-> {dst} valid [{format_micros(vf) or '-inf'}, {format_micros(vt) or '+inf'}) "
            f"tx [{format_micros(tf)}, {format_micros(tt) or '+inf'})")


def explain(query: Query, nx_answer: set[str], duck_answer: set[str], ledger: LedgerAnswer, engines: Engines,
            rows_by_id: dict[str, Row], reader: LedgerStore) -> str:
    """A disagreement with the evidence to decide who is right: a witness path per differing entity (found
    with the predicate, independently of all three engines) and whether edgeledger's store holds each of
    its edge versions, lists it in both adjacencies and finds it visible."""
    lines = [f"- {query.describe()}: networkx {len(nx_answer)}, DuckDB {len(duck_answer)}, "
             f"edgeledger {len(ledger.entities)} (truncated={ledger.truncated}, anchor {ledger.resolution})"]
    for entity in sorted(nx_answer ^ duck_answer | nx_answer ^ ledger.entities)[:10]:
        found_by = [name for name, answer in (("networkx", nx_answer), ("DuckDB", duck_answer),
                                               ("edgeledger", ledger.entities)) if entity in answer]
        lines.append(f"  - {entity}: only in {', '.join(found_by)}")
        path = engines.nx.witness(query, entity)
        if path is None:
            lines.append("    no usable path in the exported versions: the engines that found it are wrong")
            continue
        lines.append("    a usable path exists: the engines that missed it are wrong")
        for edge_id, rel, src, dst, *_ in path:
            stored = reader.version(TENANT, edge_id)
            listed_out = any(v.edge_id == edge_id for v in reader.adjacent(TENANT, src, rel, "out"))
            listed_in = any(v.edge_id == edge_id for v in reader.adjacent(TENANT, dst, rel, "in"))
            visible = stored.visible(query.valid_at, query.known_at) if stored else None
            lines.append(f"    {_fmt_row(rows_by_id[edge_id])}; store: visible={visible}, "
                         f"in out-adjacency={listed_out}, in in-adjacency={listed_in}")
    return "\n".join(lines)


# -- where the time goes ------------------------------------------------------------------------------------------
class CountingReader:
    """Counts the versions ``adjacent`` returns (decodes) for the engine; passes everything through."""

    def __init__(self, inner: LedgerStore) -> None:
        self.inner = inner
        self.decoded = 0

    def adjacent(self, tenant: str, node: str, rel: str, direction: Any) -> list:
        versions = self.inner.adjacent(tenant, node, rel, direction)
        self.decoded += len(versions)
        return versions

    def iter_adjacent(self, tenant: str, node: str, rel: str, direction: Any,
                      known_at: int | None = None) -> Iterator[Any]:
        for version in self.inner.iter_adjacent(tenant, node, rel, direction, known_at):
            self.decoded += 1
            yield version

    def entity(self, tenant: str, entity_id: str) -> Any:
        return self.inner.entity(tenant, entity_id)

    def alias_targets(self, tenant: str, normalised: str, known_at: int | None = None) -> list[str]:
        return self.inner.alias_targets(tenant, normalised, known_at)

    def merges(self, tenant: str) -> Any:
        return self.inner.merges(tenant)

    def identity(self, tenant: str, known_at: int | None) -> Any:
        return self.inner.identity(tenant, known_at)

    def neighbours(self, tenant: str, entity_type: str | None, normalised: str,
                   known_at: int | None = None) -> list[Candidate]:
        return self.inner.neighbours(tenant, entity_type, normalised, known_at)


def anatomy(reader: LedgerStore, sampler: Sampler, results: dict) -> list[str]:
    """Versions decoded vs edge records counted for the 200-cap query; the cost of one hub adjacency."""
    counting = CountingReader(reader)
    engine = QueryEngine(counting, ONTOLOGY)
    out = ["| query | clock | versions decoded / query | edge records counted / query | slowest 2 %: decoded | "
           "counted | hub anchors | truncated | empty |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (name, clock), (queries, series, _) in results.items():
        per_query = []
        for query in queries:
            counting.decoded = 0
            result = engine.run(request_for(query, DEFAULT_CAP))
            per_query.append((counting.decoded, result.counts.edges_read, query.hub, result.truncated,
                              not result.results))
        slow = sorted(range(len(queries)), key=lambda i: series[CAPPED].micros[i])[-max(1, len(queries) // 50):]
        tail = [per_query[i] for i in slow]
        out.append(f"| {name} | {clock} | {statistics.mean(p[0] for p in per_query):.1f} | "
                   f"{statistics.mean(p[1] for p in per_query):.1f} | {statistics.mean(p[0] for p in tail):.0f} | "
                   f"{statistics.mean(p[1] for p in tail):.0f} | {sum(p[2] for p in tail)}/{len(tail)} | "
                   f"{sum(p[3] for p in tail)}/{len(tail)} | {sum(p[4] for p in tail)}/{len(tail)} |")
    hub = sampler.in_degree.most_common(1)[0][0]
    prefix = b"A" + pack(TENANT, hub, "depends_on", "i")
    decode_ms = min(timed(lambda: reader.adjacent(TENANT, hub, "depends_on", "in"))[1] for _ in range(5)) / 1000
    scan_ms = min(timed(lambda: sum(1 for _ in reader.kv.scan(prefix)))[1] for _ in range(5)) / 1000
    count = len(reader.adjacent(TENANT, hub, "depends_on", "in"))
    out.append(f"\nThe biggest hub, {hub}: `store.adjacent(depends_on, in)` returns {count:,} versions in "
               f"{decode_ms:.2f} ms (best of 5; {1000 * decode_ms / count:.2f} µs a version); the raw prefix "
               f"scan alone takes {scan_ms:.2f} ms. `_expand` materialises and decodes the whole list before "
               "the clock filters and the expansion budget look at it.")
    return out


def profile_queries(engine: LedgerTraversals, queries: list[Query], top: int = 16) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for query in queries:
        engine.run(query)
    profiler.disable()
    parts = []
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats(order).print_stats(top)
        text = out.getvalue()
        body = text[text.find("   ncalls"):] if "   ncalls" in text else text
        parts.append(f"sorted by {order}:\n" + body.rstrip())
    return "\n\n".join(parts).replace(str(Path.cwd()) + "/", "")


# -- report ------------------------------------------------------------------------------------------------------
def _revision() -> str:
    try:
        described = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                                   cwd=Path(__file__).resolve().parents[2], timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return described.stdout.strip() or "unknown"


def _ms(value: float) -> str:
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_traversals",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_ENTITIES:,} entities, 200 queries per row")
    parser.add_argument("--entities", type=int, default=None, help="entities in the generated graph (200,000)")
    parser.add_argument("--versions", type=int, default=None, help="target edge versions (5 per entity)")
    parser.add_argument("--queries", type=int, default=None, help="queries per query type and clock (2,000)")
    parser.add_argument("--cold", type=int, default=None, help="cold-start queries per query type and clock (50)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="time each query this many times in a row and keep the fastest (default 1)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--hub-share", type=float, default=0.1, help="share of anchors drawn from the top 1 %% hubs")
    parser.add_argument("--examples", type=int, default=5, help="failed checks to explain (in all)")
    parser.add_argument("--duckdb-threads", type=int, default=None, help="DuckDB threads (default: all cores)")
    parser.add_argument("--no-profile", action="store_true")
    args = parser.parse_args(argv)
    entities = args.entities or (QUICK_ENTITIES if args.quick else 200_000)
    n_queries = args.queries or (200 if args.quick else 2_000)
    n_cold = args.cold if args.cold is not None else (20 if args.quick else 50)
    spec = GraphSpec(entities=entities, versions=args.versions, seed=args.seed)

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    command = "python -m tests.benchmarks.bench_traversals " + " ".join(argv if argv is not None else sys.argv[1:])
    load_before = os.getloadavg()
    built: BuiltGraph | None = None
    reader: LedgerStore | None = None
    try:
        built = build_graph(spec, log=log)
        built.close_store()
        rows = built.rows
        log(f"exported {len(rows):,} edge versions; building networkx and DuckDB ...")
        started = time.perf_counter()
        graph = to_networkx(rows)
        nx_s = time.perf_counter() - started
        started = time.perf_counter()
        con = to_duckdb(rows, built.workdir, args.duckdb_threads)
        duck_s = time.perf_counter() - started
        reader = open_reader(built.state_dir)
        now = max(time.time_ns() // 1000, reader.last_tx() + 1)
        sampler = Sampler(rows, now, args.seed + 1, args.hub_share)
        rocks, rocks_note = RocksScanTraversals.create(reader, rows)
        cached, cached_note = LedgerCached.create(reader, entries=4 * n_queries + 100)
        engines = Engines(NetworkxTraversals(graph), DuckdbTraversals(con), LedgerTraversals(reader, NO_CAP),
                          LedgerTraversals(reader, DEFAULT_CAP), LedgerTraverseOnly(reader, DEFAULT_CAP),
                          rocks, rocks_note, cached, cached_note)
        rows_by_id = {row[0]: row for row in rows}
        gc.collect()
        gc.freeze()  # the graph and the row lists: keep full collections from rescanning them mid-measurement

        results: dict[tuple[str, str], tuple[list[Query], dict[str, Series], Agreement]] = {}
        colds: dict[tuple[str, str], Cold] = {}
        for name, depth in QUERY_TYPES:
            for clock in CLOCKS:
                queries = sampler.queries(name, depth, clock, n_queries)
                for query in queries[:20]:  # untimed: every implementation starts warm
                    engines.nx.run(query), engines.duck.run(query), engines.capped.run(query)
                log(f"measuring {name} {clock} ({len(queries)} queries)")
                series = measure(engines, queries, repeat=args.repeat)
                agreement = compare(queries, series, engines, rows_by_id, reader, args.examples)
                hits, differs, examples = cache_window_check(engines, queries, sampler, args.seed + len(results))
                agreement.window_hits, agreement.window_differs = hits, differs
                agreement.examples += examples[: max(0, args.examples - len(agreement.examples))]
                results[(name, clock)] = (queries, series, agreement)
                if n_cold:
                    warm = series[CAPPED].answers[:n_cold]
                    colds[(name, clock)] = cold_start(built.state_dir, queries[:n_cold], warm)
        log("where the time goes: counting decoded versions, profiling dependents-of")
        time_notes = anatomy(reader, sampler, results)
        profile = ""
        if not args.no_profile:
            chosen = results[("dependents-of", "current")][0] + results[("dependents-of", "past")][0]
            profile = profile_queries(engines.capped, chosen)
        print(report(command, built, spec, sampler, nx_s, duck_s, n_queries, engines, results, colds, time_notes,
                     profile, load_before, args.examples, args.repeat))
        return 1 if sum(a.failures for _, _, a in results.values()) else 0
    finally:
        gc.unfreeze()
        if reader is not None:
            reader.close()
        if built is not None:
            built.close()


def report(command: str, built: BuiltGraph, spec: GraphSpec, sampler: Sampler, nx_s: float, duck_s: float,
           n_queries: int, engines: Engines, results: dict, colds: dict, time_notes: list[str], profile: str,
           load_before: tuple[float, float, float], max_examples: int = 5, repeat: int = 1) -> str:
    rows = built.rows
    out: list[str] = []
    rels = Counter(row[2] for row in rows)
    entities = {row[1] for row in rows} | {row[3] for row in rows}
    top = sampler.in_degree.most_common(1)[0] if sampler.in_degree else ("-", 0)
    degrees = sorted(sampler.in_degree.values())
    load_after = os.getloadavg()
    out.append("## Traversal benchmark: edgeledger vs networkx vs DuckDB\n")
    out.append(f"Code: `{_revision()}`.")
    out.append(f"Command: `{command.strip()}` ({os.cpu_count()} cores; load average {load_before[0]:.1f} before, "
               f"{load_after[0]:.1f} after: the machine is shared, so tails carry other processes' noise; the "
               "*Python dict* row times a dict lookup the same way and shows that floor).\n")
    out.append(f"Graph: {len(entities):,} entities with edges ({spec.entities:,} generated), "
               f"{len(rows):,} edge versions ({', '.join(f'{rel} {n:,}' for rel, n in rels.most_common())}); "
               f"{sum(1 for r in rows if r[7] is None):,} still believed. {built.n_events:,} events; ledger load: "
               f"{built.load_summary}.")
    out.append(f"depends_on in-degree (believed versions): median {statistics.median(degrees) if degrees else 0}, "
               f"p99 {percentile(degrees, 0.99) if degrees else 0}, max {top[1]:,} ({top[0]}); "
               f"hubs = top 1 % ({len(sampler.hubs):,} nodes), {sampler.hub_share:.0%} of anchors.")
    out.append(f"Build: generate {built.timings['generate_s']:.1f} s, ledger load {built.timings['load_s']:.1f} s, "
               f"export {built.timings['export_s']:.1f} s, networkx {nx_s:.1f} s, DuckDB {duck_s:.1f} s.")
    timing = ("each query timed once" if repeat == 1 else
              f"each query timed {repeat} times in a row, the fastest kept (per-query cost, less machine noise)")
    out.append(f"{n_queries:,} queries per query x clock, {timing}. *current*: valid_at = known_at = now. "
               "*past*: known_at uniform over the transaction history, valid_at = known_at (40 %) or uniform "
               "before it; 25 % put known_at on the tx_from/tx_to and valid_at on a bound of a version the query "
               "reads first. "
               "*no cap*: limits nothing reaches; *200 cap*: the default `Limits()`. Cached: "
               f"{engines.cached_note}. rocksdict scan: {engines.rocks_note}.\n")

    out.append("### Latency (ms)\n")
    out.append("| query | clock | implementation | p50 | p99 | max |")
    out.append("|---|---|---|---:|---:|---:|")
    for (name, clock), (_, series, _) in results.items():
        for impl in IMPLEMENTATIONS:
            if not series[impl].micros:
                out.append(f"| {name} | {clock} | {impl} | n/a | n/a | n/a |")
                continue
            p50, p99, worst = series[impl].stats()
            out.append(f"| {name} | {clock} | {impl} | {_ms(p50)} | {_ms(p99)} | {_ms(worst)} |")

    if colds:
        out.append("\n### Cold start: a freshly opened RocksDB secondary reader per query, 200 cap (ms)\n")
        out.append("| query | clock | queries | open p50 | open max | first query p50 | first query p99 | "
                   "first query max | answer ≠ warm |")
        out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for (name, clock), cold in colds.items():
            opened, first = sorted(cold.open_ms), sorted(cold.first_ms)
            out.append(f"| {name} | {clock} | {len(first)} | {_ms(percentile(opened, 0.5))} | {_ms(opened[-1])} | "
                       f"{_ms(percentile(first, 0.5))} | {_ms(percentile(first, 0.99))} | {_ms(first[-1])} | "
                       f"{cold.differs} |")

    out.append("\n### Ratios\n")
    out.append("| query | clock | no cap / DuckDB p50 | no cap / DuckDB p99 | 200 cap / DuckDB p50 | "
               "200 cap / DuckDB p99 | DuckDB / 200 cap p99 (target ≥ 15) |")
    out.append("|---|---|---:|---:|---:|---:|---:|")
    for (name, clock), (_, series, _) in results.items():
        d50, d99, _ = series[DUCK].stats()
        f50, f99, _ = series[FULL].stats()
        c50, c99, _ = series[CAPPED].stats()
        out.append(f"| {name} | {clock} | {f50 / d50:.3f} | {f99 / d99:.3f} | {c50 / d50:.3f} | {c99 / d99:.3f} | "
                   f"{d99 / c99:.1f} |")
    out.append("\n| query | implementation | past / current p50 | past / current p99 (target ≤ 1.5 for edgeledger) |")
    out.append("|---|---|---:|---:|")
    for name, _ in QUERY_TYPES:
        for impl in IMPLEMENTATIONS:
            now_s, past_s = results[(name, "current")][1][impl], results[(name, "past")][1][impl]
            if not now_s.micros:
                continue
            n50, n99, _ = now_s.stats()
            p50, p99, _ = past_s.stats()
            out.append(f"| {name} | {impl} | {p50 / n50:.2f} | {p99 / n99:.2f} |")

    out.append("\n### The issue's targets (edgeledger with the default 200-expansion cap)\n")
    out.append("| target | measured | met |")
    out.append("|---|---|---|")
    for clock in CLOCKS:
        _, p99, _ = results[("dependents-of", clock)][1][CAPPED].stats()
        _, d99, _ = results[("dependents-of", clock)][1][DUCK].stats()
        out.append(f"| uncached 3-hop dependents-of p99 ≤ 2 ms ({clock}) | {_ms(p99)} ms | "
                   f"{'yes' if p99 <= 2 else 'NO'} |")
        out.append(f"| ≥ 15x faster than DuckDB, 3-hop p99 ({clock}) | {d99 / p99:.1f}x | "
                   f"{'yes' if d99 / p99 >= 15 else 'NO'} |")
    if all(results[key][1][CACHED].micros for key in results):
        for (name, clock), (_, series, _) in results.items():
            _, p99, _ = series[CACHED].stats()
            _, first99, _ = series[CACHED_FIRST].stats()
            out.append(f"| cached p99 ≤ 0.1 ms, {name} {clock} | repeat hit {_ms(p99)} ms (first hit "
                       f"{_ms(first99)} ms) | {'yes' if p99 <= 0.1 else 'NO'} |")
    else:
        out.append(f"| cached p99 ≤ 0.1 ms | edgeledger cached: {engines.cached_note} | n/a |")
    for name, _ in QUERY_TYPES:
        _, n99, _ = results[(name, "current")][1][CAPPED].stats()
        _, p99, _ = results[(name, "past")][1][CAPPED].stats()
        met = "yes" if p99 / n99 <= 1.5 else "NO"
        out.append(f"| as-of ≤ 1.5x current, {name} p99 | {p99 / n99:.2f}x | {met} |")

    out.append("\n### Answer agreement\n")
    out.append("| query | clock | queries | networkx = DuckDB | networkx = edgeledger | DuckDB = edgeledger | "
               "all three | rocksdict scan = networkx | empty | mean / max answer | no-cap truncated | "
               "200 cap truncated (of which empty) | 200 cap ⊄ full | 200 cap untruncated ≠ full | "
               "cached ≠ uncached | cached at another valid_at: hits, ≠ uncached |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    examples: list[str] = []
    for (name, clock), (_, _, a) in results.items():
        sizes = a.answer_sizes
        cached_cell = f"{a.cached_differs} of {a.cached_checked}" if a.cached_checked else "n/a"
        window_cell = f"{a.window_hits}, {a.window_differs}" if a.cached_checked else "n/a"
        rocks_cell = "n/a" if a.rocks_nx is None else str(a.rocks_nx)
        out.append(f"| {name} | {clock} | {a.queries} | {a.nx_duck} | {a.nx_ledger} | {a.duck_ledger} | "
                   f"{a.all_three} | {rocks_cell} | {a.empty} | {statistics.mean(sizes):.1f} / {max(sizes):,} | "
                   f"{a.full_truncated} | {a.capped_truncated} ({a.capped_truncated_empty}) | {a.capped_not_subset} | "
                   f"{a.capped_untruncated_differs} | {cached_cell} | {window_cell} |")
        examples += a.examples
    total = sum(a.queries - a.all_three for _, _, a in results.values())
    out.append(f"\nDisagreements among networkx, DuckDB and edgeledger: **{total}**; other failed checks: "
               f"**{sum(a.failures for _, _, a in results.values()) - total}**.")
    if engines.cached is not None:
        timed_statuses: Counter[str] = Counter()
        for _, series, _ in results.values():
            timed_statuses.update(series[CACHED].statuses)
            timed_statuses.update(series[CACHED_FIRST].statuses)
        out.append(f"Cache statuses of the timed (second) runs: {dict(timed_statuses)}; of all runs: "
                   f"{dict(engines.cached.statuses)}.")
    if examples:
        out.append(f"\nExamples ({min(len(examples), max_examples)} of {len(examples)} collected):\n")
        out += examples[:max_examples]
    out.append("\n### Where edgeledger's time goes (200 cap)\n")
    out += time_notes
    if profile:
        out.append("\ncProfile of dependents-of (3 hops, 200 cap), the current and past queries above:\n")
        out.append("```\n" + profile + "\n```")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
