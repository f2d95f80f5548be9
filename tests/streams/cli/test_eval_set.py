"""The shipped path-evaluation set: derived from the generator's ground truth (never from the engine),
covering what it claims to, and the ledger's figures on it, which must not regress (README, docs/agents.md)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson

from streams.cli.load import load_into
from tests.support.cli import edgeledger
from tests.support.eval_set import CASES, PARAMETERS, build_cases, organisation

FIGURES = {"cases": 211, "answered": 171, "abstained": 40, "strict_answer_precision": 1.0,
           "answerable_success": 1.0, "unsupported_answer_rate": 0.0, "correct_abstention_precision": 1.0,
           "expected_path_recall": 1.0, "truncation_rate": 0.0}
"""The figures the README states for this set; a measure may rise, never fall (rates of bad outcomes: never rise)."""
LOWER_IS_BETTER = ("unsupported_answer_rate", "truncation_rate")


def shipped() -> list[dict]:
    return [orjson.loads(line) for line in CASES.read_bytes().splitlines()]


def test_the_shipped_set_is_what_the_generators_ground_truth_gives() -> None:
    assert shipped() == build_cases(organisation()), "run python -m tests.support.eval_set to derive it again"


def test_the_set_asks_what_it_claims_to() -> None:
    cases = shipped()
    assert len(cases) >= 200
    assert {case["hops"] for case in cases if "results" in case["expect"]} >= {1, 2, 3}
    assert sum(case["expect"].get("abstain", False) for case in cases) >= 30
    assert sum(":cmdb:" not in case["query"]["entity"] and "no such" not in case["query"]["entity"]
               for case in cases) >= 20, "alias anchors"
    assert sum(case["valid_at"] != case["known_at"] for case in cases) >= 20, "the world as known later"
    assert len({case["known_at"] for case in cases}) >= 10, "answers as believed at many past times"


def test_the_ledgers_figures_on_the_shipped_set_do_not_regress(tmp_path: Path) -> None:
    out, state = tmp_path / "org", tmp_path / "ledger"
    edgeledger("generate", *(f"--{key}={value}" for key, value in PARAMETERS.items()), "--out", str(out))
    load_into(state, [out / "history.jsonl"], simulated_clock=True, ontology_path=None)
    report = json.loads(edgeledger("eval", "paths", str(CASES), "--state", str(state), "--json").stdout)
    for key, figure in FIGURES.items():
        if key in ("cases", "answered", "abstained"):
            assert report[key] == figure, key
        elif key in LOWER_IS_BETTER:
            assert report[key] <= figure, (key, report["failures"])
        else:
            assert report[key] >= figure, (key, report["failures"])
    assert {hops: tally["accuracy"] for hops, tally in report["by_hops"].items()} == {"1": 1.0, "2": 1.0, "3": 1.0}
