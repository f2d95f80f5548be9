"""The metrics registry: the fixed names the deploy files use, and what one committed batch counts."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request

import httpx
import pytest
import yaml
from fastapi import FastAPI
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from processors.batch import BatchRunner
from processors.freshness import LAG_BUCKETS_SECONDS
from processors.model import SourceActivity
from schemas.ontology import default_ontology
from schemas.results import QueryOut, QueryResult
from schemas.slo import default_slo
from state.kv import MemoryKV
from state.store import LedgerStore
from streams.metrics import BatchedHistogram, LedgerMetrics, metrics_asgi_app, serve_metrics
from streams.processor import make_processor
from tests.support.monitoring import APP_METRICS, DASHBOARD, RULES, metric_names

# A metric name in annotation text (the templates query the SLO gauges); expressions go through
# the PromQL tokenizer of the rules test.
METRIC_NAME = re.compile(r"(?<![\w:])edgeledger_\w+")
SERIES_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


def referenced_names() -> set[str]:
    """Every ``edgeledger_*`` series the rules (expressions and annotation queries) and the dashboard use."""
    rules = [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    names = {name for rule in rules for name in metric_names(rule["expr"])}
    names |= {name for rule in rules for text in rule.get("annotations", {}).values()
              for name in METRIC_NAME.findall(text)}
    names |= {name for target in _dashboard_targets(json.loads(DASHBOARD.read_text()))
              for name in metric_names(target["expr"])}
    return {name for name in names if name.startswith("edgeledger_")}


def _dashboard_targets(node: object) -> list[dict]:
    if isinstance(node, dict):
        found = [node] if isinstance(node.get("expr"), str) else []
        return found + [t for value in node.values() for t in _dashboard_targets(value)]
    if isinstance(node, list):
        return [t for item in node for t in _dashboard_targets(item)]
    return []


def exported(metrics: LedgerMetrics) -> dict[str, str]:
    """Series name as scraped -> the type of the metric family that exports it."""
    return {
        family.name + suffix: family.type
        for family in metrics.registry.collect()
        for suffix in SERIES_SUFFIXES[family.type]
    }


def test_every_metric_the_deploy_files_use_is_exported_with_its_type() -> None:
    series = exported(LedgerMetrics())
    names = referenced_names()
    assert len(names) >= 14
    missing = sorted(name for name in names if name not in series)
    assert missing == []
    for name, kind in APP_METRICS.items():
        scraped = name + SERIES_SUFFIXES[kind][0] if kind == "histogram" else name
        assert series.get(scraped) == kind, name


def test_the_registry_exports_nothing_else() -> None:
    families = {f.name + ("_total" if f.type == "counter" else "") for f in LedgerMetrics().registry.collect()}
    assert families == set(APP_METRICS)


def test_two_metric_sets_are_independent() -> None:
    first, second = LedgerMetrics(), LedgerMetrics()
    first.observe_cache(hit=True)
    assert second.registry.get_sample_value("edgeledger_cache_requests_total", {"result": "hit"}) is None


EVENTS = [
    {"kind": "clock", "now": "2026-03-01T09:00:00Z"},
    {"kind": "change", "event_id": "c-1", "tenant": "acme", "source": {"system": "cmdb", "record": "ci/CI1"},
     "detected_at": "2026-03-01T08:59:30Z",
     "assert": [{"src": {"type": "Component", "id": "cmdb:CI1"}, "rel": "owned_by",
                 "dst": {"type": "Team", "id": "hr:T-ANA"}}]},
    {"kind": "heartbeat", "event_id": "h-1", "tenant": "acme", "source": {"system": "hr"},
     "detected_at": "2026-03-01T08:59:59Z"},
    {"kind": "clock", "now": "2026-05-03T09:00:00Z"},
    {"kind": "change", "event_id": "c-2", "tenant": "acme", "source": {"system": "cmdb", "record": "ci/CI1"},
     "detected_at": "2026-05-03T08:00:00Z",
     "assert": [{"src": {"type": "Component", "id": "cmdb:CI1"}, "rel": "owned_by",
                 "dst": {"type": "Team", "id": "hr:T-PLAT"}, "valid_from": "2026-04-01"}]},
    {"kind": "change", "event_id": "c-2", "tenant": "acme", "source": {"system": "cmdb", "record": "ci/CI1"},
     "detected_at": "2026-05-03T08:00:00Z", "assert": []},
    {"kind": "change", "event_id": "c-3", "tenant": "acme", "source": {"system": "cmdb"},
     "detected_at": "2026-05-03T08:00:00Z",
     "assert": [{"src": {"type": "Component", "id": "cmdb:CI1"}, "rel": "no_such_rel",
                 "dst": {"type": "Team", "id": "hr:T-PLAT"}}]},
    {"kind": "revoke", "event_id": "r-1", "tenant": "acme", "edge_id": "nope", "reason": "bad"},
    {"kind": "gossip", "event_id": "g-1", "tenant": "acme"},
]


@pytest.fixture
def observed() -> LedgerMetrics:
    metrics = LedgerMetrics()
    store = LedgerStore(MemoryKV())

    def commit(pending) -> None:
        store.commit(pending)
        metrics.observe_commit(pending)

    lines = [json.dumps(event) for event in EVENTS] + ["{not json"]
    counts = BatchRunner(make_processor(default_ontology(), simulated_clock=True), store, commit, 3).run(lines)
    assert counts.balanced() and counts.events_read == len(lines)
    return metrics


def sample(metrics: LedgerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_a_commit_counts_events_by_source_kind_and_outcome(observed: LedgerMetrics) -> None:
    events = {
        (s.labels["source"], s.labels["kind"], s.labels["outcome"]): s.value
        for family in text_string_to_metric_families(observed.scrape().decode())
        if family.name == "edgeledger_events"
        for s in family.samples if s.name == "edgeledger_events_total"
    }
    assert events == {
        ("none", "clock", "applied"): 2,
        ("cmdb", "change", "applied"): 2,
        ("hr", "heartbeat", "applied"): 1,
        ("cmdb", "change", "duplicate"): 1,
        ("cmdb", "change", "dead_lettered"): 1,  # failed at apply: the event was parsed, its source is known
        ("none", "revoke", "dead_lettered"): 1,  # a revocation by edge id names no source
        ("unknown", "unknown", "dead_lettered"): 2,  # an unknown kind and malformed JSON
    }


def test_lag_is_observed_once_per_asserted_fact(observed: LedgerMetrics) -> None:
    """Three versions were appended (A0, then the remainder A1 and the new P1); the remainder is
    not measured again."""
    assert sample(observed, "edgeledger_freshness_lag_seconds_count", source="cmdb") == 2
    assert sample(observed, "edgeledger_freshness_lag_seconds_sum", source="cmdb") == 30 + 3600
    assert sample(observed, "edgeledger_freshness_lag_seconds_bucket", source="cmdb", le="40.96") == 1


def test_corrections_and_last_seen_times_by_source(observed: LedgerMetrics) -> None:
    assert sample(observed, "edgeledger_corrections_total", source="cmdb") == 1
    assert sample(observed, "edgeledger_source_last_event_timestamp_seconds", source="cmdb") == 1_777_798_800
    heartbeat = sample(observed, "edgeledger_source_last_heartbeat_timestamp_seconds", source="hr")
    assert heartbeat == pytest.approx(1_772_355_600, abs=1e-3)  # 1 µs after the change at 09:00
    assert sample(observed, "edgeledger_source_last_heartbeat_timestamp_seconds", source="cmdb") is None


def test_source_status_slo_and_levels() -> None:
    metrics = LedgerMetrics()
    metrics.set_slo(default_slo())
    assert sample(metrics, "edgeledger_source_slo_max_silence_seconds", source="cmdb") == 900
    assert sample(metrics, "edgeledger_source_slo_max_p99_lag_seconds", source="hr") == 3600

    activities = [SourceActivity("acme", "cmdb", last_change_tx=5_000_000, last_heartbeat_tx=9_000_000),
                  SourceActivity("beta", "cmdb", last_change_tx=7_000_000)]
    metrics.set_source_status(activities, stale={"hr"}, judged=["cmdb", "hr", "policy"])
    assert sample(metrics, "edgeledger_source_last_event_timestamp_seconds", source="cmdb") == 7
    assert sample(metrics, "edgeledger_source_last_heartbeat_timestamp_seconds", source="cmdb") == 9
    assert [sample(metrics, "edgeledger_source_stale", source=s) for s in ("cmdb", "hr", "policy")] == [0, 1, 0]
    metrics.set_source_status([SourceActivity("acme", "cmdb", last_change_tx=1_000_000)], stale=(), judged=["hr"])
    assert sample(metrics, "edgeledger_source_last_event_timestamp_seconds", source="cmdb") == 7  # never back
    assert sample(metrics, "edgeledger_source_stale", source="hr") == 0

    metrics.set_review_depth(12)
    metrics.set_consumer_lag("edgeledger.source-changes", 3, 250)
    metrics.observe_invalidations(4)
    metrics.observe_cache(hit=False)
    assert sample(metrics, "edgeledger_review_queue_depth") == 12
    assert sample(metrics, "edgeledger_consumer_lag_records", topic="edgeledger.source-changes", partition="3") == 250
    assert sample(metrics, "edgeledger_cache_invalidations_total") == 4
    assert sample(metrics, "edgeledger_cache_requests_total", result="miss") == 1


def test_rebuild_progress() -> None:
    metrics = LedgerMetrics()
    metrics.observe_rebuild(4, 0)
    metrics.observe_rebuild(3, 1200)
    assert sample(metrics, "edgeledger_rebuild_partitions") == 3
    metrics.observe_rebuild(0, 300)
    assert sample(metrics, "edgeledger_rebuild_partitions") == 0
    assert sample(metrics, "edgeledger_rebuild_log_records_total") == 1500


def test_queries_are_counted_with_their_truncations() -> None:
    metrics = LedgerMetrics()
    for truncated in (False, True, True):
        metrics.observe_query(QueryResult.model_construct(
            query=QueryOut(name="dependents-of", tenant="acme", entity="x", limits={}, params={}),
            truncated=truncated))
    assert sample(metrics, "edgeledger_traversals_total", query="dependents-of") == 3
    assert sample(metrics, "edgeledger_traversals_truncated_total", query="dependents-of") == 2


def test_metrics_are_served_over_http() -> None:
    metrics = LedgerMetrics()
    metrics.set_review_depth(3)
    server, thread = serve_metrics(metrics.registry, port=0, address="127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10) as response:
            body = response.read().decode()
    finally:
        server.shutdown()
        thread.join(timeout=10)
    assert "edgeledger_review_queue_depth 3.0" in body


def test_metrics_mount_in_the_http_api() -> None:
    metrics = LedgerMetrics()
    metrics.observe_cache(hit=True)
    api = FastAPI()
    api.mount("/metrics", metrics_asgi_app(metrics.registry))

    async def scrape() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://api") as client:
            return await client.get("/metrics/")

    response = asyncio.run(scrape())
    assert response.status_code == 200 and 'edgeledger_cache_requests_total{result="hit"} 1.0' in response.text


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["cmdb", "hr"]),
                          st.floats(min_value=0, max_value=3e6) | st.sampled_from(LAG_BUCKETS_SECONDS)), max_size=60),
       st.integers(1, 5))
def test_the_batched_histogram_exposes_what_the_client_histogram_would(observations, batches: int) -> None:
    """The same values, observed one by one in prometheus_client's Histogram and in batches in
    ``BatchedHistogram``, give the same ``_bucket``, ``_count`` and ``_sum`` samples (values on a
    bound included: a bucket counts what is <= its bound)."""
    client_registry, batched_registry = CollectorRegistry(), CollectorRegistry()
    client = Histogram("lag_seconds", "lag", ["source"], buckets=LAG_BUCKETS_SECONDS, registry=client_registry)
    batched = BatchedHistogram("lag_seconds", "lag", "source", LAG_BUCKETS_SECONDS, batched_registry)
    for source, value in observations:
        client.labels(source).observe(value)
    for part in range(batches):
        for source in ("cmdb", "hr"):
            batched.observe_all(source, [value for index, (of, value) in enumerate(observations)
                                         if of == source and index % batches == part])

    def samples(registry: CollectorRegistry) -> dict:
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(generate_latest(registry).decode())
                for s in family.samples if not s.name.endswith("_created")}

    expected = samples(client_registry)
    assert samples(batched_registry) == pytest.approx(expected)
