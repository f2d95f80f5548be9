"""The traversal cache: a cached answer always equals the uncached one; invalidation is exact."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from processors.cache import CachedQueryEngine
from processors.cache_keys import (
    ValidWindow,
    entry_key,
    is_cacheable,
    is_current,
    request_key,
    touched_read_keys,
    valid_window,
)
from processors.queries import QueryEngine, QueryRequest
from processors.query_requests import parse_edge_allowlist
from processors.traversal import Limits
from schemas.ontology import default_ontology
from schemas.results import QueryResult
from schemas.times import format_micros, parse_micros
from state.cache_store import CacheStore
from state.changes import versions_changed_since
from state.kv import MemoryKV
from tests.support.harness import FAR_FUTURE, Ledger

CONNECTOR = "Component:cmdb:CI0042"
REPORTS, ETL, DASH = "Service:cmdb:S1", "Service:cmdb:S2", "Service:cmdb:S3"
ANA, PLAT = "Team:hr:T-ANA", "Team:hr:T-PLAT"
ONTOLOGY = default_ontology()


def cached_engine(ledger: Ledger, **options: Any) -> CachedQueryEngine:
    return CachedQueryEngine(
        ledger.store, ONTOLOGY, CacheStore(MemoryKV(), **options), ledger.store.last_tx,
        lambda tenant, after: versions_changed_since(ledger.store, tenant, after),
    )


def request(name: str, entity: str, valid_at: str = FAR_FUTURE, known_at: str = FAR_FUTURE,
            **options: Any) -> QueryRequest:
    return QueryRequest(name, "acme", entity, parse_micros(valid_at), parse_micros(known_at), **options)


@pytest.fixture
def served(ledger: Ledger) -> tuple[Ledger, CachedQueryEngine]:
    ledger.at("2026-03-01T00:00:00Z").change("cmdb").asserts(REPORTS, "depends_on", CONNECTOR).asserts(
        REPORTS, "owned_by", ANA).asserts(CONNECTOR, "owned_by", ANA, valid_from="2026-01-01").send()
    return ledger, cached_engine(ledger)


# -- pure pieces ---------------------------------------------------------------------------------------------
def test_a_version_touches_its_out_and_in_adjacency() -> None:
    ledger = Ledger()
    ledger.change("cmdb").asserts(REPORTS, "depends_on", CONNECTOR).send()
    (version,) = ledger.versions(REPORTS, "depends_on")
    assert touched_read_keys(version) == (("acme", REPORTS, "depends_on", "out"),
                                          ("acme", CONNECTOR, "depends_on", "in"))


def test_current_means_known_at_is_not_before_the_last_transaction() -> None:
    assert is_current(10, 10) and is_current(11, 10) and not is_current(9, 10)


def test_the_key_ignores_valid_at_and_a_current_known_at_but_nothing_else() -> None:
    base = request("dependents-of", CONNECTOR, valid_at="2026-01-01", known_at="2027-01-01")
    same = request("dependents-of", CONNECTOR, valid_at="2026-02-01", known_at="2028-01-01")
    assert request_key(base, current=True) == request_key(same, current=True)
    assert request_key(base, current=False) != request_key(same, current=False)
    assert request_key(base, True).startswith("dependents-of:")
    variants = [
        request("dependents-of", CONNECTOR, depth=2),
        request("dependents-of", CONNECTOR, limits=Limits(max_paths=3)),
        request("dependents-of", REPORTS),
        request("owners-of", CONNECTOR),
        request("dependents-of", CONNECTOR, node_types=frozenset({"Service"})),
        QueryRequest("dependents-of", "globex", CONNECTOR, 0, parse_micros(FAR_FUTURE)),
    ]
    keys = {request_key(r, True) for r in [base, *variants]}
    assert len(keys) == len(variants) + 1


def test_a_valid_window_lies_between_the_boundaries_around_valid_at() -> None:
    assert valid_window([10, 20, 30], 20) == ValidWindow(20, 30)
    assert valid_window([10, 20, 30], 5) == ValidWindow(None, 10)
    assert valid_window([10, 20, 30], 35) == ValidWindow(30, None)
    assert valid_window([], 5) == ValidWindow()
    window = ValidWindow(20, 30)
    assert window.contains(20) and window.contains(29) and not window.contains(30) and not window.contains(19)
    assert entry_key("owners-of:ab", window) == "owners-of:ab:20:30"
    assert entry_key("owners-of:ab", ValidWindow()) == "owners-of:ab:-:-"


def test_changed_between_without_an_end_is_not_cached_when_current() -> None:
    open_ended = request("changed-between", CONNECTOR, changed_from=0)
    assert not is_cacheable(open_ended, current=True) and is_cacheable(open_ended, current=False)
    assert is_cacheable(request("changed-between", CONNECTOR, changed_from=0, changed_to=5), current=True)


# -- behaviour -----------------------------------------------------------------------------------------------
def test_a_repeat_is_a_hit_with_the_callers_clocks(served: tuple[Ledger, CachedQueryEngine]) -> None:
    _, engine = served
    first, status = engine.run_with_status(request("owners-of", CONNECTOR, known_at="2030-01-01"))
    assert status == "miss"
    again, status = engine.run_with_status(request("owners-of", CONNECTOR, valid_at="2027-01-01",
                                                   known_at="2031-01-01"))
    assert status == "hit"
    assert (again.known_at, again.valid_at) == ("2031-01-01T00:00:00Z", "2027-01-01T00:00:00Z")
    assert again.model_dump(exclude={"known_at", "valid_at"}) == first.model_dump(exclude={"known_at", "valid_at"})
    assert engine.stats.hits == 1 and engine.stats.misses == 1


def test_a_new_edge_invalidates_the_answers_it_would_add_to(served: tuple[Ledger, CachedQueryEngine]) -> None:
    ledger, engine = served
    before = engine.run(request("dependents-of", CONNECTOR))
    assert {r.entity for r in before.results} == {REPORTS}
    owners = engine.run(request("owners-of", REPORTS))
    ledger.change("cmdb").asserts(DASH, "depends_on", CONNECTOR).send()
    after, status = engine.run_with_status(request("dependents-of", CONNECTOR))
    assert status == "miss" and {r.entity for r in after.results} == {REPORTS, DASH}
    assert engine.stats.invalidated == 1, "the new edge's evidence was in no answer, yet it adds to one"
    unrelated, status = engine.run_with_status(request("owners-of", REPORTS))
    assert status == "hit" and unrelated == owners


def test_a_closed_version_invalidates_and_the_record_names_cause_and_entries(
        served: tuple[Ledger, CachedQueryEngine]) -> None:
    ledger, engine = served
    records: list = []
    engine.on_invalidation = records.append
    engine.run(request("owners-of", CONNECTOR))
    engine.run(request("dependents-of", CONNECTOR))
    (owned,) = ledger.versions(CONNECTOR, "owned_by")
    ledger.send({"kind": "revoke", "event_id": "rv-1", "tenant": "acme", "edge_id": owned.edge_id, "reason": "wrong"})
    assert engine.run(request("owners-of", CONNECTOR)).results == []
    (record,) = records
    assert record.tenant == "acme" and record.causing_edge_ids == [owned.edge_id]
    assert len(record.invalidated_keys) == 1 and record.invalidated_keys[0].startswith("owners-of:")
    assert record.caused_by == {record.invalidated_keys[0]: [owned.edge_id]}
    assert engine.run_with_status(request("dependents-of", CONNECTOR))[1] == "hit"


def test_invalidate_fans_out_to_every_entry_reading_the_adjacency(served: tuple[Ledger, CachedQueryEngine]) -> None:
    ledger, engine = served
    engine.run(request("dependents-of", CONNECTOR))
    engine.run(request("dependents-of", CONNECTOR, depth=2))
    engine.run(request("approvals-required-for", CONNECTOR))
    engine.run(request("owners-of", REPORTS))
    (dependency,) = ledger.versions(REPORTS, "depends_on")
    keys = engine.invalidate([dependency])
    assert sorted(k.split(":")[0] for k in keys) == ["approvals-required-for", "dependents-of", "dependents-of"]
    assert engine.invalidate([dependency]) == []


def test_past_answers_are_reproducible_after_later_writes(served: tuple[Ledger, CachedQueryEngine]) -> None:
    ledger, engine = served
    past = request("dependents-of", CONNECTOR, known_at="2026-03-02")
    ledger.at("2026-04-01T00:00:00Z").change("cmdb").asserts(DASH, "depends_on", CONNECTOR).send()
    first = engine.run(past)
    ledger.change("cmdb").asserts(ETL, "owned_by", PLAT).send()
    assert engine.run_with_status(past) == (first, "hit"), "a write elsewhere leaves a past answer cached"
    ledger.at("2026-05-01T00:00:00Z").change("cmdb").asserts(ETL, "depends_on", CONNECTOR).send()
    again, _ = engine.run_with_status(past)
    assert {r.entity for r in first.results} == {REPORTS}
    assert again == first, "a version recorded after known_at is not read as of known_at: nothing changes"
    uncached = QueryEngine(ledger.store, default_ontology()).run(past)
    assert uncached.model_dump() == first.model_dump()


def test_a_traverse_cut_at_max_depth_stays_exact_as_the_chain_grows_and_breaks(ledger: Ledger) -> None:
    """The cut is reported whatever lies past it, so an edge beyond the frontier changes nothing (a hit); an
    edge the walk read does (a miss), and every answer equals the uncached one."""
    c1, c2, c3 = "Component:cmdb:C1", "Component:cmdb:C2", "Component:cmdb:C3"
    ledger.at("2026-03-01T00:00:00Z").change("cmdb").asserts(c1, "depends_on", REPORTS).asserts(
        c2, "depends_on", c1).send()
    engine = cached_engine(ledger)
    asked = request("traverse", REPORTS, edges=parse_edge_allowlist("depends_on:in"), limits=Limits(max_depth=2))

    def answer() -> tuple[QueryResult, str]:
        result, status = engine.run_with_status(asked)
        assert result.model_dump() == QueryEngine(ledger.store, ONTOLOGY).run(asked).model_dump()
        return result, status

    cut, _ = answer()
    assert cut.truncated and [f.node for f in cut.frontier] == [c2]
    ledger.change("cmdb").asserts(c3, "depends_on", c2).send()
    grown, status = answer()
    assert status == "hit" and grown.frontier == cut.frontier
    (middle,) = ledger.versions(c2, "depends_on")
    ledger.send({"kind": "revoke", "event_id": "rv-chain", "tenant": "acme", "edge_id": middle.edge_id,
                 "reason": "wrong"})
    broken, status = answer()
    assert status == "miss" and [r.entity for r in broken.results] == [c1]
    assert not broken.truncated and broken.frontier == []


def test_valid_at_now_hits_until_it_crosses_a_boundary_of_the_data_read(ledger: Ledger) -> None:
    ledger.change("cmdb").asserts(CONNECTOR, "owned_by", ANA, valid_to="2026-06-01").asserts(
        CONNECTOR, "owned_by", PLAT, valid_from="2026-06-01", evidence="moved").send()
    engine = cached_engine(ledger)
    may = engine.run(request("owners-of", CONNECTOR, valid_at="2026-05-01"))
    assert engine.run_with_status(request("owners-of", CONNECTOR, valid_at="2026-05-31T23:59:59Z"))[1] == "hit"
    june, status = engine.run_with_status(request("owners-of", CONNECTOR, valid_at="2026-06-01"))
    assert status == "miss"
    assert [r.entity for r in may.results] == [ANA] and [r.entity for r in june.results] == [PLAT]
    assert engine.run_with_status(request("owners-of", CONNECTOR, valid_at="2099-01-01"))[1] == "hit"


def test_an_alias_added_later_is_seen_although_no_edge_changed(served: tuple[Ledger, CachedQueryEngine]) -> None:
    ledger, engine = served
    assert engine.run(request("owners-of", "settlement connector")).anchor.resolution == "unresolved"
    ledger.send({"kind": "alias", "event_id": "al-1", "tenant": "acme", "entity": CONNECTOR,
                 "alias": "Settlement Connector", "actor": "alice"})
    result, status = engine.run_with_status(request("owners-of", "settlement connector"))
    assert status == "miss" and result.anchor.entity == CONNECTOR and [r.entity for r in result.results] == [ANA]
    assert engine.stats.revalidation_misses == 1


def test_identity_hook_drops_entries_that_read_either_entity(served: tuple[Ledger, CachedQueryEngine]) -> None:
    _, engine = served
    engine.run(request("owners-of", CONNECTOR))
    engine.run(request("dependents-of", CONNECTOR))
    engine.run(request("owners-of", DASH))
    dropped = engine.invalidate_entities("acme", [CONNECTOR])
    assert sorted(k.split(":")[0] for k in dropped) == ["dependents-of", "owners-of"]
    assert engine.run_with_status(request("owners-of", DASH))[1] == "hit"


def test_a_merge_and_its_split_invalidate_exactly_the_answers_reading_or_naming_either_entity(
        served: tuple[Ledger, CachedQueryEngine]) -> None:
    ledger, engine = served
    ledger.change("cmdb").asserts(DASH, "owned_by", PLAT).asserts(ETL, "depends_on", DASH).send()
    uncached = QueryEngine(ledger.store, ONTOLOGY)
    questions = {"reads S1": request("dependents-of", CONNECTOR), "names S3": request("dependents-of", DASH),
                 "owner of S1": request("owners-of", REPORTS), "neither": request("owners-of", CONNECTOR)}
    for question in questions.values():
        engine.run(question)
    records = []
    engine.on_invalidation = records.append
    merge_id = ledger.merge(REPORTS, DASH)
    statuses = {name: engine.run_with_status(question) for name, question in questions.items()}
    assert {name: status for name, (_, status) in statuses.items()} == {
        "reads S1": "miss", "names S3": "miss", "owner of S1": "miss", "neither": "hit"}
    assert all(result == uncached.run(questions[name]) for name, (result, _) in statuses.items())
    assert {r.entity for r in statuses["reads S1"][0].results} == {REPORTS}, "S3 is S1 now"
    assert records and records[-1].causing_identity_edits == [merge_id] and records[-1].causing_edge_ids == []
    ledger.split(merge_id)
    after_split = {name: engine.run_with_status(question) for name, question in questions.items()}
    assert {name: status for name, (_, status) in after_split.items()} == {
        "reads S1": "miss", "names S3": "miss", "owner of S1": "miss", "neither": "hit"}
    assert all(result == uncached.run(questions[name]) for name, (result, _) in after_split.items())


@pytest.mark.parametrize("memory_entries", [0, 2_000], ids=["entry-reloaded-from-kv", "entry-in-memory-front"])
def test_a_hit_right_after_a_miss_parses_no_json(ledger: Ledger, memory_entries: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    ledger.change("cmdb").asserts(REPORTS, "depends_on", CONNECTOR).asserts(REPORTS, "owned_by", ANA).send()
    engine = cached_engine(ledger, memory_entries=memory_entries)
    parses: list[bytes] = []
    parse = QueryResult.model_validate_json

    def counting_parse(data: bytes, *args: Any, **kwargs: Any) -> QueryResult:
        parses.append(data)
        return parse(data, *args, **kwargs)

    monkeypatch.setattr(QueryResult, "model_validate_json", counting_parse)
    asked = request("dependents-of", CONNECTOR, depth=2)
    assert engine.run_with_status(asked)[1] == "miss"
    again, status = engine.run_with_status(asked)
    assert status == "hit" and parses == [], "the miss left its result in the decoded front"
    assert [r.entity for r in again.results] == [REPORTS] and again.edges
    uncached = QueryEngine(ledger.store, ONTOLOGY).run(asked)
    assert again.model_dump() == uncached.model_dump()
    assert again.model_dump_json() == uncached.model_dump_json()

    engine.decoded_entries = 0  # the seam works: without the front, the same hit parses the stored JSON
    other = request("owners-of", REPORTS)
    assert engine.run_with_status(other)[1] == "miss"
    assert engine.run_with_status(other)[1] == "hit" and len(parses) == 1
    assert not engine._decoded, "the front never holds more than decoded_entries"


def test_the_decoded_front_stays_bounded(served: tuple[Ledger, CachedQueryEngine]) -> None:
    _, engine = served
    engine.decoded_entries = 2
    for entity in (CONNECTOR, REPORTS, DASH, ETL):
        engine.run(request("owners-of", entity))
    assert len(engine._decoded) == 2
    assert [key.split(":")[0] for key in engine._decoded] == ["owners-of", "owners-of"]
    assert engine.run_with_status(request("owners-of", ETL))[1] == "hit"


def test_the_decoded_front_is_bounded_by_bytes(served: tuple[Ledger, CachedQueryEngine]) -> None:
    ledger, engine = served
    asked = [request("owners-of", entity) for entity in (CONNECTOR, REPORTS, DASH, ETL)]
    sizes = [len(QueryEngine(ledger.store, ONTOLOGY).run(one).model_dump_json()) for one in asked]
    engine.decoded_bytes = 16 * min(sizes) - 1  # every answer is more than a sixteenth: none is kept
    for one in asked:
        engine.run(one)
    assert not engine._decoded and engine._decoded_used == 0
    engine.decoded_bytes = 16 * max(sizes)  # room for every one of them alone, not for all of them together
    for one in asked:
        engine.run(one)
    assert engine._decoded and engine._decoded_used == sum(len(raw) for raw, _ in engine._decoded.values())
    assert engine._decoded_used <= engine.decoded_bytes


def test_bounded_entries_evict_the_oldest(served: tuple[Ledger, CachedQueryEngine]) -> None:
    ledger, _ = served
    engine = cached_engine(ledger, max_entries=2, memory_entries=1)
    for entity in (CONNECTOR, REPORTS, DASH):
        engine.run(request("owners-of", entity))
    assert engine.stats.evicted == 1
    assert engine.run_with_status(request("owners-of", DASH))[1] == "hit"
    assert engine.run_with_status(request("owners-of", CONNECTOR))[1] == "miss"


# -- the property: cached == uncached ---------------------------------------------------------------------
SERVICES = [f"Service:cmdb:S{i}" for i in range(1, 5)]
COMPONENTS = ["Component:cmdb:C1", "Component:cmdb:C2"]
TEAMS = ["Team:hr:T1", "Team:hr:T2", "Team:hr:T3"]
POLICIES = ["Policy:pol:P1", "Policy:pol:P2"]
ROLES = ["ApprovalRole:role:R1", "ApprovalRole:role:R2"]
EDGES = (
    [(s, "depends_on", d) for s in SERVICES + COMPONENTS for d in SERVICES + COMPONENTS if s != d]
    + [(s, "owned_by", t) for s in SERVICES + COMPONENTS for t in TEAMS]
    + [(t, "governed_by", p) for t in TEAMS for p in POLICIES]
    + [(p, "requires", r) for p in POLICIES for r in ROLES]
)
DATES = [None, "2026-01-01", "2026-03-01", "2026-05-01"]
VALID_ATS = ["2025-12-01", "2026-01-01", "2026-02-15", "2026-03-01", "2026-04-01", "2026-05-01", FAR_FUTURE]
ALIASES = ["alpha", "beta", "Ledger: alpha", "Service: beta"]
ANCHORS = SERVICES + COMPONENTS * 3 + TEAMS + ["alpha", "beta", "Service:alpha", "Service:cmdb:NOPE",
                                               "Ledger: alpha", "Service: beta"]
LIMITS = [Limits(), Limits(max_expansions=4), Limits(max_paths=2), Limits(max_degree=1), Limits(max_depth=2),
          Limits(max_evidence_tokens=3)]
SYSTEM_OF = {"depends_on": "cmdb", "owned_by": "cmdb", "governed_by": "policy", "requires": "policy"}
_event_ids = itertools.count(1)


def mention(entity_id: str, name: str | None = None) -> dict[str, str]:
    entity_type, _, rest = entity_id.partition(":")
    return {"type": entity_type, "id": rest} | ({"name": name} if name else {})


def interval(dates: tuple[str | None, str | None]) -> tuple[str | None, str | None]:
    start, end = dates
    if start is not None and end is not None and start >= end:
        return end, None
    return start, end


class CacheAgreesWithTheEngine(RuleBasedStateMachine):
    """Random writes and queries; every cached answer must equal the uncached answer."""

    @initialize(edges=st.lists(st.sampled_from(EDGES), min_size=8, max_size=30, unique=True))
    def start(self, edges: list[tuple[str, str, str]]) -> None:
        self.ledger = Ledger()
        self.stale: set[str] = set()
        self.days = 0
        self.ledger.at("2026-01-10T00:00:00Z")
        for system in ("cmdb", "policy"):
            self._change(system, asserts=[{"src": mention(src), "rel": rel, "dst": mention(dst), "valid_from": None,
                                           "evidence": f"{src} {rel} {dst}"}
                                          for src, rel, dst in edges if SYSTEM_OF[rel] == system])
        self.engine = CachedQueryEngine(
            self.ledger.store, ONTOLOGY, CacheStore(MemoryKV(), max_entries=12, memory_entries=4),
            self.ledger.store.last_tx, lambda t, after: versions_changed_since(self.ledger.store, t, after),
            stale_sources=self.stale_sources,
        )
        self.plain = QueryEngine(self.ledger.store, ONTOLOGY, self.stale_sources)
        self.asked: list[QueryRequest] = []

    def stale_sources(self, tenant: str, relationships: frozenset[str], known_at: int) -> list[str]:
        wanted = {s for rel in relationships for s in ONTOLOGY.relationships[rel].sources}
        return sorted(wanted & self.stale)

    def _change(self, system: str, asserts: list[dict[str, Any]] = (), retracts: list[dict[str, Any]] = ()) -> None:
        self.ledger.send({"kind": "change", "event_id": f"pe-{next(_event_ids)}", "tenant": "acme",
                          "source": {"system": system, "record": "r1", "version": "1"},
                          "detected_at": "2026-01-01T00:00:00Z", "mode": "delta",
                          "assert": list(asserts), "retract": list(retracts)})

    @rule(edge=st.sampled_from(EDGES), dates=st.tuples(st.sampled_from(DATES), st.sampled_from(DATES)),
          system=st.sampled_from(["own", "sheet"]), evidence=st.sampled_from(["", "seen in the catalogue"]),
          name=st.sampled_from([None, "Alpha", "Beta", "Gamma"]))
    def assert_edge(self, edge: tuple[str, str, str], dates: tuple[str | None, str | None], system: str,
                    evidence: str, name: str | None) -> None:
        src, rel, dst = edge
        start, end = interval(dates)
        self._change(SYSTEM_OF[rel] if system == "own" else system, asserts=[{
            "src": mention(src), "rel": rel, "dst": mention(dst, name), "valid_from": start, "valid_to": end,
            "evidence": evidence}])

    @rule(edge=st.sampled_from(EDGES), stopped=st.sampled_from(DATES))
    def retract_edge(self, edge: tuple[str, str, str], stopped: str | None) -> None:
        src, rel, dst = edge
        self._change(SYSTEM_OF[rel], retracts=[{"src": mention(src), "rel": rel, "dst": mention(dst),
                                                "valid_from": stopped}])

    @rule(pick=st.integers(min_value=0, max_value=1000))
    def revoke(self, pick: int) -> None:
        edge_ids = [edge_id for _, edge_id, what in self.ledger.store.versions_in_tx_order("acme")
                    if what == "appended"]
        if edge_ids:
            self.ledger.send({"kind": "revoke", "event_id": f"pr-{next(_event_ids)}", "tenant": "acme",
                              "edge_id": edge_ids[pick % len(edge_ids)], "reason": "never true"})

    @rule(entity=st.sampled_from(SERVICES + COMPONENTS), alias=st.sampled_from(ALIASES))
    def add_alias(self, entity: str, alias: str) -> None:
        self.ledger.send({"kind": "alias", "event_id": f"pa-{next(_event_ids)}", "tenant": "acme",
                          "entity": entity, "alias": alias, "actor": "test"})

    @rule(days=st.integers(min_value=1, max_value=40))
    def advance_clock(self, days: int) -> None:
        self.days += days
        self.ledger.at(format_micros(parse_micros("2026-01-10") + self.days * 86_400_000_000) or "")

    @rule(system=st.sampled_from(["cmdb", "policy"]))
    def toggle_stale(self, system: str) -> None:
        self.stale ^= {system}

    def _known_at(self, choice: int) -> int:
        last = self.ledger.store.last_tx()
        txs = [tx for tx, _, _ in self.ledger.store.versions_in_tx_order("acme")]
        far = parse_micros(FAR_FUTURE)
        options = [far, far, far, far, last, last, *(tx - 1 for tx in txs[-3:]), *txs[:3]]
        return options[choice % len(options)]

    @rule(shape=st.sampled_from(["owners-of", "dependents-of", "approvals-required-for", "traverse",
                                 "changed-between", "changed-between-open"]),
          anchor=st.sampled_from(ANCHORS), valid_at=st.sampled_from(VALID_ATS),
          known_choice=st.integers(min_value=0, max_value=20), limits=st.sampled_from(LIMITS),
          depth=st.integers(min_value=1, max_value=3), axis=st.sampled_from(["valid", "tx"]),
          tenant=st.sampled_from(["acme", "acme", "acme", "globex"]))
    def query(self, shape: str, anchor: str, valid_at: str, known_choice: int, limits: Limits, depth: int,
              axis: str, tenant: str) -> None:
        options: dict[str, Any] = {"limits": limits}
        name = shape
        if shape in ("dependents-of", "approvals-required-for"):
            options["depth"] = depth
        elif shape == "traverse":
            options["edges"] = parse_edge_allowlist(["depends_on:in,owned_by:out", "depends_on", "owned_by:in"]
                                                    [depth - 1])
        elif shape.startswith("changed-between"):
            name = "changed-between"
            options.update(changed_from=parse_micros("2026-01-01"), axis=axis)
            if shape == "changed-between":
                options["changed_to"] = parse_micros("2026-04-01")
        asked = QueryRequest(name, tenant, anchor, parse_micros(valid_at), self._known_at(known_choice), **options)
        self.asked.append(asked)
        status = self._check(asked)
        if status == "miss":
            assert self._check(asked) == "hit", "an identical request right after a miss is a hit"

    @rule(pick=st.integers(min_value=0, max_value=1000), valid_at=st.sampled_from([None, *VALID_ATS]))
    def ask_again(self, pick: int, valid_at: str | None) -> None:
        """The case that matters: an answer cached before the writes since, asked again (maybe at another valid_at)."""
        if self.asked:
            earlier = self.asked[pick % len(self.asked)]
            self._check(earlier if valid_at is None else replace(earlier, valid_at=parse_micros(valid_at)))

    def _check(self, asked: QueryRequest) -> str:
        cached, status = self.engine.run_with_status(asked)
        assert cached.model_dump() == self.plain.run(asked).model_dump(), status
        return status

    @invariant()
    def stays_bounded(self) -> None:
        if hasattr(self, "engine"):
            assert len(self.engine.backend) <= 12


TestCacheAgreesWithTheEngine = CacheAgreesWithTheEngine.TestCase
TestCacheAgreesWithTheEngine.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow],
)


def test_records_serialise_for_the_topic(served: tuple[Ledger, CachedQueryEngine]) -> None:
    ledger, engine = served
    engine.run(request("owners-of", CONNECTOR))
    (owned,) = ledger.versions(CONNECTOR, "owned_by")
    (record,) = engine.invalidate_with_records([owned])
    assert json.loads(record.model_dump_json())["kind"] == "cache_invalidation"
