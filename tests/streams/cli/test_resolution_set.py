"""The shipped entity-resolution set: what ``tests.support.resolution_set`` writes, and the targets the
ledger meets on it (precision >= 0.99, recall >= 0.90, abstention <= 10 %)."""

from __future__ import annotations

from pathlib import Path

import pytest

from processors.resolution_eval import score
from state.open import reading
from streams.cli.eval_commands import read_labels, resolve_labels
from streams.cli.load import load_into
from tests.support import resolution_set


def test_the_shipped_files_are_what_the_generator_writes() -> None:
    assert resolution_set.EVENTS.read_bytes() == resolution_set.jsonl(resolution_set.events())
    assert resolution_set.LABELS.read_bytes() == resolution_set.jsonl(resolution_set.labels())


def test_the_set_is_large_and_adversarial_enough() -> None:
    labels = read_labels(resolution_set.LABELS)
    entities = {label.expected for label in labels if label.expected not in ("new", "abstain")}
    assert len(labels) >= 300 and len(entities) >= 60
    names = {label.name for label in labels}
    assert {"reports", "reports-service", "ReportingService", "the reporting pipeline", "svc-reports-prod"} <= names


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    state: Path = tmp_path_factory.mktemp("resolution") / "state"
    summary = load_into(state, [resolution_set.EVENTS], simulated_clock=True, ontology_path=None)
    assert summary["balanced"] and summary["dead_lettered"] == 0 and summary["queued_for_review"] == 0
    labels = read_labels(resolution_set.LABELS)
    with reading(state) as store:
        return score(labels, resolve_labels(store, labels))


def test_the_targets_are_met(report: dict) -> None:
    assert report["precision"] >= 0.99, report["failures"]
    assert report["recall"] >= 0.90, report["failures"]
    assert report["abstention_rate"] <= 0.10, report["failures"]
    assert report["blocking_recall"] >= 0.95


def test_the_two_companies_called_acme_are_never_guessed(report: dict) -> None:
    acme = [f for f in report["failures"] if f["mention"]["name"] in ("Acme", "ACME")]
    assert acme == []
