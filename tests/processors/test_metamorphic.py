"""Metamorphic properties of the traversals, over generated graphs: change the input in a way that must
not change the answer (or may only shrink it) and check that it does not."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from processors.query_requests import parse_edge_allowlist
from processors.traversal import Limits
from schemas.results import QueryResult
from tests.support.harness import FAR_FUTURE, Ledger

SERVICES = [f"Service:cmdb:S{i}" for i in range(6)]
COMPONENTS = ["Component:cmdb:C0", "Component:cmdb:C1"]
DEPENDABLE = SERVICES + COMPONENTS
TEAMS = ["Team:hr:T0", "Team:hr:T1", "Team:hr:T2"]
POLICIES = ["Policy:pol:P0", "Policy:pol:P1"]
ROLES = ["ApprovalRole:role:R0", "ApprovalRole:role:R1"]
INTERVALS = [(None, None), (None, None), ("2025-01-01", None), (None, "2026-03-01"), ("2026-07-01", None)]
PRESENT = "2026-06-01"
SYSTEM_OF = {"depends_on": "cmdb", "owned_by": "cmdb", "runs_on": "cmdb", "governed_by": "policy",
             "requires": "policy"}
GENEROUS = Limits(max_depth=6, max_expansions=100_000, max_paths=100_000, max_evidence_tokens=1_000_000,
                  max_degree=10_000)
EVERYTHING_BUT_READS = {"counts": {"edges_read"}}


@dataclass(frozen=True)
class Edge:
    src: str
    rel: str
    dst: str
    valid_from: str | None = None
    valid_to: str | None = None


def _edges(pairs: st.SearchStrategy, rel: str) -> st.SearchStrategy[list[Edge]]:
    return st.lists(st.tuples(pairs, st.sampled_from(INTERVALS)), min_size=4, max_size=14).map(
        lambda items: [Edge(src, rel, dst, *interval) for (src, dst), interval in items])


@st.composite
def graphs(draw: st.DrawFn) -> list[Edge]:
    depends = draw(_edges(st.tuples(st.sampled_from(DEPENDABLE), st.sampled_from(DEPENDABLE)).filter(
        lambda pair: pair[0] != pair[1]), "depends_on"))
    owners = draw(st.lists(st.tuples(st.sampled_from(DEPENDABLE), st.sampled_from(TEAMS)), min_size=3,
                           max_size=6, unique_by=lambda pair: pair[0]))
    governed = draw(st.lists(st.tuples(st.sampled_from(TEAMS), st.sampled_from(POLICIES)), min_size=2, max_size=4,
                              unique=True))
    requires = draw(st.lists(st.tuples(st.sampled_from(POLICIES), st.sampled_from(ROLES)), min_size=2, max_size=4,
                              unique=True))
    edges = depends + [Edge(s, "owned_by", d) for s, d in owners]
    edges += [Edge(s, "governed_by", d) for s, d in governed] + [Edge(s, "requires", d) for s, d in requires]
    return edges


def build(edges: list[Edge]) -> Ledger:
    ledger = Ledger()
    ledger.at("2026-01-01T00:00:00Z")
    add(ledger, edges)
    return ledger


def add(ledger: Ledger, edges: list[Edge], authority: str | None = None) -> None:
    for system in sorted({authority or SYSTEM_OF[e.rel] for e in edges}):
        change = ledger.change(system)
        for e in edges:
            if (authority or SYSTEM_OF[e.rel]) == system:
                change.asserts(e.src, e.rel, e.dst, e.valid_from, e.valid_to, evidence=f"{e.src} {e.rel} {e.dst}")
        change.send()


QUERIES: list[tuple[str, dict[str, Any]]] = [
    ("owners-of", {}),
    ("dependents-of", {"depth": 1}),
    ("dependents-of", {"depth": 3}),
    ("approvals-required-for", {"depth": 1}),
    ("approvals-required-for", {"depth": 2}),
    ("neighbourhood", {"depth": 2}),
    ("traverse", {"edges": parse_edge_allowlist("depends_on:in,owned_by:out")}),
    ("traverse", {"edges": parse_edge_allowlist("depends_on,governed_by:out,requires:out")}),
]


def anchors_of(edges: list[Edge]) -> list[str]:
    """Every entity in the graph, the ones something depends on three times over (they have answers)."""
    depended_on = sorted({e.dst for e in edges if e.rel == "depends_on"})
    return sorted({e.src for e in edges} | {e.dst for e in edges}) + depended_on * 2


def run(ledger: Ledger, query: tuple[str, dict[str, Any]], anchor: str, limits: Limits = GENEROUS,
        valid_at: str = PRESENT) -> QueryResult:
    name, options = query
    return ledger.query(name, anchor, valid_at=valid_at, known_at=FAR_FUTURE, limits=limits, **options)


@settings(max_examples=60, deadline=None)
@given(edges=graphs(), query=st.sampled_from(QUERIES), pick=st.integers(0, 100),
       unrelated=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)).filter(lambda p: p[0] != p[1]),
                          min_size=1, max_size=4))
def test_adding_an_unrelated_entity_changes_nothing(edges: list[Edge], query: tuple[str, dict[str, Any]],
                                                    pick: int, unrelated: list[tuple[int, int]]) -> None:
    ledger = build(edges)
    anchors = anchors_of(edges)
    anchor = anchors[pick % len(anchors)]
    before = run(ledger, query, anchor, Limits())
    island = [Edge(f"Service:cmdb:X{a}", "depends_on", f"Service:cmdb:X{b}") for a, b in unrelated]
    island += [Edge(f"Service:cmdb:X{a}", "owned_by", "Team:hr:TX") for a, _ in unrelated[:1]]
    add(ledger, island)
    assert run(ledger, query, anchor, Limits()).model_dump() == before.model_dump()


@settings(max_examples=60, deadline=None)
@given(edges=graphs(), query=st.sampled_from(QUERIES), pick=st.integers(0, 100),
       expired=st.lists(st.sampled_from([("depends_on", DEPENDABLE, DEPENDABLE), ("owned_by", DEPENDABLE, TEAMS),
                                          ("governed_by", TEAMS, POLICIES), ("requires", POLICIES, ROLES)]).flatmap(
           lambda spec: st.tuples(st.just(spec[0]), st.sampled_from(spec[1]), st.sampled_from(spec[2]))),
           min_size=1, max_size=3),
       ended=st.sampled_from(["2026-02-01", "2026-06-01", "2020-01-01"]))
def test_adding_an_expired_edge_does_not_change_a_present_answer(
        edges: list[Edge], query: tuple[str, dict[str, Any]], pick: int, expired: list[tuple[str, str, str]],
        ended: str) -> None:
    ledger = build(edges)
    anchors = anchors_of(edges)
    anchor = anchors[pick % len(anchors)]
    before = run(ledger, query, anchor)
    add(ledger, [Edge(src, rel, dst, "2019-01-01", ended) for rel, src, dst in expired if src != dst],
        authority="archive")
    after = run(ledger, query, anchor)
    assert after.model_dump(exclude=EVERYTHING_BUT_READS) == before.model_dump(exclude=EVERYTHING_BUT_READS)
    assert after.counts.edges_read >= before.counts.edges_read


@settings(max_examples=60, deadline=None)
@given(edges=graphs(), query=st.sampled_from(QUERIES), pick=st.integers(0, 100),
       alias=st.text(alphabet="abcdefghijklmnopqrstuvwxyz -", min_size=1, max_size=12).filter(
           lambda text: any(c.isalpha() for c in text)),
       typed=st.booleans())
def test_an_alias_gives_the_same_paths_as_the_canonical_id(edges: list[Edge], query: tuple[str, dict[str, Any]],
                                                           pick: int, alias: str, typed: bool) -> None:
    ledger = build(edges)
    anchors = anchors_of(edges)
    anchor = anchors[pick % len(anchors)]
    ledger.send({"kind": "alias", "event_id": f"alias-{pick}", "tenant": "acme", "entity": anchor,
                 "alias": f"the {alias}", "actor": "test"})
    by_id = run(ledger, query, anchor)
    text = f"{anchor.split(':')[0]}:the {alias}" if typed else f"The {alias.upper()}"
    by_alias = run(ledger, query, text)
    assert (by_alias.anchor.resolution, by_alias.anchor.entity) == ("alias", anchor)
    same = {"results", "paths", "edges", "counts", "disposition", "truncated", "limits_hit", "frontier"}
    assert by_alias.model_dump(include=same) == by_id.model_dump(include=same)


@settings(max_examples=80, deadline=None)
@given(edges=graphs(), query=st.sampled_from([q for q in QUERIES if q[0] != "owners-of"]), pick=st.integers(0, 100),
       depths=st.tuples(st.integers(1, 6), st.integers(1, 6)).filter(lambda d: d[0] < d[1]),
       valid_at=st.sampled_from([PRESENT, "2026-02-01", "2026-08-01"]))
def test_lowering_max_depth_never_adds_a_result(edges: list[Edge], query: tuple[str, dict[str, Any]], pick: int,
                                                depths: tuple[int, int], valid_at: str) -> None:
    ledger = build(edges)
    anchors = anchors_of(edges)
    anchor = anchors[pick % len(anchors)]
    lower, higher = depths
    shallow = run(ledger, query, anchor, Limits(max_depth=lower, max_expansions=100_000, max_paths=100_000,
                                                max_degree=10_000), valid_at)
    deep = run(ledger, query, anchor, Limits(max_depth=higher, max_expansions=100_000, max_paths=100_000,
                                             max_degree=10_000), valid_at)
    assume(set(shallow.limits_hit) <= {"max_depth", "max_evidence_tokens"})
    assume(set(deep.limits_hit) <= {"max_depth", "max_evidence_tokens"})
    assert {r.entity for r in shallow.results} <= {r.entity for r in deep.results}
    deep_paths = {tuple(p.edges) for p in deep.paths}
    assert all(tuple(p.edges) in deep_paths for p in shallow.paths)
    if not deep.truncated:
        assert shallow.results == deep.results or shallow.truncated, "a depth that cut nothing changed nothing"
