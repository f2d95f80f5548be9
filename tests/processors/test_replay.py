"""Traces affected by later corrections, action-bearing first; omitted edge ids are re-derived."""

from typing import Any

from processors.replay import affected_traces
from tests.support.harness import Ledger

CONNECTOR, ANA, PLAT = "Component:cmdb:CI0042", "Team:hr:T-ANA", "Team:hr:T-PLAT"
SVC_A, SVC_B = "Service:cmdb:S1", "Service:cmdb:S2"


def trace(trace_id: str, edge_ids: list[str] | None, action: str, known_at: str,
          query: dict[str, Any] | None = None) -> dict:
    event = {"kind": "trace", "event_id": f"tr-{trace_id}", "tenant": "acme", "trace_id": trace_id,
             "query": query or {"name": "owners-of", "entity": CONNECTOR}, "valid_at": known_at,
             "known_at": known_at, "action": action}
    if edge_ids is not None:
        event["edge_ids"] = edge_ids
    return event


def affected(ledger: Ledger) -> list:
    return affected_traces(ledger.store.traces("acme"), lambda e: ledger.store.version("acme", e), ledger.engine)


def owned_by_analytics_then_corrected(ledger: Ledger, *traces: dict) -> str:
    """Analytics owns the connector from March; the traces are recorded on 22 April; on 3 May the
    catalogue learns Platform has owned it since 1 April. Returns the Analytics edge id."""
    ledger.at("2026-03-01T00:00:00Z").change("cmdb").asserts(CONNECTOR, "owned_by", ANA).send()
    (analytics,) = ledger.believed(CONNECTOR, "owned_by")
    ledger.at("2026-04-22T12:00:00Z").send(*traces)
    ledger.at("2026-05-03T00:00:00Z").change("cmdb").asserts(CONNECTOR, "owned_by", PLAT, "2026-04-01").send()
    return analytics.edge_id


def test_traces_that_used_a_corrected_edge_are_found_action_bearing_first(ledger: Ledger) -> None:
    ledger.at("2026-03-01T00:00:00Z").change("cmdb").asserts(CONNECTOR, "owned_by", ANA).send()
    (analytics,) = ledger.believed(CONNECTOR, "owned_by")
    ledger.at("2026-04-22T00:00:00Z").send(
        trace("lookup", [analytics.edge_id], "none", "2026-04-21T00:00:00Z"),
        trace("routed", [analytics.edge_id], "approval_routing", "2026-04-22T00:00:00Z"),
        trace("no-edges", [], "approval_routing", "2026-04-22T00:00:00Z"),
    )
    assert affected(ledger) == []
    ledger.at("2026-05-03T00:00:00Z").change("cmdb").asserts(CONNECTOR, "owned_by", PLAT, "2026-04-01").send()
    found = affected(ledger)
    assert [a.trace.trace_id for a in found] == ["routed", "lookup"]
    assert found[0].corrected[0].edge_id == analytics.edge_id
    assert {a.edge_ids_source for a in found} == {"recorded"}


def test_a_trace_without_edge_ids_has_them_re_derived_and_is_found_affected(ledger: Ledger) -> None:
    analytics = owned_by_analytics_then_corrected(
        ledger, trace("routed", None, "approval_routing", "2026-04-22T10:14:00Z"))
    (found,) = affected(ledger)
    assert found.trace.trace_id == "routed" and found.status == "affected"
    assert found.edge_ids_source == "re-derived"
    assert found.edge_ids == (analytics,)
    assert [v.edge_id for v in found.corrected] == [analytics]


def test_re_derived_and_recorded_ids_are_judged_alike(ledger: Ledger) -> None:
    analytics = owned_by_analytics_then_corrected(
        ledger,
        trace("omitted", None, "approval_routing", "2026-04-22T10:14:00Z"),
        trace("recorded", [], "approval_routing", "2026-04-22T10:14:00Z"),
    )
    ledger.send(trace("given", [analytics], "approval_routing", "2026-04-22T10:14:00Z"))
    by_id = {a.trace.trace_id: a for a in affected(ledger)}
    assert set(by_id) == {"omitted", "given"}  # an explicit empty list is recorded, not re-derived
    assert by_id["omitted"].corrected == by_id["given"].corrected


def test_a_re_derived_trace_whose_answer_was_not_corrected_is_not_affected(ledger: Ledger) -> None:
    owned_by_analytics_then_corrected(ledger)
    ledger.change("cmdb").asserts(SVC_A, "depends_on", SVC_B).send()
    ledger.at("2026-05-04T00:00:00Z").send(
        # As known on 3 May after the correction: the answer already used the corrected belief.
        trace("after", None, "approval_routing", "2026-05-03T12:00:00Z"),
        trace("other-entity", None, "permission_change", "2026-05-03T12:00:00Z",
              {"name": "dependents-of", "entity": SVC_B}),
    )
    assert affected(ledger) == []


def test_a_trace_whose_query_cannot_be_re_run_is_listed_with_its_reason(ledger: Ledger) -> None:
    bad: dict[str, dict[str, Any]] = {
        "unknown-name": {"name": "best-friends", "entity": CONNECTOR},
        "no-anchor": {"name": "owners-of", "entity": "Component:cmdb:NOPE"},
        "bad-depth": {"name": "dependents-of", "entity": CONNECTOR, "depth": "two"},
        "bad-limit": {"name": "owners-of", "entity": CONNECTOR, "limits": {"max_paths": 0}},
        "unknown-field": {"name": "owners-of", "entity": CONNECTOR, "colour": "blue"},
        "no-edges": {"name": "traverse", "entity": CONNECTOR},
    }
    owned_by_analytics_then_corrected(
        ledger, *(trace(name, None, "none", "2026-04-22T10:14:00Z", query) for name, query in bad.items()))
    ledger.at("2026-05-04T00:00:00Z").send(trace("future", None, "none", "2026-06-01T00:00:00Z"))
    found = {a.trace.trace_id: a for a in affected(ledger)}
    assert set(found) == {*bad, "future"}
    assert {a.edge_ids_source for a in found.values()} == {"unknown"}
    assert all(a.corrected == () and a.edge_ids == () for a in found.values())
    reasons = {name: a.status for name, a in found.items()}
    assert all(status.startswith("edge_ids unknown: ") for status in reasons.values())
    assert "unknown query 'best-friends'" in reasons["unknown-name"]
    assert "did not resolve as of known_at" in reasons["no-anchor"]
    assert "depth: Input should be a valid integer" in reasons["bad-depth"]
    assert "max_paths: Input should be greater than or equal to 1" in reasons["bad-limit"]
    assert "unknown field(s): colour" in reasons["unknown-field"]
    assert "edges: Field required" in reasons["no-edges"]
    assert "after the ledger recorded the trace" in reasons["future"]


def test_ranking_puts_action_bearing_first_whatever_the_edge_ids_source(ledger: Ledger) -> None:
    analytics = owned_by_analytics_then_corrected(
        ledger,
        trace("lookup-derived", None, "none", "2026-04-20T00:00:00Z"),
        trace("routed-unknown", None, "approval_routing", "2026-04-22T00:00:00Z", {"name": "nope", "entity": "x"}),
        trace("lookup-unknown", None, "none", "2026-04-19T00:00:00Z", {"name": "nope", "entity": "x"}),
        trace("routed-derived", None, "external_change", "2026-04-21T00:00:00Z"),
    )
    ledger.send(trace("routed-recorded", [analytics], "permission_change", "2026-04-22T06:00:00Z"))
    assert [a.trace.trace_id for a in affected(ledger)] == [
        "routed-derived", "routed-unknown", "routed-recorded", "lookup-unknown", "lookup-derived"]


def test_a_recorded_query_object_with_limits_and_params_is_re_run_with_them(ledger: Ledger) -> None:
    ledger.at("2026-03-01T00:00:00Z").change("cmdb").asserts(SVC_A, "depends_on", CONNECTOR).asserts(
        SVC_B, "depends_on", CONNECTOR).send()
    # The shape of a query result's own `query` object, limits and params included.
    recorded = {"name": "dependents-of", "tenant": "acme", "entity": CONNECTOR,
                "limits": {"max_depth": 6, "max_expansions": 200, "max_paths": 1, "max_evidence_tokens": 2000,
                           "max_degree": 50},
                "params": {"depth": 1}}
    ledger.at("2026-04-22T12:00:00Z").send(
        trace("capped", None, "approval_routing", "2026-04-22T10:00:00Z", recorded),
        trace("default", None, "approval_routing", "2026-04-22T10:00:00Z",
              {"name": "dependents-of", "entity": CONNECTOR}),
    )
    ledger.at("2026-05-03T00:00:00Z").change("cmdb").retracts(SVC_A, "depends_on", CONNECTOR, "2026-04-01").retracts(
        SVC_B, "depends_on", CONNECTOR, "2026-04-01").send()
    found = {a.trace.trace_id: a for a in affected(ledger)}
    assert len(found["capped"].edge_ids) == 1  # max_paths 1, as recorded
    assert len(found["default"].edge_ids) == 2  # the query command's default limits
    assert {a.edge_ids_source for a in found.values()} == {"re-derived"}


def test_a_recorded_query_is_refused_where_the_cli_and_the_api_would_refuse_it(ledger: Ledger) -> None:
    """The recorded parameters are validated as the CLI's and the HTTP API's are: a parameter of another
    query, an entity type the ontology lacks or a ceiling beyond the API's is a reason, not a re-run."""
    bad: dict[str, dict[str, Any]] = {
        "other-query's": {"name": "owners-of", "entity": CONNECTOR, "params": {"depth": 2}},
        "unknown-type": {"name": "owners-of", "entity": CONNECTOR, "params": {"node_types": ["Gadget"]}},
        "over-ceiling": {"name": "owners-of", "entity": CONNECTOR, "limits": {"max_expansions": 100_001}},
        "text-for-int": {"name": "dependents-of", "entity": CONNECTOR, "depth": "2"},
    }
    owned_by_analytics_then_corrected(
        ledger, *(trace(name, None, "none", "2026-04-22T10:14:00Z", query) for name, query in bad.items()))
    reasons = {a.trace.trace_id: a.status for a in affected(ledger)}
    assert "depth: owners-of takes no such parameter" in reasons["other-query's"]
    assert "types: unknown entity type(s) Gadget" in reasons["unknown-type"]
    assert "max_expansions: Input should be less than or equal to 100000" in reasons["over-ceiling"]
    assert "depth: Input should be a valid integer" in reasons["text-for-int"]
