"""The read commands: traversals, history, corrections, the review queue, traces, dead letters."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from processors.freshness import stale_sources_for_queries
from processors.model import EdgeVersion
from processors.queries import QueryEngine
from processors.query_requests import UnknownToOntology, history_request_from, request_from
from schemas.query_params import (
    MAX_DEGREE,
    MAX_DEPTH,
    MAX_EVIDENCE_TOKENS,
    MAX_EXPANSIONS,
    MAX_PATHS,
    PARAMS,
    QUERY_NAMES,
    HistoryParams,
    parameter_errors,
)
from schemas.slo import slo_or_default
from schemas.times import format_micros
from state.open import reading
from streams import listings
from streams.cli import render
from streams.cli.options import (
    AsJson,
    CliError,
    Entity,
    KnownAt,
    OntologyFile,
    RecordedBy,
    StateDir,
    Tenant,
    ValidAt,
    default_ontology_hint,
    emit,
    emit_listing,
    flag,
    instant,
    ontology_from,
    refuse_empty_tenant,
)
from streams.processor import wall_clock_micros


def query(
    name: Annotated[str, typer.Argument(help=f"One of: {', '.join(QUERY_NAMES)}.")],
    state: StateDir,
    tenant: Tenant,
    entity: Entity,
    valid_at: ValidAt = None,
    known_at: KnownAt = None,
    depth: Annotated[int | None, typer.Option(
        help="Hops of depends_on for dependents/approvals/neighbourhood. Default: 1.")] = None,
    edges: Annotated[str | None, typer.Option("--edges", help="traverse: rel:out|in|both,...")] = None,
    types: Annotated[str | None, typer.Option("--types", help="Only enter nodes of these types (comma list).")] = None,
    changed_from: Annotated[str | None, typer.Option("--from", help="changed-between: window start.")] = None,
    changed_to: Annotated[str | None, typer.Option("--to", help="changed-between: window end.")] = None,
    axis: Annotated[str | None, typer.Option(
        help="changed-between: 'valid' (world, the default) or 'tx' (what we learned).")] = None,
    max_depth: Annotated[int, typer.Option()] = MAX_DEPTH,
    max_expansions: Annotated[int, typer.Option(help="Edge records read.")] = MAX_EXPANSIONS,
    max_paths: Annotated[int, typer.Option()] = MAX_PATHS,
    max_evidence_tokens: Annotated[int, typer.Option(help="1 token ~ 4 chars.")] = MAX_EVIDENCE_TOKENS,
    max_degree: Annotated[int, typer.Option(help="Per-node cap for hubs.")] = MAX_DEGREE,
    slo: Annotated[Path | None, typer.Option(
        "--slo", help="Source SLOs for coverage (default: bundled); stale sources make empty answers unknown.")] = None,
    ontology_file: OntologyFile = None,
    as_json: AsJson = False,
) -> None:
    """Run a bounded traversal as of --valid-at and --known-at. The parameters and their bounds are
    those of the HTTP API; an option the query does not take is refused."""
    model = PARAMS.get(name)
    if model is None:
        raise CliError(f"unknown query {name!r}; one of: {', '.join(QUERY_NAMES)}")
    given = {"entity": entity, "valid_at": valid_at, "known_at": known_at, "depth": depth, "edges": edges,
             "types": types, "from": changed_from, "to": changed_to, "axis": axis, "max_depth": max_depth,
             "max_expansions": max_expansions, "max_paths": max_paths, "max_evidence_tokens": max_evidence_tokens,
             "max_degree": max_degree}
    try:
        params = model.model_validate({key: value for key, value in given.items() if value is not None})
    except ValidationError as error:
        raise CliError(parameter_errors(error, name, flag)) from None
    ontology = ontology_from(ontology_file)
    slos = slo_or_default(slo)
    try:
        request = request_from(name, tenant, params, ontology, wall_clock_micros(), flag)
    except UnknownToOntology as error:
        raise CliError(str(error) + default_ontology_hint(ontology_file)) from None
    with reading(state) as store:
        # Judged at --known-at on the activity recorded by then: a past answer's coverage reproduces.
        stale = stale_sources_for_queries(ontology, slos, store.source_activity)
        result = QueryEngine(store, ontology, stale_sources=stale).run(request)
    if as_json:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        sys.stdout.write(render.query_text(result))


def history(
    state: StateDir,
    tenant: Tenant,
    entity: Entity,
    rel: Annotated[str | None, typer.Option("--rel", help="Only this relationship.")] = None,
    known_at: KnownAt = None,
    valid_at: Annotated[str | None, typer.Option("--valid-at", help="Only versions valid at this time.")] = None,
    ontology_file: OntologyFile = None,
    as_json: AsJson = False,
) -> None:
    """Every version of every edge at an entity, with both intervals."""
    given = {"entity": entity, "rel": rel, "known_at": known_at, "valid_at": valid_at}
    try:
        params = HistoryParams.model_validate({key: value for key, value in given.items() if value is not None})
    except ValidationError as error:
        raise CliError(parameter_errors(error, "history", flag)) from None
    ontology = ontology_from(ontology_file)
    try:
        request = history_request_from(tenant, params, ontology, wall_clock_micros(), flag)
    except UnknownToOntology as error:
        raise CliError(str(error) + default_ontology_hint(ontology_file)) from None
    with reading(state) as store:
        result = QueryEngine(store, ontology).history(*request, store)
    if as_json:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        sys.stdout.write(render.history_text(result))


def corrections(state: StateDir, tenant: Tenant, known_at: RecordedBy = None, as_json: AsJson = False) -> None:
    """Correction events: which edge versions a change of belief closed and which it appended."""
    known = instant(known_at, "--known-at")
    with reading(state) as store:
        items = listings.correction_items(store, tenant, known)
    emit_listing(items, as_json, lambda item: (
        f"{item['tx_at']}  {item['event_id']:<16} {item['cause']:<14} old {', '.join(item['old_edge_ids'])}"
        f"  ->  new {', '.join(item['new_edge_ids']) or '(none)'}"), "no corrections")


def review_list(state: StateDir, tenant: Tenant, known_at: RecordedBy = None, as_json: AsJson = False) -> None:
    """Items waiting for a person: ambiguous entities, parked commands, cardinality conflicts."""
    known = instant(known_at, "--known-at")
    with reading(state) as store:
        items = listings.review_items(store, tenant, known)
    emit_listing(items, as_json, lambda item: f"{item['review_id']}  {item['tx_at']}  {item['category']:<22} "
                                              f"{item['reason']}", "the review queue is empty")


def traces_affected(state: StateDir, tenant: Tenant, known_at: RecordedBy = None, as_json: AsJson = False,
                    ontology_file: OntologyFile = None) -> None:
    """Traces whose edges were later corrected or revoked, action-bearing first.

    A trace recorded without edge ids has them re-derived by re-running its query as of its two
    clocks; one whose query cannot be re-run is listed as `edge_ids unknown` with the reason."""
    from processors.replay import affected_traces
    from streams.cli.trace_commands import replay_items, with_additions

    known = instant(known_at, "--known-at")
    with reading(state) as store:

        def version_as_known(edge_id: str) -> EdgeVersion | None:
            version = store.version(tenant, edge_id)
            return version.as_known_at(known) if version is not None else None

        recorded = (trace for trace in store.traces(tenant) if trace.tx_at <= known)
        found = affected_traces(recorded, version_as_known, QueryEngine(store, ontology_from(ontology_file)))
    # Late additions too: the traces whose read set a change touched (``traces replay`` finds them).
    found = with_additions(found, replay_items(state, tenant, None, known, ontology_from(ontology_file)))
    items = [
        {"trace_id": a.trace.trace_id, "action": a.trace.action, "query": a.trace.query,
         "valid_at": format_micros(a.trace.valid_at), "known_at": format_micros(a.trace.known_at),
         "status": a.status, "edge_ids_source": a.edge_ids_source, "edge_ids": list(a.edge_ids),
         "corrected_edges": [{"edge_id": v.edge_id, "closed_at": format_micros(v.tx_to)} for v in a.corrected]}
        for a in found
    ]
    if as_json:
        emit(items)
        return
    for a in found:
        head = f"{a.trace.trace_id}  [{a.trace.action}]  known at {format_micros(a.trace.known_at)}"
        if a.unknown_reason is not None:
            sys.stdout.write(f"{head}  {a.status}\n")
            continue
        edges = ", ".join(v.edge_id for v in a.corrected)
        sys.stdout.write(f"{head}  corrected: {edges}  (edge ids {a.edge_ids_source})\n")
    if not items:
        sys.stdout.write("no recorded answer used an edge that was later corrected\n")


def dead_letters(
    state: StateDir,
    tenant: Annotated[str | None, typer.Option(
        "--tenant", help="Tenant whose dead letters to list; this or --untenanted is required.",
        callback=refuse_empty_tenant)] = None,
    untenanted: Annotated[bool, typer.Option(
        "--untenanted", help="Instead, the dead letters of events that named no tenant (malformed beyond "
                             "telling whose they were); for operators.")] = False,
    known_at: RecordedBy = None,
    as_json: AsJson = False,
) -> None:
    """Events that could not be applied, with the stage and the reason, and the original text."""
    if (tenant is None) == (not untenanted):
        raise CliError("give --tenant T, or --untenanted for events that named no tenant (exactly one of them)")
    known = instant(known_at, "--known-at")
    with reading(state) as store:
        items = listings.dead_letter_items(store, None if untenanted else tenant, known)
    emit_listing(items, as_json, _dead_letter_line, "no dead letters")


def _dead_letter_line(item: dict) -> str:
    read_at = (f"  (read from {item['input_topic']}[{item['input_partition']}] at offset {item['input_offset']})"
               if item["input_topic"] is not None else "")
    return f"{item['tx_at']}  {item['stage']:<8} {item['reason']}{read_at}\n    {item['original'][:160]}"


def show_ontology(path: OntologyFile = None) -> None:
    """Print the relationship vocabulary: domain, range and cardinality."""
    ontology = ontology_from(path)
    sys.stdout.write(json.dumps(ontology.model_dump(mode="json"), indent=2) + "\n")
