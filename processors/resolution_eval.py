"""Scoring entity resolution against labelled mentions (``edgeledger eval resolution``).

Each label names a mention and what a careful person says it is: an entity (``Type:id``), ``new`` (no
entity the ledger knows) or ``abstain`` (a person could not tell either). The resolver's outcome is an
entity (a match, by identifier, alias or the fuzzy matcher), ``new`` or ``abstain``. Pure: labels and
outcomes come in; a ratio with nothing to divide by is ``None``.

- precision: correct matches / matches (any outcome that is an entity)
- recall: correct matches / labels whose expected is an entity
- abstention_rate: abstentions / labels
- wrong_matches: matches to another entity than expected (expected ``new`` or ``abstain`` included)
- blocking_recall: among name-only labels whose expected is an entity, the share whose entity was
  among the blocked candidates (what the matcher could have picked from)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NOT_AN_ENTITY = ("new", "abstain")


class LabelError(ValueError):
    """A label line that does not say what it expects."""


@dataclass(frozen=True)
class Label:
    tenant: str
    type: str
    name: str | None
    id: str | None
    expected: str


@dataclass(frozen=True)
class Resolved:
    """What the resolver did with a label's mention: ``outcome`` an entity id, ``new`` or ``abstain``;
    ``blocked`` the entities blocking offered (None for a mention with an id: no blocking)."""

    outcome: str
    blocked: frozenset[str] | None


def label_from(data: Mapping[str, Any]) -> Label:
    try:
        mention, expected = data["mention"], str(data["expected"])
        label = Label(str(data["tenant"]), str(mention["type"]), mention.get("name"), mention.get("id"), expected)
    except (KeyError, TypeError, AttributeError) as error:
        raise LabelError(f"missing or malformed {error}") from None
    if label.name is None and label.id is None:
        raise LabelError("a mention needs a name or an id")
    if expected not in NOT_AN_ENTITY and ":" not in expected:
        raise LabelError(f"expected {expected!r}: give Type:id, 'new' or 'abstain'")
    return label


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def score(labels: Sequence[Label], resolved: Sequence[Resolved]) -> dict[str, Any]:
    matches = correct = wrong = abstained = expected_entities = blocked_total = blocked_found = 0
    failures: list[dict[str, Any]] = []
    for label, result in zip(labels, resolved, strict=True):
        is_entity = label.expected not in NOT_AN_ENTITY
        expected_entities += is_entity
        if result.outcome == "abstain":
            abstained += 1
        elif result.outcome != "new":
            matches += 1
            if result.outcome == label.expected:
                correct += 1
            else:
                wrong += 1
        if is_entity and result.blocked is not None:
            blocked_total += 1
            blocked_found += label.expected in result.blocked
        if result.outcome != label.expected:
            failures.append({"mention": {"type": label.type, "name": label.name, "id": label.id},
                             "expected": label.expected, "outcome": result.outcome})
    return {"mentions": len(labels), "matches": matches, "correct_matches": correct,
            "precision": _ratio(correct, matches), "recall": _ratio(correct, expected_entities),
            "abstention_rate": _ratio(abstained, len(labels)), "abstentions": abstained, "wrong_matches": wrong,
            "blocking_recall": _ratio(blocked_found, blocked_total), "failures": failures}
