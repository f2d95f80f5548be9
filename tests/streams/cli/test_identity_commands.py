"""`edgeledger identity merge|split|history` on a state directory, and the same events through `run`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from state.open import reading
from streams.cli.load import load_into
from tests.support.cli import edgeledger

S1, S9, D9, T9 = "Service:cmdb:S1", "Service:cmdb:S9", "Service:cmdb:D9", "Team:hr:T9"
EVENTS = [
    {"kind": "clock", "now": "2026-03-01T00:00:00Z"},
    {"kind": "change", "event_id": "c-1", "tenant": "acme", "source": {"system": "cmdb", "version": "1"},
     "detected_at": "2026-03-01T00:00:00Z", "mode": "delta", "assert": [
         {"src": {"type": "Service", "id": "cmdb:D9"}, "rel": "depends_on",
          "dst": {"type": "Service", "id": "cmdb:S9"}},
         {"src": {"type": "Service", "id": "cmdb:S1", "name": "Billing"}, "rel": "owned_by",
          "dst": {"type": "Team", "id": "hr:T9"}}]},
]


@pytest.fixture
def state(tmp_path: Path) -> Path:
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    load_into(tmp_path / "state", [events], simulated_clock=True, ontology_path=None)
    return tmp_path / "state"


def run(*args: str, check: bool = True) -> dict:
    return json.loads(edgeledger(*args, check=check).stdout)


def test_merge_split_and_history_on_a_state_directory(state: Path) -> None:
    merged = run("identity", "merge", "--state", str(state), "--tenant", "acme", "--keep", S1, "--absorb", S9,
                 "--actor", "alice", "--reason", "one billing service", "--event-id", "m-1")
    assert merged == {"event_id": "m-1", "outcome": "applied"}
    answer = run("query", "dependents-of", "--state", str(state), "--tenant", "acme", "--entity", S1, "--json")
    assert [r["entity"] for r in answer["results"]] == [D9]
    assert run("query", "owners-of", "--state", str(state), "--tenant", "acme", "--entity", S9,
               "--json")["anchor"]["entity"] == S1
    split = run("identity", "split", "m-1", "--state", str(state), "--tenant", "acme", "--actor", "bob",
                "--reason", "two services after all")
    assert split["outcome"] == "applied" and split["event_id"].startswith("split-")
    history = run("identity", "history", "--state", str(state), "--tenant", "acme", "--entity", S1, "--json")
    assert [(h["kind"], h["edit_id"], h["other"], h["actor"], h["reason"]) for h in history] == [
        ("alias", f"{S1}=billing", "billing", None, None),
        ("merge", "m-1", S9, "alice", "one billing service"),
        ("split", split["event_id"], S9, "bob", "two services after all"),
    ]
    assert history[1]["keep"] == S1 and history[2]["merge"] == "m-1"
    text = edgeledger("identity", "history", "--state", str(state), "--tenant", "acme", "--entity", S9).stdout
    assert "merge  m-1" in text and "by alice: one billing service" in text


def test_an_alias_recorded_by_command_is_listed_with_who_and_why(state: Path) -> None:
    recorded = run("identity", "alias", "--state", str(state), "--tenant", "acme", "--entity", S1, "--name",
                   "billing@acme.example", "--actor", "carol", "--reason", "the team's mailing list",
                   "--event-id", "a-1")
    assert recorded == {"event_id": "a-1", "outcome": "applied"}
    assert run("query", "dependents-of", "--state", str(state), "--tenant", "acme", "--entity",
               "billing@acme.example", "--json")["anchor"]["entity"] == S1
    history = run("identity", "history", "--state", str(state), "--tenant", "acme", "--entity", S1, "--json")
    assert [(h["kind"], h["other"], h["actor"], h["reason"]) for h in history] == [
        ("alias", "billing", None, None),  # from a source's mention
        ("alias", "billing acme example", "carol", "the team's mailing list"),  # normalised
    ]


def test_a_bad_command_says_why_and_exits_non_zero(state: Path) -> None:
    done = edgeledger("identity", "merge", "--state", str(state), "--tenant", "acme", "--keep", S1, "--absorb", T9,
                      "--actor", "alice", check=False)
    assert done.returncode == 1 and "different types" in json.loads(done.stdout)["reason"]
    done = edgeledger("identity", "split", "m-nope", "--state", str(state), "--tenant", "acme", "--actor", "bob",
                      check=False)
    assert done.returncode == 1 and "unknown merge 'm-nope'" in json.loads(done.stdout)["reason"]
    with reading(state) as store:
        assert [d.event_id for d in store.dead_letters() if d.tenant == "acme"] != []


def test_state_or_bootstrap_is_required_exactly_once(state: Path) -> None:
    done = edgeledger("identity", "merge", "--tenant", "acme", "--keep", S1, "--absorb", S9, "--actor", "a",
                      check=False)
    assert done.returncode != 0 and "--state DIR" in done.stderr
