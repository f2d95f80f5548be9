"""Scoring labelled mentions (``processors.resolution_eval``), on hand-made outcomes."""

from __future__ import annotations

import pytest

from processors.resolution_eval import Label, LabelError, Resolved, label_from, score


def lab(expected: str, name: str | None = "x") -> Label:
    return Label("acme", "Service", name, None if name else "cmdb:S1", expected)


def test_the_measures() -> None:
    labels = [lab("Service:a"), lab("Service:b"), lab("Service:c"), lab("new"), lab("abstain")]
    resolved = [Resolved("Service:a", frozenset({"Service:a"})), Resolved("Service:x", frozenset({"Service:b"})),
                Resolved("abstain", frozenset()), Resolved("new", frozenset()), Resolved("abstain", frozenset())]
    report = score(labels, resolved)
    assert report["precision"] == 0.5 and report["recall"] == 1 / 3
    assert report["abstention_rate"] == 0.4 and report["wrong_matches"] == 1
    assert report["blocking_recall"] == 2 / 3


def test_no_matches_is_no_precision_not_zero() -> None:
    assert score([lab("new")], [Resolved("new", frozenset())])["precision"] is None


def test_a_label_must_say_what_it_expects() -> None:
    with pytest.raises(LabelError):
        label_from({"tenant": "acme", "mention": {"type": "Service", "name": "x"}, "expected": "maybe"})
    with pytest.raises(LabelError):
        label_from({"tenant": "acme", "mention": {"type": "Service"}, "expected": "new"})
