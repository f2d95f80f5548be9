"""`edgeledger traces replay|show|list|affected` on the replay scenario, loaded from its event file."""

import json
from pathlib import Path

import pytest

from schemas.times import parse_micros
from state.kv import MemoryKV
from state.replays import replays_since
from state.trace_index import TraceIndex
from tests.state.test_replays import NOW, TRACES, late_changes, organisation
from tests.streams.cli.test_main import edgeledger, edgeledger_process
from tests.support.harness import Ledger


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> tuple[Path, Ledger]:
    ledger = Ledger()
    organisation(ledger)
    ledger.at("2026-04-23T00:00:00Z").send(*TRACES)
    late_changes(ledger)
    folder = tmp_path_factory.mktemp("replay")
    events = folder / "events.jsonl"
    events.write_text("".join((line if isinstance(line, str) else line.decode()) + "\n" for line in ledger.lines))
    edgeledger_process("load", str(events), "--state", str(folder / "state"), "--simulated-clock")
    return folder / "state", ledger


def listed(state: Path, *args: str) -> list[dict]:
    return json.loads(edgeledger("traces", *args, "--state", str(state), "--tenant", "acme", "--json").stdout)


def test_replay_lists_the_touched_traces_as_the_library_does(scenario) -> None:
    state, ledger = scenario
    found = listed(state, "replay", "--known-at", NOW)
    expected = [r.as_json() for r in replays_since(ledger.store, TraceIndex(MemoryKV()), ledger.engine, "acme",
                                                   None, parse_micros(NOW))]
    assert [(r["trace_id"], r["verdict"]) for r in found] == [(r["trace_id"], r["verdict"]) for r in expected]
    first = found[0]
    assert {"trace_id", "action", "valid_at", "known_at", "verdict", "before", "after", "added", "removed",
            "changes"} <= set(first)
    assert set(first["before"]) >= {"disposition", "results"}
    assert {"event_id", "old_edge_ids", "new_edge_ids"} <= set(first["changes"][0])
    assert listed(state, "replay", "--known-at", NOW, "--since", "2026-05-04") == []
    text = edgeledger("traces", "replay", "--state", str(state), "--tenant", "acme", "--known-at", NOW).stdout
    assert text.splitlines()[0].startswith("dep-c-ext  [external_change]") and "changed" in text


def test_show_explains_one_trace_and_list_lists_them_all(scenario) -> None:
    state, _ = scenario
    shown = json.loads(edgeledger("traces", "show", "own-c-ext", "--state", str(state), "--tenant", "acme",
                                  "--known-at", NOW, "--json").stdout)
    assert shown["read"] == {"read_set": [["Component:cmdb:CI0042", "owned_by", "out"]],
                             "named": ["Component:cmdb:CI0042", "Team:hr:T-ANA"]}
    assert shown["replay"]["verdict"] == "changed"
    untouched = json.loads(edgeledger("traces", "show", "own-s5", "--state", str(state), "--tenant", "acme",
                                      "--json").stdout)
    assert untouched["replay"] is None
    missing = edgeledger("traces", "show", "nope", "--state", str(state), "--tenant", "acme", check=False)
    assert missing.returncode != 0 and "no trace 'nope'" in missing.stderr
    assert sorted(t["trace_id"] for t in listed(state, "list")) == sorted(t["trace_id"] for t in TRACES)


def test_affected_now_includes_late_additions(scenario) -> None:
    state, _ = scenario
    ids = [t["trace_id"] for t in listed(state, "affected")]
    assert "dep-c-ext" in ids and "appr-c" in ids
    assert "own-s5" not in ids
