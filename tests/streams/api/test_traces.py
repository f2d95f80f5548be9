"""The trace routes: replay and show return the CLI's JSON; a trace recorded over HTTP (POST, or
record=true on a traversal) reaches the ledger as a trace event and is then read and replayed."""

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from schemas.times import parse_micros
from streams.api.http import create_app
from tests.state.test_replays import NOW, TRACES, C, late_changes, organisation
from tests.streams.cli.test_main import edgeledger
from tests.support.harness import Ledger

BASE = "/v1/tenants/acme"


@pytest.fixture
def state(tmp_path: Path) -> Path:
    ledger = Ledger()
    organisation(ledger)
    ledger.at("2026-04-23T00:00:00Z").send(*TRACES)
    late_changes(ledger)
    events = tmp_path / "events.jsonl"
    events.write_text("".join((line if isinstance(line, str) else line.decode()) + "\n" for line in ledger.lines))
    edgeledger("load", str(events), "--state", str(tmp_path / "state"), "--simulated-clock")
    return tmp_path / "state"


@pytest.fixture
def client(state: Path, tmp_path: Path):
    app = create_app(state, cache_dir=tmp_path / "cache", refresh_interval_s=0, wall_clock=lambda: parse_micros(NOW))
    with TestClient(app) as client:
        yield client


def cli(state: Path, *args: str) -> object:
    return json.loads(edgeledger("traces", *args, "--state", str(state), "--tenant", "acme", "--known-at", NOW,
                                 "--json").stdout)


def test_replay_and_show_return_the_commands_json(client: TestClient, state: Path) -> None:
    replayed = client.get(f"{BASE}/traces/replay")
    assert replayed.status_code == 200
    assert replayed.json() == cli(state, "replay")
    assert [r["trace_id"] for r in replayed.json()][:2] == ["dep-c-ext", "appr-c"]
    shown = client.get(f"{BASE}/traces/own-c-ext")
    assert shown.json() == cli(state, "show", "own-c-ext")
    assert client.get(f"{BASE}/traces/nope").status_code == 404
    assert client.get(f"{BASE}/traces/replay", params={"known_at": "2026-05-01"}).json() == []


def test_a_trace_posted_or_recorded_with_an_answer_reaches_the_ledger(client: TestClient, state: Path) -> None:
    posted = client.post(f"{BASE}/traces", json={
        "query": {"name": "owners-of", "entity": C}, "valid_at": "2026-04-22T10:00:00Z",
        "known_at": "2026-04-22T10:00:00Z", "action": "external_change"})
    assert posted.status_code == 202
    trace_id = posted.json()["trace_id"]
    assert posted.headers["X-Edgeledger-Trace-Id"] == trace_id
    answered = client.get(f"{BASE}/owners-of", params={"entity": C, "valid_at": "2026-04-22T10:00:00Z",
                                                       "known_at": "2026-04-22T10:00:00Z", "record": "true",
                                                       "action": "permission_change"})
    assert answered.status_code == 200
    recorded_id = answered.headers["X-Edgeledger-Trace-Id"]
    plain = client.get(f"{BASE}/owners-of", params={"entity": C})
    assert "X-Edgeledger-Trace-Id" not in plain.headers
    assert client.post(f"{BASE}/traces", json={"query": {}, "valid_at": "soon"}).status_code == 422
    recorded = state.parent / "state.recorded-traces.jsonl"
    events = [json.loads(line) for line in recorded.read_text().splitlines()]
    assert [e["trace_id"] for e in events] == [trace_id, recorded_id]
    assert events[1]["edge_ids"] == [e for p in answered.json()["paths"] for e in p["edges"]]
    assert events[1]["action"] == "permission_change"
    edgeledger("load", str(recorded), "--state", str(state))
    # Loaded on the wall clock: replayed with what the ledger knows by far in the future.
    ids = {r["trace_id"]: r for r in client.get(f"{BASE}/traces/replay", params={"known_at": "2100-01-01"}).json()}
    assert ids[trace_id]["verdict"] == ids[recorded_id]["verdict"] == "changed"
    assert client.get(f"{BASE}/traces/{recorded_id}").json()["action"] == "permission_change"


def test_a_bad_post_is_refused_with_the_reason(client: TestClient) -> None:
    refused = client.post(f"{BASE}/traces", json={"query": {"name": "owners-of", "entity": C}, "valid_at": "soon",
                                                   "known_at": "2026-04-22", "surprise": 1})
    assert refused.status_code == 422
    assert "valid_at" in refused.json()["detail"] and "surprise" in refused.json()["detail"]
