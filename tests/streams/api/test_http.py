"""The HTTP API on the demo ledger: contract shapes, clear 4xx, the cache, a writer beside it, and a
schemathesis fuzz of the API from its own OpenAPI document (in-process ASGI, no network port)."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from schemas.query_params import PARAMS
from schemas.results import HistoryResult, QueryResult
from schemas.slo import SloConfig, SourceSlo, default_slo
from schemas.times import parse_micros
from streams.api.http import create_app
from streams.cli.load import load_into
from tests.support.api import BASE, CONNECTOR, DEMO, ONE_QUESTION_EACH, cmdb_change, edge, is_a_read, load

ENDPOINTS = ONE_QUESTION_EACH


def service(client: TestClient):
    app: FastAPI = client.app
    return app.state.service


# -- shapes ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(ENDPOINTS))
def test_each_traversal_returns_the_contract_shape(client: TestClient, name: str) -> None:
    response = client.get(f"{BASE}/{name}", params=ENDPOINTS[name])
    assert response.status_code == 200, response.text
    body = response.json()
    result = QueryResult.model_validate(body)
    assert set(body) >= {"query", "valid_at", "known_at", "anchor", "disposition", "results", "paths", "edges",
                         "counts", "truncated", "limits_hit", "frontier", "coverage"}
    assert result.query.name == name and result.query.tenant == "acme"
    assert result.anchor.entity == CONNECTOR
    assert all(edge_id in result.edges for path in result.paths for edge_id in path.edges)
    assert result.disposition == "answer", result.coverage.note
    assert response.headers["X-Edgeledger-Cache"] in {"miss", "bypass"}


def test_answers_match_the_late_correction_story(client: TestClient) -> None:
    now = client.get(f"{BASE}/owners-of", params={"entity": "settlement connector"}).json()
    believed = client.get(f"{BASE}/owners-of", params={"entity": "settlement connector",
                                                     "valid_at": "2026-04-22", "known_at": "2026-04-22"}).json()
    assert [r["entity"] for r in now["results"]] == ["Team:hr:T-PLAT"]
    assert [r["entity"] for r in believed["results"]] == ["Team:hr:T-ANA"]
    assert believed["known_at"] == "2026-04-22T00:00:00Z"
    changed = client.get(f"{BASE}/changed-between", params=ENDPOINTS["changed-between"]).json()
    assert {c["change"] for c in changed["changes"]} >= {"started", "ended"}


def test_history_lists_versions_with_both_intervals(client: TestClient) -> None:
    response = client.get(f"{BASE}/history", params={"entity": CONNECTOR, "rel": "owned_by"})
    assert response.status_code == 200
    history = HistoryResult.model_validate(response.json())
    assert len(history.versions) == 3 and {v.rel for v in history.versions} == {"owned_by"}
    assert any(v.tx_to is not None for v in history.versions), "the closed belief is kept"


def test_health_metrics_and_openapi(client: TestClient) -> None:
    health = client.get("/healthz").json()
    assert health["status"] == "ok" and health["last_tx"].startswith("2026-05-03")
    client.get(f"{BASE}/owners-of", params={"entity": CONNECTOR})
    client.get(f"{BASE}/owners-of", params={"entity": CONNECTOR})
    metrics = client.get("/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    assert 'edgeledger_cache_requests_total{result="hit"} 1.0' in metrics.text
    assert 'edgeledger_traversals_total{query="owners-of"} 2.0' in metrics.text
    document = client.get("/openapi.json").json()
    for name in ENDPOINTS:
        operation = document["paths"][f"/v1/tenants/{{tenant}}/{name}"]["get"]
        assert operation["summary"] and "Not for" in operation["description"]
        assert operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("QueryResult")
        taken = {field.alias or key for key, field in PARAMS[name].model_fields.items()}
        assert {p["name"] for p in operation["parameters"]} == {"tenant", *taken}, "the CLI's and replay's too"
    assert "unknown` is **not** `none" in document["paths"]["/v1/tenants/{tenant}/owners-of"]["get"]["description"]


def test_health_answers_while_queries_hold_the_lock(client: TestClient) -> None:
    """A liveness probe must not wait behind large traversals (a review saw /healthz take 2 s)."""
    seen = client.get("/healthz").json()
    answered: list[dict] = []
    probe = threading.Thread(target=lambda: answered.append(client.get("/healthz").json()), daemon=True)
    with service(client).lock:
        probe.start()
        probe.join(5)
        assert answered == [seen], "health answered with what it last saw, without the lock"
    probe.join(5)


# -- bad requests: 4xx with a reason, never 500 -------------------------------------------------------------------
@pytest.mark.parametrize(("path", "params", "says"), [
    ("owners-of", {"entity": CONNECTOR, "valid_at": "last tuesday"}, "valid_at"),
    ("owners-of", {"entity": CONNECTOR, "known_at": "2026-04-22T10:00:00"}, "timezone"),
    ("owners-of", {"entity": CONNECTOR, "known_at": "0001-01-01T00:00:00+01:00"}, "known_at"),
    ("owners-of", {"entity": CONNECTOR, "max_depth": -1}, "max_depth"),
    ("owners-of", {"entity": CONNECTOR, "max_expansions": "many"}, "max_expansions"),
    ("owners-of", {"entity": CONNECTOR, "max_dpeth": 3}, "max_dpeth: unknown parameter"),
    ("owners-of", {}, "entity"),
    ("owners-of", {"entity": CONNECTOR, "types": "Team,Martian"}, "Martian"),
    ("dependents-of", {"entity": CONNECTOR, "depth": 0}, "depth"),
    ("traverse", {"entity": CONNECTOR, "edges": "depends_on:in,likes:out"}, "likes"),
    ("traverse", {"entity": CONNECTOR, "edges": "depends_on:sideways"}, "direction"),
    ("traverse", {"entity": CONNECTOR}, "edges"),
    ("changed-between", {"entity": CONNECTOR}, "from"),
    ("changed-between", {"entity": CONNECTOR, "from": "2026-05-01", "to": "2026-04-01"}, "before"),
    ("changed-between", {"entity": CONNECTOR, "from": "2026-05-01", "known_at": "2026-04-01"}, "known_at"),
    ("changed-between", {"entity": CONNECTOR, "from": "2026-01-01", "axis": "sideways"}, "axis"),
    ("history", {"entity": CONNECTOR, "rel": "likes"}, "likes"),
    ("owners-of", {"entity": CONNECTOR, "valid_at": "2026-04-22" + "+" * 100}, "valid_at"),
    ("history", {"entity": CONNECTOR, "known_at": "2026-04-22" + " " * 100}, "known_at"),
])
def test_bad_requests_get_422_with_a_reason(client: TestClient, path: str, params: dict, says: str) -> None:
    response = client.get(f"{BASE}/{path}", params=params)
    assert response.status_code == 422, response.text
    assert says in response.json()["detail"]


@pytest.mark.parametrize("path", ["owners-of", "history"])
def test_a_parameter_given_twice_is_refused_not_answered_for_the_last(client: TestClient, path: str) -> None:
    response = client.get(f"{BASE}/{path}", params=[("entity", "Service:cmdb:S1"), ("entity", CONNECTOR)])
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == "entity: given more than once; give each parameter once"


def test_a_tenant_is_always_required_and_checked(client: TestClient) -> None:
    assert client.get("/v1/tenants//owners-of", params={"entity": CONNECTOR}).status_code == 404
    assert client.get("/v1/tenants/a%20b/owners-of", params={"entity": CONNECTOR}).status_code == 422
    other = client.get("/v1/tenants/globex/owners-of", params={"entity": CONNECTOR}).json()
    assert other["disposition"] == "unknown" and other["anchor"]["resolution"] == "unresolved"


def test_any_tenant_an_event_may_name_is_one_the_api_reads(state: Path, tmp_path: Path) -> None:
    """What can be written can be read: a tenant id with every character the events allow."""
    tenant = "Org-1.eu_west:prod@acme+b"
    change = cmdb_change("t-1", "svc/S7", edge(("Service", "cmdb:S7"), "owned_by", ("Team", "hr:T7")))
    load(state, change | {"tenant": tenant})
    with TestClient(create_app(state, cache_dir=tmp_path / "cache", refresh_interval_s=0)) as client:
        answer = client.get(f"/v1/tenants/{tenant}/owners-of", params={"entity": "Service:cmdb:S7"})
    assert answer.status_code == 200, answer.text
    assert [result["entity"] for result in answer.json()["results"]] == ["Team:hr:T7"]


# -- the cache, and a writer beside the reader ----------------------------------------------------------------------
def test_a_repeat_is_served_from_the_cache(client: TestClient) -> None:
    params = {"entity": CONNECTOR, "valid_at": "2026-06-01"}
    first = client.get(f"{BASE}/approvals-required-for", params=params)
    again = client.get(f"{BASE}/approvals-required-for", params=params)
    assert (first.headers["X-Edgeledger-Cache"], again.headers["X-Edgeledger-Cache"]) == ("miss", "hit")
    assert {k: v for k, v in again.json().items() if k != "known_at"} == \
        {k: v for k, v in first.json().items() if k != "known_at"}
    assert service(client).engine.stats.hits == 1


def test_a_writer_on_the_same_state_invalidates_exactly(client: TestClient, state: Path) -> None:
    owners = {"entity": CONNECTOR}
    dependents = {"entity": CONNECTOR}
    unrelated = {"entity": "Service:cmdb:S1"}
    past = {"entity": CONNECTOR, "valid_at": "2026-04-22", "known_at": "2026-04-22"}
    for path, params in (("owners-of", owners), ("dependents-of", dependents), ("owners-of", unrelated),
                         ("owners-of", past)):
        assert client.get(f"{BASE}/{path}", params=params).headers["X-Edgeledger-Cache"] == "miss"

    load(state, {"kind": "clock", "now": "2026-06-01T09:00:00Z"},
         cmdb_change("cmdb-9001", "ci/CI0042", edge(("Component", "cmdb:CI0042"), "owned_by",
                                                     ("Team", "hr:T-SEC"), "2026-06-01")),
         cmdb_change("cmdb-9002", "svc/S7", edge(("Service", "cmdb:S7"), "depends_on", ("Component", "cmdb:CI0042"))))

    moved = client.get(f"{BASE}/owners-of", params=owners)
    assert moved.headers["X-Edgeledger-Cache"] == "miss"
    assert [r["entity"] for r in moved.json()["results"]] == ["Team:hr:T-SEC"]
    grown = client.get(f"{BASE}/dependents-of", params=dependents)
    assert grown.headers["X-Edgeledger-Cache"] == "miss", "a new dependent invalidates the answer it adds to"
    assert "Service:cmdb:S7" in {r["entity"] for r in grown.json()["results"]}
    assert client.get(f"{BASE}/owners-of", params=unrelated).headers["X-Edgeledger-Cache"] == "hit"
    believed = client.get(f"{BASE}/owners-of", params=past)
    assert believed.headers["X-Edgeledger-Cache"] == "miss", "its adjacency grew: edges_read changes"
    assert [r["entity"] for r in believed.json()["results"]] == ["Team:hr:T-ANA"], "what was believed stays"
    assert service(client).engine.stats.invalidated == 3
    assert client.get("/healthz").json()["last_tx"].startswith("2026-06-01")


def test_stale_sources_make_an_empty_answer_unknown(state: Path, tmp_path: Path) -> None:
    slo = SloConfig(sources={"cmdb": SourceSlo(max_silence_seconds=60, max_p99_lag_seconds=60)})
    with TestClient(create_app(state, cache_dir=tmp_path / "stale-cache", refresh_interval_s=0, slo=slo)) as client:
        body = client.get(f"{BASE}/dependents-of", params={"entity": "Service:cmdb:S1"}).json()
    assert body["results"] == [] and body["disposition"] == "unknown"
    assert body["coverage"]["stale_sources"] == ["cmdb"]


def test_a_past_answer_judges_staleness_at_its_known_at_not_at_the_wall_clock(state: Path, tmp_path: Path) -> None:
    """As of 22 April, cmdb had last been heard on 2 March: stale, whatever it said on 3 May. The full
    demo ledger answers as one loaded only up to 22 April does, from a miss and from a hit."""
    prefix = tmp_path / "prefix.jsonl"
    prefix.write_text("".join(DEMO.read_text().splitlines(keepends=True)[:11]))
    partial = tmp_path / "partial" / "ledger"
    load_into(partial, [prefix], simulated_clock=True, ontology_path=None)
    just_after_the_last_heartbeat = parse_micros("2026-05-03T09:05:00Z")
    past = {"entity": "Service:cmdb:S3", "valid_at": "2026-04-22T12:00:00Z", "known_at": "2026-04-22T12:00:00Z"}
    bodies = []
    for path, cache in ((partial, "partial-cache"), (state, "full-cache")):
        app = create_app(path, cache_dir=tmp_path / cache, refresh_interval_s=0, slo=default_slo(),
                         wall_clock=lambda: just_after_the_last_heartbeat)
        with TestClient(app) as client:
            miss = client.get(f"{BASE}/dependents-of", params=past)
            hit = client.get(f"{BASE}/dependents-of", params=past)
            assert hit.headers["X-Edgeledger-Cache"] == "hit" and hit.json() == miss.json()
            bodies.append(miss.json())
            if path == state:
                now = client.get(f"{BASE}/dependents-of", params={"entity": "Service:cmdb:S3"}).json()
                assert now["coverage"]["stale_sources"] == [], "cmdb's heartbeat five minutes ago: fresh now"
    assert [(b["disposition"], b["coverage"]["stale_sources"]) for b in bodies] == [("unknown", ["cmdb"])] * 2
    assert bodies[0]["coverage"] == bodies[1]["coverage"]


# -- fuzzing from the OpenAPI document ---------------------------------------------------------------------------------
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.mark.parametrize("mode", [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE])
def test_the_api_conforms_to_its_own_document(client: TestClient, mode: schemathesis.GenerationMode) -> None:
    """Every operation, cases generated from the OpenAPI document: no 5xx, and every response (200 or 422)
    matches its documented status, content type and schema."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", client.app)
    # The trace routes record and replay (tests/streams/api/test_traces.py); these are the reads.
    operations = [op for op in (result.ok() for result in schema.get_all_operations()) if is_a_read(op.label)]
    assert len(operations) == 13
    for operation in operations:
        if mode == schemathesis.GenerationMode.NEGATIVE and operation.path == "/healthz":
            continue  # no parameters: no invalid request to make

        def conforms(case: schemathesis.Case) -> None:
            case.call_and_validate(checks=CHECKS)

        # Each operation and mode its own examples in the example database (as pytest's parametrize gets):
        # the same source for every operation would otherwise replay one's failure against another.
        conforms._hypothesis_internal_add_digest = f"{mode.value} {operation.label}".encode()  # type: ignore[attr-defined]
        settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))(
            given(case=operation.as_strategy(mode))(conforms))()


def test_serve_keeps_the_collector_off_its_caches_while_it_runs_and_hands_it_back(state: Path, tmp_path: Path) -> None:
    """As load and the workers do, so that full collections over the read caches do not stall answers."""
    from processors.heap import THRESHOLDS
    from streams.api.http import SETTLE_EVERY_REQUESTS

    gc.unfreeze()
    before = gc.get_threshold()
    with TestClient(create_app(state, cache_dir=tmp_path / "cache", refresh_interval_s=0)) as client:
        assert gc.get_threshold() == THRESHOLDS
        for _ in range(SETTLE_EVERY_REQUESTS):
            assert client.get(f"{BASE}/owners-of", params=ENDPOINTS["owners-of"]).status_code == 200
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
