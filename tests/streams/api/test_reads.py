"""The list reads and freshness over HTTP answer what the CLI's ``--json`` prints on the same state, and
their pages make one listing however much is recorded between them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from schemas.slo import default_slo
from schemas.times import parse_micros
from streams.api.http import create_app
from tests.support.api import BASE, cmdb_change, edge, load
from tests.support.cli import edgeledger

KNOWN = "2026-06-01T00:00:00Z"
LISTS = {
    "corrections": ("corrections",),
    "review": ("review", "list"),
    "traces": ("traces", "list"),
    "dead-letters": ("dead-letters",),
}


def every_page(client: TestClient, name: str, limit: int, **params: str) -> tuple[list[dict], int]:
    """Every item of a listing, page by page, and how many pages it took."""
    items: list[dict] = []
    query: dict[str, object] = {"limit": limit, **params}
    pages = 0
    while True:
        response = client.get(f"{BASE}/{name}", params=query)
        assert response.status_code == 200, response.text
        page = response.json()
        pages += 1
        items += page["items"]
        if page["next_cursor"] is None:
            return items, pages
        query = {"limit": limit, "cursor": page["next_cursor"]}


@pytest.mark.parametrize("name", list(LISTS))
def test_every_list_read_pages_through_what_the_cli_prints(client: TestClient, state: Path, name: str) -> None:
    printed = json.loads(edgeledger(*LISTS[name], "--state", str(state), "--tenant", "acme", "--known-at", KNOWN,
                                    "--json").stdout)
    assert printed, f"the demo has {name}: a comparison of two empty lists would prove nothing"
    whole, pages = every_page(client, name, 100, known_at=KNOWN)
    one_by_one, many = every_page(client, name, 1, known_at=KNOWN)
    assert whole == printed and pages == 1
    assert one_by_one == printed and many == len(printed)


def test_freshness_is_the_cli_report(client: TestClient, state: Path) -> None:
    for params, flags in (({"known_at": KNOWN}, ("--now", KNOWN)),
                          ({"known_at": KNOWN, "since": "2026-05-01", "until": "2026-05-04"},
                           ("--now", KNOWN, "--since", "2026-05-01", "--until", "2026-05-04"))):
        printed = json.loads(edgeledger("freshness", "--state", str(state), "--tenant", "acme", *flags,
                                        "--json").stdout)
        response = client.get(f"{BASE}/freshness", params=params)
        assert response.status_code == 200, response.text
        assert response.json() == printed
        assert printed["lag"] and printed["staleness"]


def test_a_listing_as_of_the_past_leaves_out_what_came_later(client: TestClient) -> None:
    before = client.get(f"{BASE}/corrections", params={"known_at": "2026-05-01"}).json()
    after = client.get(f"{BASE}/corrections", params={"known_at": KNOWN}).json()
    assert before["items"] == [] and len(after["items"]) >= 1
    assert before["known_at"] == "2026-05-01T00:00:00Z"


def test_pages_stay_one_listing_while_the_ledger_grows(state: Path, tmp_path: Path) -> None:
    """The API's clock stands at 1 June; a correction recorded on 1 July, between two pages, is not in the
    listing the first page started, and is in one that starts after it."""
    with TestClient(create_app(state, cache_dir=tmp_path / "pinned", refresh_interval_s=0,
                               wall_clock=lambda: parse_micros(KNOWN))) as client:
        first = client.get(f"{BASE}/corrections", params={"limit": 1}).json()
        assert first["next_cursor"] is not None and first["known_at"] == KNOWN
        load(state, {"kind": "clock", "now": "2026-07-01T00:00:00Z"},
             cmdb_change("cmdb-9001", "ci/CI0042", edge(("Component", "cmdb:CI0042"), "owned_by",
                                                         ("Team", "hr:T-SEC"), "2026-06-15")))
        rest, _ = every_page(client, "corrections", 1, cursor=first["next_cursor"])
        later, _ = every_page(client, "corrections", 100, known_at="2026-08-01")
    pinned = first["items"] + rest
    assert "cmdb-9001" not in {item["event_id"] for item in pinned}
    assert later[:len(pinned)] == pinned and [item["event_id"] for item in later[len(pinned):]] == ["cmdb-9001"]


@pytest.mark.parametrize(("params", "says"), [
    ({"cursor": "not-a-cursor"}, "not a cursor this API gave"),
    ({"cursor": "eyJrIjoxfQ"}, "not a cursor this API gave"),
    ({"limit": 0}, "limit"),
    ({"limit": 1001}, "limit"),
    ({"known_at": "yesterday"}, "known_at"),
    ({"tenant": "acme"}, "unknown parameter"),
])
def test_bad_paging_gets_422_with_a_reason(client: TestClient, params: dict, says: str) -> None:
    response = client.get(f"{BASE}/corrections", params=params)
    assert response.status_code == 422, response.text
    assert says in response.json()["detail"]


def test_a_cursor_keeps_its_known_at(client: TestClient) -> None:
    first = client.get(f"{BASE}/dead-letters", params={"limit": 1, "known_at": KNOWN}).json()
    other = client.get(f"{BASE}/dead-letters", params={"cursor": first["next_cursor"], "known_at": "2026-07-01"})
    assert other.status_code == 422 and "give that known_at or none" in other.json()["detail"]
    same = client.get(f"{BASE}/dead-letters", params={"cursor": first["next_cursor"], "known_at": KNOWN})
    assert same.status_code == 200 and same.json()["known_at"] == first["known_at"]


def test_freshness_refuses_an_empty_window(client: TestClient) -> None:
    response = client.get(f"{BASE}/freshness", params={"since": "2026-05-04", "until": "2026-05-01"})
    assert response.status_code == 422 and "until: must be after since" in response.json()["detail"]


def test_another_tenants_lists_are_empty(client: TestClient) -> None:
    for name in (*LISTS, "freshness"):
        body = client.get(f"/v1/tenants/globex/{name}").json()
        assert body.get("items", body.get("lag")) == [], name


TRAVERSALS = {
    "owners-of": {"entity": "settlement connector"},
    "dependents-of": {"entity": "Component:cmdb:CI0042", "depth": 2},
    "approvals-required-for": {"entity": "Component:cmdb:CI0042"},
    "changed-between": {"entity": "Component:cmdb:CI0042", "from": "2026-03-01", "to": "2026-06-01"},
    "neighbourhood": {"entity": "Component:cmdb:CI0042"},
    "traverse": {"entity": "Component:cmdb:CI0042", "edges": "depends_on:in,owned_by:out", "max_depth": 2},
}


@pytest.mark.parametrize("name", [*TRAVERSALS, "history"])
def test_every_traversal_and_history_answers_what_the_cli_prints(state: Path, tmp_path: Path, name: str) -> None:
    """As serve runs (the bundled SLOs, as `query` uses), on the same state and clocks."""
    params = {**TRAVERSALS.get(name, {"entity": "Component:cmdb:CI0042", "rel": "owned_by"}),
              "valid_at": "2026-04-22", "known_at": "2026-05-04"}
    flags = [f"--{key.replace('_', '-')}={value}" for key, value in params.items()]
    command = ("query", name) if name in TRAVERSALS else ("history",)
    printed = json.loads(edgeledger(*command, "--state", str(state), "--tenant", "acme", *flags, "--json").stdout)
    with TestClient(create_app(state, cache_dir=tmp_path / "cli-cache", slo=default_slo())) as client:
        response = client.get(f"{BASE}/{name}", params=params)
    assert response.status_code == 200, response.text
    assert response.json() == printed
