"""`edgeledger review list --json` and `review decide` on a state directory."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import edgeledger

EVENTS = [
    {"kind": "change", "event_id": "c-1", "tenant": "acme", "source": {"system": "cmdb", "record": "ci/S1"},
     "detected_at": "2026-03-01T00:00:00Z",
     "assert": [{"src": {"type": "Service", "id": "cmdb:S1", "name": "reports"}, "rel": "owned_by",
                 "dst": {"type": "Team", "id": "hr:T1", "name": "Platform"}}]},
    {"kind": "change", "event_id": "w-1", "tenant": "acme", "source": {"system": "wiki"},
     "detected_at": "2026-03-02T00:00:00Z",
     "assert": [{"src": {"type": "Service", "name": "reprots"}, "rel": "depends_on",
                 "dst": {"type": "Service", "id": "cmdb:S2", "name": "billing"}}]},
]


def test_a_parked_mention_is_listed_with_its_candidates_and_decided_once(tmp_path: Path) -> None:
    events, state = tmp_path / "events.jsonl", str(tmp_path / "state")
    events.write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    edgeledger("load", str(events), "--state", state)
    (item,) = json.loads(edgeledger("review", "list", "--state", state, "--tenant", "acme", "--json").stdout)
    assert (item["category"], item["candidates"]) == ("ambiguous_entity", ["Service:cmdb:S1"])
    decided = edgeledger("review", "decide", item["review_id"], "--state", state, "--tenant", "acme",
                         "--choose", "Service:cmdb:S1", "--actor", "carol", "--reason", "typo of reports")
    assert json.loads(decided.stdout)["decision"] == "choose"
    assert json.loads(edgeledger("review", "list", "--state", state, "--tenant", "acme", "--json").stdout) == []
    answer = json.loads(edgeledger("query", "dependents-of", "--state", state, "--tenant", "acme",
                                   "--entity", "Service:cmdb:S2", "--json").stdout)
    assert [r["entity"] for r in answer["results"]] == ["Service:cmdb:S1"]
    history = json.loads(edgeledger("identity", "history", "--state", state, "--tenant", "acme", "--entity",
                                    "Service:cmdb:S1", "--json").stdout)
    decisions = [h for h in history if h["kind"] == "decision"]
    assert [(h["actor"], h["reason"], h["decision"], h["role"]) for h in decisions] == [
        ("carol", "typo of reports", "choose", "chosen")]
    alias = history[-2]
    assert (alias["kind"], alias["other"], alias["tx_at"]) == ("alias", "reprots", decisions[0]["tx_at"]), \
        "the decision records the mention's name as an alias in the same transaction"
    again = edgeledger("review", "decide", item["review_id"], "--state", state, "--tenant", "acme", "--reject",
                       "--actor", "dan", "--reason", "no", check=False)
    assert again.returncode != 0 and "already decided" in again.stderr


def test_a_decision_needs_exactly_one_outcome(tmp_path: Path) -> None:
    done = edgeledger("review", "decide", "r-1", "--state", str(tmp_path), "--tenant", "acme", "--new", "--reject",
                      "--actor", "a", "--reason", "b", check=False)
    assert done.returncode != 0 and "exactly one" in done.stderr
