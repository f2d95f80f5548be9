"""Path-level evaluation of answers: each case's expected results and paths (or expected abstention)
against what the engine answered, scored into the measures ``edgeledger eval paths`` prints.

Pure: the cases, the outcomes and a lookup of a hop's relationship and source come in; nothing is read
or timed here. A ratio whose denominator is 0 is ``None`` (JSON null): "no case to judge", never 0 or 1.

A case is *answered* when its disposition is ``answer``, else *abstained*. An answered case that
expected results is **correct** when its results equal them and every expected path was returned,
**wrong** when it returned a result not expected, else **incomplete** (a strict subset, or every result
but an expected path missing); one that expected abstention is **unsupported**. An abstained case is a
**correct abstention** when abstention was expected, else a **false abstention**.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Literal

Verdict = Literal["correct", "incomplete", "wrong", "unsupported", "correct_abstention", "false_abstention"]
FAILURES: tuple[Verdict, ...] = ("wrong", "incomplete", "unsupported", "false_abstention")


class CaseError(ValueError):
    """A case that does not say what it expects."""


@dataclass(frozen=True)
class Case:
    id: str
    tenant: str
    name: str
    entity: str
    params: Mapping[str, Any]
    valid_at: str
    known_at: str
    hops: int
    abstain: bool
    results: frozenset[str] = frozenset()
    paths: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class Outcome:
    """What the engine answered: disposition, results, and each path's nodes and relationships per hop."""

    disposition: str
    results: frozenset[str]
    paths: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]
    truncated: bool


HopFacts = Callable[[Case, str, str], tuple[str, str] | None]
"""(case, from node, to node) -> (relationship, source system) of an edge between them as the case's
clocks see it, or None: how a hop the engine missed is named."""


def case_from(data: Mapping[str, Any]) -> Case:
    """A case from its JSON; ``CaseError`` saying what is missing or contradictory."""
    try:
        query, expect = data["query"], data["expect"]
        abstain = expect.get("abstain") is True
        results = frozenset(expect.get("results", ()))
        if abstain == bool(results) or ("results" in expect and abstain):
            raise CaseError("expect: give either non-empty results (and optionally paths) or abstain: true")
        params = {**query.get("params", {}), **query.get("limits", {})}
        return Case(str(data["id"]), str(data["tenant"]), str(query["name"]), str(query["entity"]), params,
                    str(data["valid_at"]), str(data["known_at"]), int(data["hops"]), abstain, results,
                    tuple(tuple(path) for path in expect.get("paths", ())))
    except (KeyError, TypeError, AttributeError) as error:
        raise CaseError(f"case {data.get('id', '?') if isinstance(data, Mapping) else '?'}: missing or malformed "
                        f"{error}") from None


def verdict(case: Case, outcome: Outcome) -> Verdict:
    if outcome.disposition != "answer":
        return "correct_abstention" if case.abstain else "false_abstention"
    if case.abstain:
        return "unsupported"
    if outcome.results - case.results:
        return "wrong"
    returned = {nodes for nodes, _ in outcome.paths}
    if outcome.results == case.results and all(path in returned for path in case.paths):
        return "correct"
    return "incomplete"


def _common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def first_failing_hop(case: Case, outcome: Outcome, kind: Verdict, facts: HopFacts) -> tuple[int | None, str | None]:
    """The hop (1 = the anchor's first edge; 0 = the anchor itself) where the answer first left the
    expected paths, and that hop's relationship. A wrong answer is judged on its unexpected path (its
    relationship as returned); a missing one on the first expected path not returned (its relationship
    from ``facts``, None when the ledger holds no such edge)."""
    if kind == "unsupported":
        return 0, None
    if kind == "wrong":
        for nodes, rels in outcome.paths:
            if nodes[-1] not in case.results:
                reached = max((_common_prefix(nodes, path) for path in case.paths), default=1)
                hop = max(reached, 1)
                return hop, rels[hop - 1] if hop - 1 < len(rels) else None
        return None, None
    returned = [nodes for nodes, _ in outcome.paths]
    for path in case.paths:
        if path in returned:
            continue
        reached = max((_common_prefix(path, nodes) for nodes in returned), default=0)
        if reached == 0 and outcome.disposition == "answer":
            reached = 1  # the anchor resolved: it is every returned path's first node
        if reached == 0 or reached >= len(path):
            return 0, None
        hop = facts(case, path[reached - 1], path[reached])
        return reached, hop[0] if hop is not None else None
    return None, None


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


@dataclass
class _Tally:
    cases: int = 0
    correct: int = 0

    def add(self, good: bool) -> None:
        self.cases += 1
        self.correct += good

    def as_json(self) -> dict[str, Any]:
        return {"cases": self.cases, "correct": self.correct, "accuracy": _ratio(self.correct, self.cases)}


@dataclass
class _Segments:
    by: dict[str, _Tally] = field(default_factory=dict)

    def add(self, keys: set[str], good: bool) -> None:
        for key in keys:
            self.by.setdefault(key, _Tally()).add(good)

    def as_json(self) -> dict[str, Any]:
        return {key: self.by[key].as_json() for key in sorted(self.by)}


def score(cases: Sequence[Case], outcomes: Mapping[str, Outcome], facts: HopFacts) -> dict[str, Any]:
    """The measures over ``cases``, each judged on ``outcomes[case.id]``."""
    counts = dict.fromkeys(("correct", "incomplete", "wrong", "unsupported", "correct_abstention",
                            "false_abstention"), 0)
    by_hops: dict[int, _Tally] = {}
    relationships, sources = _Segments(), _Segments()
    expected_paths = returned_paths = truncated = 0
    failures = []
    for case in cases:
        outcome = outcomes[case.id]
        kind = verdict(case, outcome)
        counts[kind] += 1
        good = kind in ("correct", "correct_abstention")
        by_hops.setdefault(case.hops, _Tally()).add(good)
        hop_facts = [facts(case, a, b) for path in case.paths for a, b in pairwise(path)]
        missing = "(not in the ledger)" if case.paths else "(no expected path)"
        relationships.add({f[0] for f in hop_facts if f is not None} or {missing}, good)
        sources.add({f[1] for f in hop_facts if f is not None} or {missing}, good)
        returned = {nodes for nodes, _ in outcome.paths}
        expected_paths += len(case.paths)
        returned_paths += sum(path in returned for path in case.paths)
        truncated += outcome.truncated
        if kind in FAILURES:
            hop, rel = first_failing_hop(case, outcome, kind, facts)
            failures.append({"id": case.id, "kind": kind, "first_failing_hop": hop, "relationship": rel,
                             "disposition": outcome.disposition})
    answered = counts["correct"] + counts["incomplete"] + counts["wrong"] + counts["unsupported"]
    abstained = counts["correct_abstention"] + counts["false_abstention"]
    expecting_abstention = counts["unsupported"] + counts["correct_abstention"]
    answerable = len(cases) - expecting_abstention
    return {
        "cases": len(cases), "answered": answered, "abstained": abstained, **counts,
        "strict_answer_precision": _ratio(counts["correct"], answered),
        "answerable_success": _ratio(counts["correct"], answerable),
        "unsupported_answer_rate": _ratio(counts["unsupported"], expecting_abstention),
        "correct_abstention_precision": _ratio(counts["correct_abstention"], abstained),
        "by_hops": {str(hops): by_hops[hops].as_json() for hops in sorted(by_hops)},
        "expected_path_recall": _ratio(returned_paths, expected_paths),
        "truncation_rate": _ratio(truncated, len(cases)),
        "by_relationship": relationships.as_json(),
        "by_source": sources.as_json(),
        "failures": failures,
    }
