"""`edgeledger eval paths` on the demo ledger: the late correction makes one answer's belief wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streams.cli.demo import DEMO_EVENTS
from streams.cli.load import load_into
from tests.support.cli import edgeledger

CONNECTOR, ANALYTICS = "Component:cmdb:CI0042", "Team:hr:T-ANA"
OWNED_BY_ANALYTICS = {"results": [ANALYTICS], "paths": [[CONNECTOR, ANALYTICS]]}


def case(id: str, known_at: str, expect: dict, entity: str = "settlement connector") -> dict:
    return {"id": id, "tenant": "acme", "query": {"name": "owners-of", "entity": entity}, "valid_at": "2026-04-22",
            "known_at": known_at, "hops": 1, "expect": expect}


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("eval") / "ledger"
    load_into(path, [Path(DEMO_EVENTS)], simulated_clock=True, ontology_path=None)
    return path


def test_eval_paths_scores_the_answers_as_of_each_cases_clocks(state: Path, tmp_path: Path) -> None:
    cases = tmp_path / "cases.jsonl"
    cases.write_text("".join(json.dumps(c) + "\n" for c in [
        case("believed", "2026-04-22", OWNED_BY_ANALYTICS),  # what the ledger believed on 22 April: right
        case("corrected", "2026-06-01", OWNED_BY_ANALYTICS),  # known after the correction: Platform, so wrong
        case("nobody", "2026-06-01", {"abstain": True}, entity="nobody at all"),
    ]))
    report = json.loads(edgeledger("eval", "paths", str(cases), "--state", str(state), "--json").stdout)
    assert (report["cases"], report["answered"], report["abstained"]) == (3, 2, 1)
    assert report["strict_answer_precision"] == 0.5 and report["answerable_success"] == 0.5
    assert report["unsupported_answer_rate"] == 0.0 and report["correct_abstention_precision"] == 1.0
    assert report["failures"] == [{"id": "corrected", "kind": "wrong", "first_failing_hop": 1,
                                   "relationship": "owned_by", "disposition": "answer"}]
    text = edgeledger("eval", "paths", str(cases), "--state", str(state)).stdout
    assert "FAIL corrected: wrong at hop 1 (owned_by)" in text and "1-hop: 2/3 correct" in text


def test_a_malformed_case_is_one_line_naming_it(state: Path, tmp_path: Path) -> None:
    cases = tmp_path / "bad.jsonl"
    cases.write_text(json.dumps(case("empty", "2026-06-01", {"results": []})) + "\n")
    done = edgeledger("eval", "paths", str(cases), "--state", str(state), check=False)
    assert done.returncode != 0 and f"{cases}:1" in done.stderr and "abstain" in done.stderr
