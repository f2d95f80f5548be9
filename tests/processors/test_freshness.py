"""Freshness: lag measured once per fact, silence on transaction time, stale/fresh transitions
emitted once each (also across a restart), and queries over a stale source's edges answering
"unknown" rather than "none"."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest

from processors.freshness import (
    FOURTEEN_DAYS_SECONDS,
    LAG_BUCKETS_SECONDS,
    FreshnessMonitor,
    bucket_bounds,
    exponential_buckets,
    histogram_quantile,
    stale_sources,
    stale_sources_for_queries,
)
from processors.model import SourceActivity
from processors.queries import QueryEngine, QueryRequest
from schemas.ontology import default_ontology
from schemas.slo import SloConfig, SourceSlo, SourceStatus, default_slo, load_slo
from schemas.times import parse_micros
from state.freshness_store import FreshnessStore
from tests.support.harness import FAR_FUTURE, Ledger

ROOT = Path(__file__).resolve().parents[2]
CMDB_ONLY = SloConfig(sources={"cmdb": SourceSlo(max_silence_seconds=600, max_p99_lag_seconds=60)})


def heartbeat(ledger: Ledger, system: str, detected_at: str, event_id: str) -> None:
    ledger.send({"kind": "heartbeat", "event_id": event_id, "tenant": ledger.tenant, "source": {"system": system},
                 "detected_at": detected_at})


def at(text: str) -> int:
    return parse_micros(text)


@pytest.fixture
def cmdb_ledger() -> Ledger:
    """CI1 is owned by Analytics; CI2 exists (it depends on CI1) but has no owner. Last heard 09:00."""
    ledger = Ledger()
    ledger.at("2026-03-01T09:00:00Z").change("cmdb", "ci/CI2", detected_at="2026-03-01T08:59:00Z").asserts(
        "Component:cmdb:CI1", "owned_by", "Team:hr:T-ANA").asserts(
        "Component:cmdb:CI2", "depends_on", "Component:cmdb:CI1").send()
    return ledger


# -- staleness and transitions --------------------------------------------------------------------------------
def test_a_silent_source_goes_stale_after_its_slo_and_fresh_on_its_next_heartbeat(cmdb_ledger: Ledger) -> None:
    monitor = FreshnessMonitor("acme", CMDB_ONLY)

    def evaluate(now: str) -> list[tuple[str, str | None, str]]:
        activity = cmdb_ledger.store.source_activity("acme")
        return [(t.source, t.previous, t.status) for t in monitor.evaluate(activity, at(now))]

    assert evaluate("2026-03-01T09:05:00Z") == [("cmdb", None, "fresh")]
    assert evaluate("2026-03-01T09:10:00Z") == []  # exactly max_silence: not yet past it
    assert monitor.stale() == set()
    assert evaluate("2026-03-01T09:10:00.000001Z") == [("cmdb", "fresh", "stale")]
    assert monitor.stale() == {"cmdb"}
    assert evaluate("2026-03-01T09:20:00Z") == []
    assert evaluate("2026-03-01T11:00:00Z") == []

    cmdb_ledger.at("2026-03-01T11:30:00Z")
    heartbeat(cmdb_ledger, "cmdb", "2026-03-01T11:29:59Z", "hb-1")
    assert evaluate("2026-03-01T11:30:01Z") == [("cmdb", "stale", "fresh")]
    assert monitor.stale() == set()
    assert evaluate("2026-03-01T11:35:00Z") == []
    assert evaluate("2026-03-01T11:40:01Z") == [("cmdb", "fresh", "stale")]


def test_silence_is_measured_on_transaction_time_not_on_the_sources_detected_at(cmdb_ledger: Ledger) -> None:
    """A heartbeat the source dates a day back still proves it talked to us at 12:00."""
    cmdb_ledger.at("2026-03-01T12:00:00Z")
    heartbeat(cmdb_ledger, "cmdb", "2026-02-28T12:00:00Z", "hb-old-clock")
    activity = cmdb_ledger.store.source_activity("acme")
    assert stale_sources(activity, CMDB_ONLY, at("2026-03-01T12:05:00Z")) == set()
    assert stale_sources(activity, CMDB_ONLY, at("2026-03-01T12:10:01Z")) == {"cmdb"}


def test_a_source_never_heard_from_is_stale_and_one_without_an_slo_is_not_judged() -> None:
    activity = {"crm": SourceActivity("acme", "crm", last_change_tx=at("2026-01-01"))}
    assert stale_sources(activity, default_slo(), at("2026-01-01")) == {"cmdb", "hr", "policy"}


def test_transitions_survive_a_restart_exactly_once(cmdb_ledger: Ledger) -> None:
    store = FreshnessStore(cmdb_ledger.kv)
    activity = cmdb_ledger.store.source_activity("acme")
    first = store.monitor("acme", CMDB_ONLY)
    store.record(first.evaluate(activity, at("2026-03-01T09:05:00Z")))
    store.record(first.evaluate(activity, at("2026-03-01T09:30:00Z")))

    restarted = store.monitor("acme", CMDB_ONLY)
    assert restarted.statuses == {"cmdb": "stale"}
    assert restarted.evaluate(activity, at("2026-03-01T09:31:00Z")) == []
    assert store.statuses("other-tenant") == {}


def test_a_transition_becomes_a_source_status_event(cmdb_ledger: Ledger) -> None:
    monitor = FreshnessMonitor("acme", CMDB_ONLY, {"cmdb": "fresh"})
    [transition] = monitor.evaluate(cmdb_ledger.store.source_activity("acme"), at("2026-03-01T09:15:00Z"))
    event = json.loads(transition.to_event().model_dump_json())
    assert event == {"kind": "source_status", "tenant": "acme", "source": "cmdb", "status": "stale",
                     "previous": "fresh", "at": "2026-03-01T09:15:00Z", "last_heard_at": "2026-03-01T09:00:00Z",
                     "silence_seconds": 900.0, "max_silence_seconds": 600.0}
    assert SourceStatus.model_validate(event) == transition.to_event()


# -- coverage: unknown, not none ----------------------------------------------------------------------------------
def engine_at(ledger: Ledger, now: str, slo: SloConfig = CMDB_ONLY) -> QueryEngine:
    hook = stale_sources_for_queries(default_ontology(), slo, ledger.store.source_activity, lambda: at(now))
    return QueryEngine(ledger.store, default_ontology(), hook)


def owners_of(engine: QueryEngine, entity: str) -> tuple[str, list[str], list[str]]:
    result = engine.run(QueryRequest("owners-of", "acme", entity, at(FAR_FUTURE), at(FAR_FUTURE)))
    return result.disposition, result.coverage.stale_sources, [r.entity for r in result.results]


def test_an_empty_answer_over_a_stale_sources_edges_is_unknown_not_none(cmdb_ledger: Ledger) -> None:
    assert owners_of(engine_at(cmdb_ledger, "2026-03-01T09:05:00Z"), "Component:cmdb:CI2") == ("none", [], [])

    stale = engine_at(cmdb_ledger, "2026-03-01T09:30:00Z")
    disposition, stale_sources_listed, results = owners_of(stale, "Component:cmdb:CI2")
    assert (disposition, stale_sources_listed, results) == ("unknown", ["cmdb"], [])
    result = stale.run(QueryRequest("owners-of", "acme", "Component:cmdb:CI2", at(FAR_FUTURE), at(FAR_FUTURE)))
    assert "cmdb" in result.coverage.note and "unknown, not none" in result.coverage.note

    # an answer found over a stale source is still an answer, flagged as possibly out of date
    assert owners_of(stale, "Component:cmdb:CI1") == ("answer", ["cmdb"], ["Team:hr:T-ANA"])


def test_only_the_sources_of_the_relationships_a_query_reads_count(cmdb_ledger: Ledger) -> None:
    hr_is_silent = SloConfig(sources={"hr": SourceSlo(max_silence_seconds=60, max_p99_lag_seconds=60)})
    engine = engine_at(cmdb_ledger, "2026-03-01T09:30:00Z", hr_is_silent)
    assert owners_of(engine, "Component:cmdb:CI2") == ("none", [], [])
    hook = engine.stale_sources
    assert hook("acme", frozenset({"member_of", "owned_by"}), at(FAR_FUTURE)) == ["hr"]
    assert hook("acme", frozenset({"references", "other"}), at(FAR_FUTURE)) == []


def test_lag_buckets_grow_by_sqrt_2_from_10_ms_to_at_least_14_days() -> None:
    buckets = LAG_BUCKETS_SECONDS
    assert buckets[0] == 0.01 and buckets[-1] >= FOURTEEN_DAYS_SECONDS > buckets[-2]
    assert all(math.isclose(b / a, math.sqrt(2), rel_tol=1e-9) for a, b in itertools.pairwise(buckets))
    assert bucket_bounds(0.015) == (0.0141421356237, 0.02)
    assert bucket_bounds(1e9) == (buckets[-1], math.inf)
    with pytest.raises(ValueError, match="factor > 1"):
        exponential_buckets(1, 1, 10)


def test_histogram_quantile_interpolates_within_the_bucket_as_prometheus_does() -> None:
    """The same synthetic histogram as deploy/prometheus/rules_test.yml, and the same answers."""
    buckets = [(1.0, 50.0), (10.0, 90.0), (100.0, 100.0), (math.inf, 100.0)]
    assert [histogram_quantile(q, buckets) for q in (0.5, 0.95, 0.99)] == [1.0, 55.0, 91.0]
    assert histogram_quantile(0.5, [(1.0, 10.0), (math.inf, 20.0)]) == 1.0  # rank in +Inf: highest finite bound
    assert math.isnan(histogram_quantile(0.5, [(1.0, 0.0), (math.inf, 0.0)]))
    assert math.isnan(histogram_quantile(0.5, [(1.0, 5.0), (2.0, 5.0)]))


# -- configuration ----------------------------------------------------------------------------------------------------
def test_the_packaged_default_slo_is_the_deployed_one() -> None:
    assert load_slo(ROOT / "deploy" / "slo.json") == default_slo()
    assert set(default_slo().sources) == {"cmdb", "hr", "policy"}


def test_every_source_an_ontology_relationship_names_has_an_slo() -> None:
    named = {s for spec in default_ontology().relationships.values() for s in spec.sources}
    assert named == set(default_slo().sources)


@pytest.mark.parametrize(
    "document",
    [
        {"sources": {"cmdb": {"max_silence_seconds": 0, "max_p99_lag_seconds": 1}}},
        {"sources": {"cmdb": {"max_silence_seconds": "900", "max_p99_lag_seconds": 1}}},
        {"sources": {"cmdb": {"max_silence_seconds": 900}}},
        {"sources": {"cmdb": {"max_silence_seconds": 900, "max_p99_lag_seconds": 1, "typo": 1}}},
        {"sources": {"": {"max_silence_seconds": 900, "max_p99_lag_seconds": 1}}},
    ],
)
def test_a_bad_slo_file_is_refused(document: dict, tmp_path: Path) -> None:
    path = tmp_path / "slo.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match="is not a valid SLO file: sources"):
        load_slo(path)
