"""Path-level scoring on a hand-built set: every figure worked out here by hand."""

from __future__ import annotations

import pytest

from processors.evaluation import Case, CaseError, Outcome, case_from, score

FACTS = {("X", "T1"): ("owned_by", "cmdb"), ("X", "S1"): ("depends_on", "cmdb"), ("S1", "S2"): ("depends_on", "cmdb"),
         ("X", "P1"): ("owned_by", "cmdb"), ("P1", "R1"): ("requires", "policy"), ("X", "A"): ("depends_on", "cmdb"),
         ("A", "B"): ("depends_on", "hr"), ("B", "Q"): ("owned_by", "hr")}


def facts(_: Case, a: str, b: str) -> tuple[str, str] | None:
    return FACTS.get((a, b))


def case(id: str, hops: int, results: set[str] = frozenset(), paths: tuple = (), abstain: bool = False) -> Case:
    return Case(id, "t", "traverse", "X", {}, "2026-01-01", "2026-01-01", hops, abstain, frozenset(results),
                tuple(tuple(p) for p in paths))


def answered(results: set[str], *paths: tuple[tuple[str, ...], tuple[str, ...]], truncated: bool = False) -> Outcome:
    return Outcome("answer", frozenset(results), tuple(paths), truncated)


ABSTAINED = Outcome("unknown", frozenset(), (), False)
CASES = [
    case("A", 1, {"T1"}, [("X", "T1")]),                              # correct
    case("B", 2, {"S1", "S2"}, [("X", "S1"), ("X", "S1", "S2")]),     # incomplete: S2 missing
    case("C", 2, {"R1"}, [("X", "P1", "R1")]),                        # wrong: R9 returned too
    case("D", 1, abstain=True),                                       # unsupported: answered T1
    case("E", 1, abstain=True),                                       # correct abstention
    case("F", 3, {"Q"}, [("X", "A", "B", "Q")]),                      # false abstention
    case("G", 3, {"Q"}, [("X", "A", "B", "Q")]),                      # incomplete: Q by another path
]
OUTCOMES = {
    "A": answered({"T1"}, (("X", "T1"), ("owned_by",))),
    "B": answered({"S1"}, (("X", "S1"), ("depends_on",))),
    "C": answered({"R1", "R9"}, (("X", "P1", "R1"), ("owned_by", "requires")),
                  (("X", "P2", "R9"), ("owned_by", "governed_by")), truncated=True),
    "D": answered({"T1"}, (("X", "T1"), ("owned_by",))),
    "E": ABSTAINED,
    "F": ABSTAINED,
    "G": answered({"Q"}, (("X", "A", "C", "Q"), ("depends_on", "depends_on", "owned_by"))),
}


def test_every_figure_of_a_hand_built_set() -> None:
    report = score(CASES, OUTCOMES, facts)
    # answered: A B C D G (disposition answer); abstained: E F.
    assert (report["cases"], report["answered"], report["abstained"]) == (7, 5, 2)
    assert {k: report[k] for k in ("correct", "incomplete", "wrong", "unsupported", "correct_abstention",
                                   "false_abstention")} == {"correct": 1, "incomplete": 2, "wrong": 1,
                                                            "unsupported": 1, "correct_abstention": 1,
                                                            "false_abstention": 1}
    assert report["strict_answer_precision"] == 1 / 5       # A of the 5 answered
    assert report["answerable_success"] == 1 / 5            # A of the 5 not expecting abstention (all but D, E)
    assert report["unsupported_answer_rate"] == 1 / 2       # D of D, E
    assert report["correct_abstention_precision"] == 1 / 2  # E of the abstained E, F
    assert report["by_hops"] == {
        "1": {"cases": 3, "correct": 2, "accuracy": 2 / 3},  # A, D, E: A and E right
        "2": {"cases": 2, "correct": 0, "accuracy": 0.0},    # B, C
        "3": {"cases": 2, "correct": 0, "accuracy": 0.0},    # F, G
    }
    # Expected paths: A 1, B 2, C 1, F 1, G 1 = 6; returned among them: A's, B's (X,S1), C's (X,P1,R1) = 3.
    assert report["expected_path_recall"] == 3 / 6
    assert report["truncation_rate"] == 1 / 7               # C
    assert report["by_relationship"] == {
        "(no expected path)": {"cases": 2, "correct": 1, "accuracy": 0.5},  # D, E
        "depends_on": {"cases": 3, "correct": 0, "accuracy": 0.0},          # B, F, G
        "owned_by": {"cases": 4, "correct": 1, "accuracy": 0.25},           # A, C, F, G
        "requires": {"cases": 1, "correct": 0, "accuracy": 0.0},            # C
    }
    assert report["by_source"] == {
        "(no expected path)": {"cases": 2, "correct": 1, "accuracy": 0.5},
        "cmdb": {"cases": 5, "correct": 1, "accuracy": 0.2},                # A, B, C, F, G
        "hr": {"cases": 2, "correct": 0, "accuracy": 0.0},                  # F, G
        "policy": {"cases": 1, "correct": 0, "accuracy": 0.0},              # C
    }
    assert [(f["id"], f["kind"], f["first_failing_hop"], f["relationship"]) for f in report["failures"]] == [
        ("B", "incomplete", 2, "depends_on"),      # (X,S1) returned, S1->S2 not taken
        ("C", "wrong", 1, "owned_by"),             # (X,P2,R9) leaves every expected path at its first hop
        ("D", "unsupported", 0, None),             # the anchor should not have been answered for
        ("F", "false_abstention", 0, None),        # nothing returned, not even the anchor
        ("G", "incomplete", 2, "depends_on"),      # (X,A) shared, then C instead of B: A->B is depends_on
    ]


def test_a_ratio_with_nothing_to_judge_is_null_not_zero() -> None:
    empty = score([], {}, facts)
    assert all(empty[key] is None for key in ("strict_answer_precision", "answerable_success",
                                              "unsupported_answer_rate", "correct_abstention_precision",
                                              "expected_path_recall", "truncation_rate"))
    only_a = score(CASES[:1], OUTCOMES, facts)
    assert only_a["unsupported_answer_rate"] is None and only_a["correct_abstention_precision"] is None
    assert only_a["strict_answer_precision"] == 1.0


def test_a_missing_path_with_the_right_results_is_not_correct() -> None:
    report = score([CASES[6]], OUTCOMES, facts)
    assert report["incomplete"] == 1 and report["correct"] == 0 and report["answerable_success"] == 0.0


@pytest.mark.parametrize("expect", [{}, {"results": []}, {"results": ["T"], "abstain": True}, {"abstain": False}])
def test_a_case_must_say_what_it_expects(expect: dict) -> None:
    with pytest.raises(CaseError):
        case_from({"id": "x", "tenant": "t", "query": {"name": "owners-of", "entity": "X"}, "valid_at": "2026-01-01",
                   "known_at": "2026-01-01", "hops": 1, "expect": expect})


def test_a_case_reads_its_params_and_limits() -> None:
    query = {"name": "dependents-of", "entity": "X", "params": {"depth": 2}, "limits": {"max_paths": 5}}
    read = case_from({"id": "x", "tenant": "t", "query": query,
                      "valid_at": "2026-01-01", "known_at": "2026-02-01", "hops": 2,
                      "expect": {"results": ["A"], "paths": [["X", "A"]]}})
    assert read.params == {"depth": 2, "max_paths": 5} and read.paths == (("X", "A"),) and not read.abstain
