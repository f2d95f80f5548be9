"""`edgeledger eval paths`: run each case's query on the ledger as of its clocks and score the answers
(``processors.evaluation``); `edgeledger eval resolution`: resolve labelled mentions against the ledger,
writing nothing, and score them (``processors.resolution_eval``)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from pydantic import ValidationError

from processors.evaluation import Case, CaseError, Outcome, case_from, score
from processors.freshness import stale_sources_for_queries
from processors.identity import Mention, MentionResolver, normalise_name
from processors.queries import QueryEngine
from processors.query_requests import InvalidQuery, request_from
from processors.resolution_eval import Label, LabelError, Resolved, label_from
from processors.resolution_eval import score as score_resolution
from processors.traversal import PlanRefused
from schemas.ontology import Ontology
from schemas.query_params import PARAMS, parameter_errors
from schemas.results import QueryResult
from schemas.slo import slo_or_default
from schemas.times import parse_micros
from state.open import reading
from state.store import LedgerStore
from streams.cli.options import AsJson, CliError, OntologyFile, StateDir, emit, ontology_from
from streams.processor import wall_clock_micros

eval_app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                       help="Measure answers against labelled cases.")


def read_cases(path: Path) -> list[Case]:
    cases = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            cases.append(case_from(orjson.loads(line)))
        except (orjson.JSONDecodeError, CaseError) as error:
            raise CliError(f"{path}:{number}: {error}") from None
    if len({case.id for case in cases}) != len(cases):
        raise CliError(f"{path}: case ids repeat; each case needs its own id")
    return cases


def outcome_of(result: QueryResult) -> Outcome:
    paths = tuple((tuple(path.nodes), tuple(result.edges[e].rel for e in path.edges)) for path in result.paths)
    return Outcome(result.disposition, frozenset(r.entity for r in result.results), paths, result.truncated)


def answer(case: Case, engine: QueryEngine, ontology: Ontology) -> QueryResult:
    model = PARAMS.get(case.name)
    if model is None:
        raise CliError(f"case {case.id}: unknown query {case.name!r}")
    try:
        params = model.model_validate({"entity": case.entity, "valid_at": case.valid_at, "known_at": case.known_at,
                                       **case.params})
        return engine.run(request_from(case.name, case.tenant, params, ontology, wall_clock_micros()))
    except ValidationError as error:
        raise CliError(f"case {case.id}: {parameter_errors(error, case.name)}") from None
    except (InvalidQuery, PlanRefused) as error:
        raise CliError(f"case {case.id}: {error}") from None


def hop_facts(store: LedgerStore) -> Any:
    """The relationship and source of an edge from ``a`` to ``b`` (either direction) as the case's clocks
    see it: what names a hop the engine did not take."""

    def facts(case: Case, a: str, b: str) -> tuple[str, str] | None:
        valid, known = parse_micros(case.valid_at), parse_micros(case.known_at)
        for version in store.adjacent_any(case.tenant, a):
            if {version.src, version.dst} == {a, b} and version.known_at(known) and version.valid_at(valid):
                return version.rel, version.authority
        return None

    return facts


def evaluate(state: Path, cases: Iterable[Case], ontology: Ontology) -> dict[str, Any]:
    """Every case answered on the ledger at ``state`` and scored."""
    cases = list(cases)
    with reading(state) as store:
        stale = stale_sources_for_queries(ontology, slo_or_default(None), store.source_activity)
        engine = QueryEngine(store, ontology, stale_sources=stale)
        outcomes = {case.id: outcome_of(answer(case, engine, ontology)) for case in cases}
        return score(cases, outcomes, hop_facts(store))


def _figure(value: float | None) -> str:
    return "n/a (0/0)" if value is None else f"{value:.3f}"


@eval_app.command("paths")
def paths(
    cases_file: Annotated[Path, typer.Argument(help="JSON lines, one case each (docs/agents.md).")],
    state: StateDir,
    ontology_file: OntologyFile = None,
    as_json: AsJson = False,
) -> None:
    """Path-level answer measures: strict answer precision, answerable success, unsupported answers,
    correct abstentions, accuracy by hop count, and the first failing hop of every failure."""
    report = evaluate(state, read_cases(cases_file), ontology_from(ontology_file))
    if as_json:
        emit(report)
        return
    lines = [f"{report['cases']} cases: {report['answered']} answered, {report['abstained']} abstained"]
    for key in ("strict_answer_precision", "answerable_success", "unsupported_answer_rate",
                "correct_abstention_precision", "expected_path_recall", "truncation_rate"):
        lines.append(f"  {key:<30} {_figure(report[key])}")
    for hops, tally in report["by_hops"].items():
        lines.append(f"  {hops}-hop: {tally['correct']}/{tally['cases']} correct ({_figure(tally['accuracy'])})")
    for failure in report["failures"]:
        lines.append(f"  FAIL {failure['id']}: {failure['kind']} at hop {failure['first_failing_hop']} "
                     f"({failure['relationship'] or '-'}), disposition {failure['disposition']}")
    sys.stdout.write("\n".join(lines) + "\n")


def read_labels(path: Path) -> list[Label]:
    labels = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            labels.append(label_from(orjson.loads(line)))
        except (orjson.JSONDecodeError, LabelError) as error:
            raise CliError(f"{path}:{number}: {error}") from None
    return labels


def resolve_labels(store: LedgerStore, labels: Iterable[Label]) -> list[Resolved]:
    """Each label's mention resolved against the store as a change event's would be, and nothing written:
    each has a resolver of its own, never committed."""
    resolved = []
    for label in labels:
        resolver = MentionResolver(store, label.tenant)
        resolution = resolver.resolve(Mention(label.type, label.id, label.name))
        blocked = None
        if label.id is None and label.name is not None:
            blocked = frozenset(c.entity_id for c in resolver.candidates(label.type, normalise_name(label.name)))
        outcome = {"new": "new", "ambiguous": "abstain"}.get(resolution.kind, resolution.entity_id or "new")
        resolved.append(Resolved(outcome, blocked))
    return resolved


@eval_app.command("resolution")
def resolution(
    labels_file: Annotated[Path, typer.Argument(help="JSON lines: tenant, mention, expected (docs/identity.md).")],
    state: StateDir,
    as_json: AsJson = False,
) -> None:
    """Entity resolution against labelled mentions, read only: precision, recall, abstention rate, wrong
    matches and blocking recall."""
    labels = read_labels(labels_file)
    with reading(state) as store:
        report = score_resolution(labels, resolve_labels(store, labels))
    if as_json:
        emit(report)
        return
    lines = [f"{report['mentions']} mentions: {report['matches']} matched, {report['abstentions']} abstained"]
    for key in ("precision", "recall", "abstention_rate", "blocking_recall"):
        lines.append(f"  {key:<16} {_figure(report[key])}")
    lines.append(f"  {'wrong_matches':<16} {report['wrong_matches']}")
    for failure in report["failures"]:
        mention = failure["mention"]
        lines.append(f"  {mention['type']} {mention['name'] or mention['id']!r}: expected {failure['expected']}, "
                     f"got {failure['outcome']}")
    sys.stdout.write("\n".join(lines) + "\n")
