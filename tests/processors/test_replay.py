"""Traces affected by later corrections, action-bearing first."""

from processors.replay import affected_traces
from tests.harness import Ledger

CONNECTOR, ANA, PLAT = "Component:cmdb:CI0042", "Team:hr:T-ANA", "Team:hr:T-PLAT"


def trace(trace_id: str, edge_ids: list[str], action: str, known_at: str) -> dict:
    return {"kind": "trace", "event_id": f"tr-{trace_id}", "tenant": "acme", "trace_id": trace_id,
            "query": {"name": "owners-of", "entity": CONNECTOR}, "valid_at": known_at, "known_at": known_at,
            "edge_ids": edge_ids, "action": action}


def test_traces_that_used_a_corrected_edge_are_found_action_bearing_first(ledger: Ledger) -> None:
    ledger.at("2026-03-01T00:00:00Z").change("cmdb").asserts(CONNECTOR, "owned_by", ANA).send()
    (analytics,) = ledger.believed(CONNECTOR, "owned_by")
    ledger.at("2026-04-22T00:00:00Z").send(
        trace("lookup", [analytics.edge_id], "none", "2026-04-21T00:00:00Z"),
        trace("routed", [analytics.edge_id], "approval_routing", "2026-04-22T00:00:00Z"),
        trace("no-edges", [], "approval_routing", "2026-04-22T00:00:00Z"),
    )
    assert affected_traces(ledger.store.traces("acme"), lambda e: ledger.store.version("acme", e)) == []
    ledger.at("2026-05-03T00:00:00Z").change("cmdb").asserts(CONNECTOR, "owned_by", PLAT, "2026-04-01").send()
    found = affected_traces(ledger.store.traces("acme"), lambda e: ledger.store.version("acme", e))
    assert [a.trace.trace_id for a in found] == ["routed", "lookup"]
    assert found[0].corrected[0].edge_id == analytics.edge_id
