"""Bounded traversals: ceilings, truncation with a frontier, honest dispositions, counts."""

import pytest

from processors.queries import QueryEngine, QueryRequest
from processors.traversal import Limits, PlanRefused
from schemas.ontology import default_ontology
from schemas.times import parse_micros
from tests.support.harness import FAR_FUTURE, Ledger

CONNECTOR = "Component:cmdb:CI0042"
REPORTS, ETL, DASH = "Service:cmdb:S1", "Service:cmdb:S2", "Service:cmdb:S3"
ANA, PLAT = "Team:hr:T-ANA", "Team:hr:T-PLAT"
OWNER, RISK, CHANGE = "ApprovalRole:role:owner", "ApprovalRole:role:risk", "ApprovalRole:role:change"


@pytest.fixture
def chapter_graph(ledger: Ledger) -> Ledger:
    """The worked example: 3 services on the connector, 2 owning teams, 2 policies, 3 roles."""
    change = ledger.at("2026-03-01T00:00:00Z").change("cmdb")
    for service, team in ((REPORTS, ANA), (DASH, ANA), (ETL, PLAT)):
        change.asserts(service, "depends_on", CONNECTOR, evidence=f"{service} uses the connector")
        change.asserts(service, "owned_by", team)
    change.send()
    policy = ledger.change("policy")
    policy.asserts(ANA, "governed_by", "Policy:pol:A").asserts(PLAT, "governed_by", "Policy:pol:B")
    for role in (OWNER, RISK):
        policy.asserts("Policy:pol:A", "requires", role)
    for role in (OWNER, CHANGE, RISK):
        policy.asserts("Policy:pol:B", "requires", role)
    policy.send()
    return ledger


def test_approvals_count_distinct_roles_with_every_path(chapter_graph: Ledger) -> None:
    result = chapter_graph.query("approvals-required-for", CONNECTOR)
    assert {r.entity for r in result.results} == {OWNER, RISK, CHANGE}
    assert len(result.paths) == 7, "seven service-to-role paths, as in the worked example"
    assert result.counts.edges_unique == 13
    assert result.counts.nodes_unique == 11
    assert all(edge_id in result.edges for path in result.paths for edge_id in path.edges)
    assert result.disposition == "answer" and not result.truncated


def test_dependents_of_with_depth(ledger: Ledger) -> None:
    ledger.change("cmdb").asserts(REPORTS, "depends_on", CONNECTOR).asserts(DASH, "depends_on", REPORTS).send()
    assert {r.entity for r in ledger.query("dependents-of", CONNECTOR).results} == {REPORTS}
    assert {r.entity for r in ledger.query("dependents-of", CONNECTOR, depth=2).results} == {REPORTS, DASH}


def test_max_expansions_truncates_with_a_frontier_and_never_says_none(chapter_graph: Ledger) -> None:
    result = chapter_graph.query("approvals-required-for", CONNECTOR, limits=Limits(max_expansions=2))
    assert result.truncated and result.limits_hit == ["max_expansions"]
    assert result.frontier
    assert result.counts.edges_read == 2
    assert result.disposition == "unknown"


def test_max_paths_and_max_degree_are_reported(chapter_graph: Ledger) -> None:
    few_paths = chapter_graph.query("approvals-required-for", CONNECTOR, limits=Limits(max_paths=3))
    assert len(few_paths.paths) == 3 and "max_paths" in few_paths.limits_hit
    narrow = chapter_graph.query("dependents-of", CONNECTOR, limits=Limits(max_degree=2))
    assert len(narrow.results) == 2 and "max_degree" in narrow.limits_hit
    assert narrow.frontier[0].node == CONNECTOR


def test_max_paths_puts_every_answer_it_cut_on_the_frontier(ledger: Ledger) -> None:
    hub = ledger.change("cmdb")
    services = [f"Service:cmdb:H{n}" for n in range(1, 8)]
    for service in services:
        hub.asserts(service, "depends_on", CONNECTOR)
    hub.send()
    result = ledger.query("dependents-of", CONNECTOR, limits=Limits(max_paths=3))
    returned = {r.entity for r in result.results}
    assert len(returned) == 3 and result.limits_hit == ["max_paths"]
    assert {node.node for node in result.frontier} == set(services) - returned
    assert {(node.depth, node.reason) for node in result.frontier} == {(1, "max_paths")}


def test_evidence_budget_omits_evidence_and_says_so(chapter_graph: Ledger) -> None:
    result = chapter_graph.query("dependents-of", CONNECTOR, limits=Limits(max_evidence_tokens=8))
    omitted = [e for e in result.edges.values() if e.evidence_omitted]
    assert omitted and all(e.evidence is None for e in omitted)
    assert "max_evidence_tokens" in result.limits_hit and result.truncated


def test_max_depth_cuts_a_plan_that_needs_more_hops(chapter_graph: Ledger) -> None:
    result = chapter_graph.query("approvals-required-for", CONNECTOR, limits=Limits(max_depth=2))
    assert result.results == [] and "max_depth" in result.limits_hit
    assert result.disposition == "unknown"


def test_dispositions(chapter_graph: Ledger) -> None:
    assert chapter_graph.query("owners-of", "Policy:pol:A").disposition == "none"
    unknown = chapter_graph.query("owners-of", "Service:cmdb:NOPE")
    assert (unknown.disposition, unknown.anchor.resolution) == ("unknown", "unresolved")
    before = chapter_graph.query("owners-of", REPORTS, known_at="1990-01-01")
    assert before.disposition == "unknown", "an entity the ledger did not know yet is not an entity with no owner"


def test_filters_apply_at_each_edge_not_after(ledger: Ledger) -> None:
    ledger.change("cmdb").asserts(REPORTS, "depends_on", CONNECTOR, valid_to="2020-01-01").send()
    result = ledger.query("dependents-of", CONNECTOR)
    assert result.results == [] and result.counts.edges_read == 1
    assert result.disposition == "none"


def test_a_traversal_without_tenant_is_refused(chapter_graph: Ledger) -> None:
    engine = QueryEngine(chapter_graph.store, default_ontology())
    with pytest.raises(PlanRefused, match="tenant"):
        engine.run(QueryRequest("owners-of", "", REPORTS, 0, 0))


def test_another_tenant_sees_nothing(chapter_graph: Ledger) -> None:
    result = chapter_graph.query("dependents-of", CONNECTOR, tenant="globex")
    assert result.anchor.resolution == "unresolved" and result.results == []


def test_traverse_with_an_allowlist(chapter_graph: Ledger) -> None:
    from processors.query_requests import parse_edge_allowlist

    result = chapter_graph.query("traverse", CONNECTOR, edges=parse_edge_allowlist("depends_on:in,owned_by:out"),
                                 limits=Limits(max_depth=2))
    assert {r.entity for r in result.results} == {REPORTS, DASH, ETL, ANA, PLAT}


def test_changed_between_in_valid_and_transaction_time(ledger: Ledger) -> None:
    from schemas.times import parse_micros

    ledger.at("2026-05-03T00:00:00Z").change("cmdb").asserts(REPORTS, "owned_by", ANA).send()
    ledger.at("2026-06-01T00:00:00Z").change("cmdb").asserts(REPORTS, "owned_by", PLAT, "2026-04-01").send()
    world = ledger.query("changed-between", REPORTS, changed_from=parse_micros("2026-03-01"),
                         changed_to=parse_micros("2026-05-01"))
    assert {c.change for c in world.changes} == {"started", "ended"}
    learned = ledger.query("changed-between", REPORTS, changed_from=parse_micros("2026-05-15"),
                           changed_to=parse_micros("2026-06-15"), axis="tx")
    assert {c.change for c in learned.changes} == {"appended", "closed"}


def test_a_past_changed_between_is_the_same_answer_after_later_writes(ledger: Ledger) -> None:
    from schemas.times import parse_micros

    ledger.at("2026-05-03T00:00:00Z").change("cmdb").asserts(REPORTS, "owned_by", ANA).send()
    window = {"changed_from": parse_micros("2026-01-01"), "changed_to": parse_micros("2026-12-01")}
    before = ledger.query("changed-between", REPORTS, known_at="2026-05-04T00:00:00Z", **window)
    ledger.at("2026-06-01T00:00:00Z").change("cmdb").asserts(REPORTS, "depends_on", DASH).send()
    after = ledger.query("changed-between", REPORTS, known_at="2026-05-04T00:00:00Z", **window)
    assert after.counts == before.counts and after.changes == before.changes
    assert ledger.query("changed-between", REPORTS, **window).counts.edges_read == before.counts.edges_read + 1


def test_changed_between_is_bounded_by_every_ceiling(ledger: Ledger) -> None:
    change = ledger.at("2026-05-03T00:00:00Z").change("cmdb")
    for service in (REPORTS, ETL, DASH):
        change.asserts(service, "depends_on", CONNECTOR, "2026-04-01")
    change.send()
    window = {"changed_from": parse_micros("2026-03-01"), "changed_to": parse_micros("2026-06-01")}
    whole = ledger.query("changed-between", CONNECTOR, **window)
    assert len(whole.changes) == 3 and not whole.truncated
    ceilings = ((Limits(max_expansions=2), "max_expansions", 2), (Limits(max_degree=2), "max_degree", 3),
                (Limits(max_paths=2), "max_paths", 3))
    for limits, ceiling, read in ceilings:
        cut = ledger.query("changed-between", CONNECTOR, limits=limits, **window)
        assert (len(cut.changes), cut.limits_hit, cut.counts.edges_read) == (2, [ceiling], read), ceiling
        assert cut.truncated and [(node.node, node.reason) for node in cut.frontier] == [(CONNECTOR, ceiling)]


def test_changed_between_keeps_every_change_of_the_neighbours_its_degree_cap_admits(ledger: Ledger) -> None:
    ledger.at("2026-05-01T00:00:00Z").change("cmdb").asserts(REPORTS, "depends_on", CONNECTOR, "2026-01-01").send()
    ledger.at("2026-05-02T00:00:00Z").change("cmdb").asserts(ETL, "depends_on", CONNECTOR).send()
    ledger.at("2026-05-03T00:00:00Z").change("cmdb").asserts(REPORTS, "depends_on", CONNECTOR, "2026-03-01",
                                                             evidence="traced").send()
    window = {"changed_from": parse_micros("2026-04-01"), "axis": "tx"}
    whole = ledger.query("changed-between", CONNECTOR, **window)
    reports = [c for c in whole.changes if whole.edges[c.edge_id].src == REPORTS]
    assert len(reports) == 4, "appended, closed, and the remainder and the new fact appended"
    capped = ledger.query("changed-between", CONNECTOR, limits=Limits(max_degree=1), **window)
    assert capped.changes == reports and capped.limits_hit == ["max_degree"]


def test_changed_between_lists_changes_in_time_order(ledger: Ledger) -> None:
    moment = ledger.at("2026-05-03T00:00:00Z")
    moment.change("cmdb").asserts(REPORTS, "depends_on", CONNECTOR).send()
    moment.change("cmdb").asserts(ETL, "depends_on", CONNECTOR).send()  # a microsecond later, in the same second
    learned = ledger.query("changed-between", CONNECTOR, changed_from=parse_micros("2026-05-01"), axis="tx")
    assert [c.at for c in learned.changes] == ["2026-05-03T00:00:00Z", "2026-05-03T00:00:00.000001Z"]


def test_alias_and_canonical_id_give_the_same_paths(chapter_graph: Ledger) -> None:
    chapter_graph.send({"kind": "alias", "event_id": "al-1", "tenant": "acme", "entity": CONNECTOR,
                        "alias": "Settlement Connector", "actor": "alice"})
    by_alias = chapter_graph.query("approvals-required-for", "settlement-connector")
    by_id = chapter_graph.query("approvals-required-for", CONNECTOR)
    assert by_alias.anchor.resolution == "alias"
    assert by_alias.paths == by_id.paths


# -- anchors: identifier, Type:name, and names that hold a colon -------------------------------------------
WRITER = "Component:cmdb:C2"


@pytest.fixture
def colon_names(ledger: Ledger) -> Ledger:
    """A component named "Ledger: Writer", a Service and a Component both called "billing", and a component
    named "Service: Gateway" (no service is called gateway)."""
    change = ledger.at("2026-03-01T00:00:00Z").change("cmdb")
    change.event["assert"] += [
        {"src": {"type": "Component", "id": "cmdb:C2", "name": "Ledger: Writer"}, "rel": "owned_by",
         "dst": {"type": "Team", "id": "hr:T-PLAT"}},
        {"src": {"type": "Service", "id": "cmdb:S7", "name": "billing"}, "rel": "owned_by",
         "dst": {"type": "Team", "id": "hr:T-ANA"}},
        {"src": {"type": "Component", "id": "cmdb:C7", "name": "billing"}, "rel": "owned_by",
         "dst": {"type": "Team", "id": "hr:T-ANA"}},
        {"src": {"type": "Component", "id": "cmdb:C8", "name": "Service: Gateway"}, "rel": "owned_by",
         "dst": {"type": "Team", "id": "hr:T-PLAT"}},
    ]
    change.send()
    return ledger


@pytest.mark.parametrize("text", ["Ledger: Writer", "ledger writer", "LEDGER:WRITER", "Component:Ledger: Writer"])
def test_a_name_with_a_colon_resolves_as_a_whole(colon_names: Ledger, text: str) -> None:
    """"Ledger" is no entity type, so "Ledger: Writer" is a name, not Type:name."""
    result = colon_names.query("owners-of", text)
    assert (result.anchor.resolution, result.anchor.entity) == ("alias", WRITER)
    assert [r.entity for r in result.results] == [PLAT] and result.disposition == "answer"


def test_type_id_and_type_name_resolve_as_before(colon_names: Ledger) -> None:
    def anchor(text: str) -> tuple[str, str | None, list[str]]:
        found = colon_names.query("owners-of", text).anchor
        return found.resolution, found.entity, found.candidates

    assert anchor(WRITER) == ("identifier", WRITER, [])
    assert anchor("billing") == ("ambiguous", None, ["Component:cmdb:C7", "Service:cmdb:S7"])
    assert anchor("Service:billing") == ("alias", "Service:cmdb:S7", [])
    assert anchor("Component:billing") == ("alias", "Component:cmdb:C7", [])
    assert anchor("Team:Ledger: Writer") == ("unresolved", None, []), "a type narrows: no team has that name"
    assert anchor("Service:cmdb:NOPE") == ("unresolved", None, [])


def test_a_name_that_starts_with_a_type_falls_back_to_the_whole_text(colon_names: Ledger) -> None:
    """No service is called "Gateway", so "Service: Gateway" is the component's name."""
    result = colon_names.query("owners-of", "Service: Gateway")
    assert (result.anchor.resolution, result.anchor.entity) == ("alias", "Component:cmdb:C8")


def test_a_type_the_readers_ontology_does_not_know_is_still_tried_after_the_whole_text(colon_names: Ledger) -> None:
    """Data loaded under another ontology than the reader's: its Type:name resolves as it did before."""
    from processors.queries import resolve_anchor

    def anchor(text: str) -> tuple[str, str | None]:
        found = resolve_anchor(colon_names.store, "acme", text, parse_micros(FAR_FUTURE), entity_types=())
        return found.resolution, found.entity

    assert anchor("Component:Ledger: Writer") == ("alias", WRITER)
    assert anchor("Service:billing") == ("alias", "Service:cmdb:S7")
    assert anchor("Ledger: Writer") == ("alias", WRITER)


def test_a_capped_walk_stops_reading_a_hub_at_its_budget(ledger: Ledger) -> None:
    change = ledger.at("2026-03-01T00:00:00Z").change("cmdb")
    for i in range(500):
        change.asserts(f"Service:cmdb:S{i}", "depends_on", CONNECTOR)
    change.send()
    decoded = []

    class CountingReader:
        def __getattr__(self, name):
            return getattr(ledger.store, name)

        def iter_adjacent(self, *args):
            for version in ledger.store.iter_adjacent(*args):
                decoded.append(version)
                yield version

    engine = QueryEngine(CountingReader(), default_ontology())
    from schemas.times import parse_micros

    now = parse_micros("2030-01-01")
    result = engine.run(QueryRequest("dependents-of", "acme", CONNECTOR, now, now, Limits(max_expansions=20)))
    assert result.truncated and result.counts.edges_read == 20
    assert len(decoded) == 21, "the record that trips the budget is the last one decoded"


# -- max_depth is a ceiling for every traversal, traverse included ---------------------------------------
SERVICE = "Service:cmdb:S1"
COMPONENTS = ["Component:cmdb:C1", "Component:cmdb:C2", "Component:cmdb:C3", "Component:cmdb:C4"]
DEPENDENTS = {"traverse": {"edges": (("depends_on", "in"),)}, "dependents-of": {"depth": 5}}
"""The same walk asked two ways: reverse depends_on until max_depth stops it."""


def chain(ledger: Ledger, length: int) -> Ledger:
    """C<length> -depends_on-> ... -> C1 -depends_on-> S1."""
    change = ledger.at("2026-03-01T00:00:00Z").change("cmdb")
    below = SERVICE
    for component in COMPONENTS[:length]:
        change.asserts(component, "depends_on", below)
        below = component
    change.send()
    return ledger


@pytest.mark.parametrize("name", sorted(DEPENDENTS))
def test_a_chain_longer_than_max_depth_is_cut_and_says_so(ledger: Ledger, name: str) -> None:
    result = chain(ledger, 3).query(name, SERVICE, limits=Limits(max_depth=2), **DEPENDENTS[name])
    assert [r.entity for r in result.results] == COMPONENTS[:2]
    assert result.truncated and result.limits_hit == ["max_depth"]
    assert [(f.node, f.depth, f.reason) for f in result.frontier] == [(COMPONENTS[1], 2, "max_depth")]
    assert result.disposition == "answer" and "ceiling" in result.coverage.note


@pytest.mark.parametrize("name", sorted(DEPENDENTS))
def test_a_chain_exactly_max_depth_long_is_reported_cut_as_the_walk_reads_nothing_past_the_ceiling(
        ledger: Ledger, name: str) -> None:
    """Nothing depends on C2, but knowing that means reading C2's adjacency, one hop past max_depth. The walk
    does not, so it cannot tell this chain from a longer one: it says where it stopped ("there may be more"),
    and the answer does not depend on the adjacency it did not read (what keeps the cache exact)."""
    chain(ledger, 2)
    asked = QueryRequest(name, "acme", SERVICE, parse_micros(FAR_FUTURE), parse_micros(FAR_FUTURE),
                         Limits(max_depth=2), **DEPENDENTS[name])
    result, read_set = ledger.engine.run_with_read_set(asked)
    assert [r.entity for r in result.results] == COMPONENTS[:2]
    assert result.truncated and result.limits_hit == ["max_depth"]
    assert [(f.node, f.depth) for f in result.frontier] == [(COMPONENTS[1], 2)]
    assert result.counts.edges_read == 2
    assert (COMPONENTS[1], "depends_on", "in") not in read_set


@pytest.mark.parametrize("name", sorted(DEPENDENTS))
def test_a_chain_shorter_than_max_depth_is_complete(ledger: Ledger, name: str) -> None:
    result = chain(ledger, 1).query(name, SERVICE, limits=Limits(max_depth=2), **DEPENDENTS[name])
    assert [r.entity for r in result.results] == COMPONENTS[:1]
    assert not result.truncated and result.limits_hit == [] and result.frontier == []
    assert result.disposition == "answer" and result.coverage.note == "complete within the stated limits"


@pytest.mark.parametrize("name", sorted(DEPENDENTS))
def test_a_walk_from_the_end_of_a_chain_is_none(ledger: Ledger, name: str) -> None:
    result = chain(ledger, 2).query(name, COMPONENTS[1], limits=Limits(max_depth=2), **DEPENDENTS[name])
    assert result.results == [] and not result.truncated and result.disposition == "none"


@pytest.mark.parametrize("max_depth", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("length", [1, 2, 3, 4])
def test_traverse_and_dependents_of_agree_on_where_max_depth_cuts(ledger: Ledger, length: int,
                                                                  max_depth: int) -> None:
    chain(ledger, length)
    walked, dependents = (ledger.query(name, SERVICE, limits=Limits(max_depth=max_depth), **DEPENDENTS[name])
                          for name in ("traverse", "dependents-of"))
    same = {"results", "paths", "edges", "counts", "disposition", "truncated", "limits_hit", "frontier", "coverage"}
    assert walked.model_dump(include=same) == dependents.model_dump(include=same)
    assert walked.truncated == (length >= max_depth)


def test_dependents_of_reaching_its_own_depth_is_not_truncation(ledger: Ledger) -> None:
    """``depth`` is how far the question goes; max_depth only cuts when the plan would go further."""
    result = chain(ledger, 3).query("dependents-of", SERVICE, depth=2, limits=Limits(max_depth=2))
    assert [r.entity for r in result.results] == COMPONENTS[:2]
    assert not result.truncated and result.frontier == []
