"""The OpenAPI document states what the API accepts: instants by an ISO-8601 pattern, entity types and
relationships from the ontology in force. A request valid by the document is answered, any other
refused with a 422 (schemathesis's positive_data_acceptance and negative_data_rejection checks)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from processors.query_requests import empty_window, instant_param
from schemas.ontology import Ontology, Relationship, default_ontology
from streams.api.http import create_app
from streams.api.parameters import INSTANT_PARAMETERS, INSTANT_PATTERN, parameter_rules
from streams.processor import wall_clock_micros
from tests.support.api import BASE, CONNECTOR

TRAVERSALS = ("owners-of", "dependents-of", "approvals-required-for", "changed-between", "neighbourhood",
              "traverse")


@pytest.fixture
def client(demo_ledger: Path, tmp_path: Path) -> Iterator[TestClient]:
    """An API per test (schemathesis runs the app's lifespan, whose end closes it) over the one ledger
    of the module, which every test here only reads."""
    with TestClient(create_app(demo_ledger, cache_dir=tmp_path / "cache", refresh_interval_s=0)) as client:
        yield client


def parameters(document: dict, path: str) -> dict[str, dict]:
    return {p["name"]: p for p in document["paths"][path]["get"]["parameters"]}


# -- instants ------------------------------------------------------------------------------------------------------
INSTANT = re.compile(INSTANT_PATTERN)


@settings(max_examples=300, deadline=None)
@given(text=st.from_regex(INSTANT, fullmatch=True))
def test_every_text_the_instant_pattern_matches_is_an_instant(text: str) -> None:
    assert instant_param(text, "valid_at") is not None


@pytest.mark.parametrize("text", [
    "2026-04-22", "2000-02-29", "2024-02-29", "0001-01-01", "9999-12-31", "2026-04-22T10:14Z",
    "2026-04-22T10:14:00Z", "2026-04-22T10:14:00.5Z", "2026-04-22T10:14:00.123456+02:00", "0002-01-01T00:00-23:59",
    "9998-12-31T23:59:59.999999-23:59",
])
def test_the_instant_pattern_takes_dates_and_times_with_a_timezone(text: str) -> None:
    assert INSTANT.match(text) and instant_param(text, "valid_at") is not None


@pytest.mark.parametrize("text", [
    "2026-02-29", "1900-02-29", "0000-01-01", "2026-04-31", "2026-13-01", "2026-04-22T24:00Z",
    "2026-04-22T10:14:00", "2026-04-22T10:14:00.1234567Z", "0001-01-01T00:00:00+01:00", "2026-04-22 10:14Z",
    "2026-W17-3", "20260422", "2026-04-22T10Z", " 2026-04-22", "2026-04-22\n", "last tuesday",
])
def test_the_instant_pattern_refuses_what_it_does_not_describe(text: str) -> None:
    assert not INSTANT.fullmatch(text)


# -- the document ------------------------------------------------------------------------------------------------------
def test_the_document_states_instants_types_edges_and_relationships(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    ontology = default_ontology()
    for name in TRAVERSALS:
        given = parameters(document, f"/v1/tenants/{{tenant}}/{name}")
        for instant in set(INSTANT_PARAMETERS) & set(given):
            assert given[instant]["schema"]["pattern"] == INSTANT_PATTERN, (name, instant)
            assert "ISO-8601" in given[instant]["description"]
        if "types" in given:
            types = re.compile(given["types"]["schema"]["pattern"])
            assert types.match("Team") and types.match("Team, Person") and not types.match("Team,Martian")
            assert all(types.match(entity_type) for entity_type in ontology.entity_types)
    edges = re.compile(parameters(document, "/v1/tenants/{tenant}/traverse")["edges"]["schema"]["pattern"])
    assert edges.match("depends_on:in,owned_by:out") and edges.match("member_of")
    assert not edges.match("depends_on:sideways") and not edges.match("likes:in")
    history = parameters(document, "/v1/tenants/{tenant}/history")
    assert history["rel"]["schema"]["enum"] == list(ontology.relationships)
    assert history["valid_at"]["schema"]["pattern"] == INSTANT_PATTERN
    assert parameters(document, "/v1/tenants/{tenant}/changed-between")["axis"]["schema"]["enum"] == ["valid", "tx"]


def test_the_document_and_the_checks_follow_the_ontology_in_force(demo_ledger: Path, tmp_path: Path) -> None:
    ontology = Ontology(entity_types=("Service", "Team"),
                        relationships={"owned_by": Relationship(domain=("Service",), range=("Team",))})
    with TestClient(create_app(demo_ledger, cache_dir=tmp_path / "cache", ontology=ontology)) as client:
        document = client.get("/openapi.json").json()
        assert parameters(document, "/v1/tenants/{tenant}/history")["rel"]["schema"]["enum"] == ["owned_by"]
        refused = client.get(f"{BASE}/owners-of", params={"entity": CONNECTOR, "types": "Person"})
        assert client.get(f"{BASE}/owners-of", params={"entity": CONNECTOR, "types": "Team"}).status_code == 200
    assert refused.status_code == 422
    assert refused.json()["errors"] == [{"parameter": "types", "message": "'Person' is not a comma list of entity "
                                                                          "types, each one of: Service, Team"}]


def test_names_are_matched_literally_in_patterns_a_json_schema_validator_can_read() -> None:
    """Only regex syntax is escaped: ECMA-262 in unicode mode refuses escapes such as '\\-'."""
    ontology = Ontology(entity_types=("On-Call.Team", "Service"), relationships={})
    types = parameter_rules(ontology).schemas["types"]["pattern"]
    assert r"On-Call\.Team" in types
    assert re.match(types, "Service,On-Call.Team") and not re.match(types, "On-CallxTeam")


def test_values_outside_the_document_are_refused_each_with_what_it_takes(client: TestClient) -> None:
    response = client.get(f"{BASE}/traverse", params={"entity": CONNECTOR, "edges": "depends_on:in,",
                                                      "valid_at": "2026-04-22T10:14:00"})
    assert response.status_code == 422
    errors = {error["parameter"]: error["message"] for error in response.json()["errors"]}
    assert set(errors) == {"edges", "valid_at"}
    assert "with a timezone" in errors["valid_at"] and "direction one of out, in, both" in errors["edges"]


# -- schemathesis: valid by the document is answered, invalid refused --------------------------------------------------
def empty_changed_window(case: schemathesis.Case) -> bool:
    """A changed-between window the document allows but the request refuses (422): it is empty. The
    constraint spans parameters, which an OpenAPI parameter schema cannot state; the description says it."""
    query = case.query or {}
    if "from" not in query:
        return False
    start = instant_param(query["from"], "from")
    end = instant_param(query.get("to"), "to")
    known_at = instant_param(query.get("known_at"), "known_at")
    assert start is not None
    return empty_window(start, end, wall_clock_micros() if known_at is None else known_at,
                        query.get("axis", "valid")) is not None


@pytest.mark.parametrize("mode", [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE])
def test_requests_valid_by_the_document_are_answered_and_others_refused(
        client: TestClient, mode: schemathesis.GenerationMode) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", client.app)
    checks = [not_a_server_error, positive_data_acceptance if mode.is_positive else negative_data_rejection]
    # The trace routes record and replay (tests/streams/api/test_traces.py); these are the reads.
    operations = [op for op in (result.ok() for result in schema.get_all_operations()) if "/traces" not in op.path]
    assert len(operations) == 8
    for operation in operations:
        if operation.path == "/healthz":
            continue  # no parameters

        def checked(case: schemathesis.Case) -> None:
            case.call_and_validate(checks=checks)

        strategy = operation.as_strategy(mode)
        if mode.is_positive:
            strategy = strategy.filter(lambda case: not empty_changed_window(case))
        # Each operation and mode its own examples in the example database, as in test_http.py.
        checked._hypothesis_internal_add_digest = f"acceptance {mode.value} {operation.label}".encode()  # type: ignore[attr-defined]
        settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))(
            given(case=strategy)(checked))()
