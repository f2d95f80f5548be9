"""The `edgeledger` command line. Errors are one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import orjson
import typer
from pydantic import ValidationError

from processors.batch import BATCH_EVENTS
from processors.freshness import stale_sources_for_queries
from processors.model import EdgeVersion
from processors.queries import QueryEngine, UnknownToOntology, history_request_from, instant_param, request_from
from processors.traversal import PlanRefused
from schemas.config_files import validation_summary
from schemas.ontology import Ontology, default_ontology, load_ontology
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
from schemas.results import CorrectionOut
from schemas.slo import slo_or_default
from schemas.times import format_micros
from state.open import reading
from streams import render
from streams.cli_options import Tenant, refuse_empty_tenant
from streams.freshness_cli import freshness_app
from streams.ledger_files import load_into, wall_clock_micros

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help=(
        "edgeledger keeps a knowledge graph bi-temporally: valid time (when a fact held in the world) "
        "and transaction time (when the ledger believed it), and answers bounded relationship "
        "questions as of any pair of the two.\n\n"
        "Start with `edgeledger demo`, then try `edgeledger query owners-of --state demo-state "
        "--tenant acme --entity 'settlement connector'`."
    ),
)
review_app = typer.Typer(no_args_is_help=True, help="The review queue: parked events and flagged conflicts.")
traces_app = typer.Typer(no_args_is_help=True, help="Recorded agent answers (traces).")
app.add_typer(review_app, name="review")
app.add_typer(traces_app, name="traces")
app.add_typer(freshness_app)

StateDir = Annotated[Path, typer.Option("--state", help="Ledger state directory (RocksDB).")]
Entity = Annotated[str, typer.Option("--entity", help="Canonical id (Type:system-id), an alias, or Type:name.")]
ValidAt = Annotated[str | None, typer.Option("--valid-at", help="When in the world (ISO-8601). Default: now.")]
KnownAt = Annotated[
    str | None, typer.Option("--known-at", help="As the ledger believed at this time (ISO-8601). Default: now.")
]
RecordedBy = Annotated[str | None, typer.Option(
    "--known-at", help="List only what the ledger had recorded by this time (ISO-8601; transaction time). "
                       "Default: now.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the contract's JSON instead of text.")]
OntologyFile = Annotated[Path | None, typer.Option(
    "--ontology", help="Ontology file replacing the default: for reads, the one the state was loaded with "
                       "(`load --ontology`). Default: the bundled one.")]


class CliError(Exception):
    """A user-facing error: printed as one line."""


def _flag(parameter: str) -> str:
    """The option that sets a query parameter: ``valid_at`` is ``--valid-at``."""
    return "--" + parameter.replace("_", "-")


def _instant(text: str | None, flag: str) -> int:
    """The instant an option gives, now when it is not given."""
    given = instant_param(text, flag)  # InvalidQuery is a ValueError: one line, like a CliError
    return wall_clock_micros() if given is None else given


def _ontology(path: Path | None) -> Ontology:
    """The ontology file at ``path`` (the same loader as ``load --ontology``), or the bundled default."""
    return load_ontology(path) if path is not None else default_ontology()


def _default_ontology_hint(path: Path | None) -> str:
    return " (the bundled ontology: give --ontology FILE if the state was loaded with another)" if path is None else ""


def _emit(data: object) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


@app.command()
def load(
    files: Annotated[list[Path], typer.Argument(help="JSONL event files, one event per line.")],
    state: StateDir,
    simulated_clock: Annotated[
        bool, typer.Option("--simulated-clock", help="Accept `clock` events (tests and deterministic backfills).")
    ] = False,
    ontology: Annotated[Path | None, typer.Option("--ontology", help="Replace the default ontology.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Events per atomic write.")] = BATCH_EVENTS,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar (it shows only on a terminal).")] = False,
) -> None:
    """Apply event files to the ledger in-process (no broker); print one JSON summary."""
    summary = load_into(state, files, simulated_clock, ontology, batch_size, progress=not quiet)
    _emit(summary)


@app.command()
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
        raise CliError(parameter_errors(error, name, _flag)) from None
    ontology = _ontology(ontology_file)
    slos = slo_or_default(slo)
    try:
        request = request_from(name, tenant, params, ontology, wall_clock_micros(), _flag)
    except UnknownToOntology as error:
        raise CliError(str(error) + _default_ontology_hint(ontology_file)) from None
    with reading(state) as store:
        # Judged at --known-at on the activity recorded by then: a past answer's coverage reproduces.
        stale = stale_sources_for_queries(ontology, slos, store.source_activity)
        result = QueryEngine(store, ontology, stale_sources=stale).run(request)
    if as_json:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        sys.stdout.write(render.query_text(result))


@app.command()
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
        raise CliError(parameter_errors(error, "history", _flag)) from None
    ontology = _ontology(ontology_file)
    try:
        request = history_request_from(tenant, params, ontology, wall_clock_micros(), _flag)
    except UnknownToOntology as error:
        raise CliError(str(error) + _default_ontology_hint(ontology_file)) from None
    with reading(state) as store:
        result = QueryEngine(store, ontology).history(*request, store.adjacent_any)
    if as_json:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        sys.stdout.write(render.history_text(result))


@app.command()
def corrections(state: StateDir, tenant: Tenant, known_at: RecordedBy = None, as_json: AsJson = False) -> None:
    """Correction events: which edge versions a change of belief closed and which it appended."""
    known = _instant(known_at, "--known-at")
    with reading(state) as store:
        items = [
            CorrectionOut(
                correction_id=c.correction_id, tenant=c.tenant, event_id=c.event_id,
                tx_at=format_micros(c.tx_at) or "", cause=c.cause,
                old_edge_ids=list(c.old_edge_ids), new_edge_ids=list(c.new_edge_ids),
            ).model_dump(mode="json")
            for c in store.corrections(tenant)
            if c.tx_at <= known
        ]
    if as_json:
        _emit(items)
        return
    for item in items:
        sys.stdout.write(
            f"{item['tx_at']}  {item['event_id']:<16} {item['cause']:<14} old {', '.join(item['old_edge_ids'])}"
            f"  ->  new {', '.join(item['new_edge_ids']) or '(none)'}\n"
        )
    if not items:
        sys.stdout.write("no corrections\n")


@review_app.command("list")
def review_list(state: StateDir, tenant: Tenant, known_at: RecordedBy = None, as_json: AsJson = False) -> None:
    """Items waiting for a person: ambiguous entities, parked commands, cardinality conflicts."""
    known = _instant(known_at, "--known-at")
    with reading(state) as store:
        items = [render.review_dict(item) for item in store.review_items(tenant) if item.tx_at <= known]
    if as_json:
        _emit(items)
        return
    for item in items:
        sys.stdout.write(f"{item['review_id']}  {item['tx_at']}  {item['category']:<22} {item['reason']}\n")
    if not items:
        sys.stdout.write("the review queue is empty\n")


@traces_app.command("affected")
def traces_affected(state: StateDir, tenant: Tenant, known_at: RecordedBy = None, as_json: AsJson = False,
                    ontology_file: OntologyFile = None) -> None:
    """Traces whose edges were later corrected or revoked, action-bearing first.

    A trace recorded without edge ids has them re-derived by re-running its query as of its two
    clocks; one whose query cannot be re-run is listed as `edge_ids unknown` with the reason."""
    from processors.replay import affected_traces

    known = _instant(known_at, "--known-at")
    with reading(state) as store:

        def version_as_known(edge_id: str) -> EdgeVersion | None:
            version = store.version(tenant, edge_id)
            return version.as_known_at(known) if version is not None else None

        recorded = (trace for trace in store.traces(tenant) if trace.tx_at <= known)
        found = affected_traces(recorded, version_as_known, QueryEngine(store, _ontology(ontology_file)))
    items = [
        {"trace_id": a.trace.trace_id, "action": a.trace.action, "query": a.trace.query,
         "valid_at": format_micros(a.trace.valid_at), "known_at": format_micros(a.trace.known_at),
         "status": a.status, "edge_ids_source": a.edge_ids_source, "edge_ids": list(a.edge_ids),
         "corrected_edges": [{"edge_id": v.edge_id, "closed_at": format_micros(v.tx_to)} for v in a.corrected]}
        for a in found
    ]
    if as_json:
        _emit(items)
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


@app.command("dead-letters")
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
    known = _instant(known_at, "--known-at")
    with reading(state) as store:
        items = [render.dead_letter_dict(d) for d in store.dead_letters()
                 if d.tx_at <= known and (not d.tenant if untenanted else d.tenant == tenant)]
    if as_json:
        _emit(items)
        return
    for item in items:
        read_at = (f"  (read from {item['input_topic']}[{item['input_partition']}] at offset {item['input_offset']})"
                   if item["input_topic"] is not None else "")
        sys.stdout.write(f"{item['tx_at']}  {item['stage']:<8} {item['reason']}{read_at}\n"
                         f"    {item['original'][:160]}\n")
    if not items:
        sys.stdout.write("no dead letters\n")


@app.command()
def run(
    state: StateDir,
    bootstrap: Annotated[str | None, typer.Option(
        "--bootstrap", envvar="EDGELEDGER_KAFKA_BOOTSTRAP",
        help="Kafka bootstrap servers. Default: start the embedded (memory-only) broker.")] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Worker processes in one consumer group.")] = 1,
    group: Annotated[str, typer.Option("--group", help="Consumer group id.")] = "edgeledger-ledger",
    topic_prefix: Annotated[str, typer.Option("--topic-prefix")] = "edgeledger.",
    exit_when_idle: Annotated[float | None, typer.Option(
        "--exit-when-idle", help="Stop after this many idle seconds (backfills and tests).")] = None,
    consumer_option: Annotated[list[str] | None, typer.Option(
        "--consumer-option", help="librdkafka consumer setting KEY=VALUE (repeatable).")] = None,
    metrics_port: Annotated[int, typer.Option(
        "--metrics-port", min=0, help="Serve /metrics on 127.0.0.1:PORT (0: off; worker N uses PORT+N).")] = 9108,
    slo: Annotated[Path | None, typer.Option("--slo", help="Source SLO file (default: the bundled one).")] = None,
    freshness_interval: Annotated[float, typer.Option(
        "--freshness-interval", min=0.1, help="Seconds between freshness checks.")] = 5.0,
    ontology: Annotated[Path | None, typer.Option("--ontology", help="Replace the default ontology.")] = None,
) -> None:
    """Run the streaming pipeline: consume the input topics, apply them, emit edge-versions and corrections."""
    from streams.runner import run_pipeline

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides = {}
    for option in consumer_option or []:
        key, separator, value = option.partition("=")
        if not separator:
            raise CliError(f"--consumer-option {option!r}: expected KEY=VALUE")
        overrides[key.strip()] = value.strip()

    totals = run_pipeline(state, bootstrap, workers, group, topic_prefix, exit_when_idle,
                          consumer_overrides=overrides, metrics_port=metrics_port,
                          slo_path=slo, freshness_interval=freshness_interval, ontology_path=ontology)
    if totals is not None:
        summary = dict(asdict(totals))
        summary["balanced"] = totals.balanced()
        _emit(summary)


@app.command()
def serve(
    state: StateDir,
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535)] = 8080,
    slo: Annotated[Path | None, typer.Option("--slo", help="Source SLOs for coverage (default: bundled).")] = None,
    ontology_file: OntologyFile = None,
    bootstrap: Annotated[str | None, typer.Option(
        "--bootstrap", envvar="EDGELEDGER_KAFKA_BOOTSTRAP",
        help="Kafka bootstrap servers: publish each cache invalidation to the cache-invalidations topic "
             "(keyed by tenant). Default: do not publish.")] = None,
    topic_prefix: Annotated[str, typer.Option(
        "--topic-prefix", help="Prefix of the topic names (used with --bootstrap).")] = "edgeledger.",
    cache_entries: Annotated[int, typer.Option(
        "--cache-entries", min=1, help="Answers the cache keeps (in its own RocksDB).")] = 50_000,
    cache_memory_entries: Annotated[int, typer.Option(
        "--cache-memory-entries", min=0,
        help="Answers kept decoded in memory; hits beyond them read RocksDB (about 3x slower at p99). "
             "Size it to the working set of questions.")] = 2_000,
) -> None:
    """HTTP API for agents (one endpoint per traversal, OpenAPI at /openapi.json) and /metrics."""
    from streams.cache_invalidations import PublisherSetupError
    from streams.http_api import serve as serve_http
    from streams.topics import TopicSettings

    if bootstrap is not None:
        if not bootstrap.strip():
            raise CliError("--bootstrap is empty: give host:port[,host:port...], or leave it out to not publish")
        try:
            TopicSettings(prefix=topic_prefix)  # checks every topic name the prefix makes
        except ValueError as error:
            raise CliError(f"--topic-prefix: {error}") from None
    slos = slo_or_default(slo)
    ontology = _ontology(ontology_file)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        serve_http(state, host=host, port=port, slo=slos, ontology=ontology,
                   bootstrap=bootstrap.strip() if bootstrap is not None else None, topic_prefix=topic_prefix,
                   max_cache_entries=cache_entries, memory_cache_entries=cache_memory_entries)
    except PublisherSetupError as error:
        raise CliError(f"--bootstrap: {error}") from None


@app.command()
def replica(
    state: StateDir,
    bootstrap: Annotated[str, typer.Option("--bootstrap", envvar="EDGELEDGER_KAFKA_BOOTSTRAP",
                                           help="Kafka bootstrap servers.")],
    topic_prefix: Annotated[str, typer.Option("--topic-prefix")] = "edgeledger.",
    exit_when_idle: Annotated[float | None, typer.Option("--exit-when-idle")] = None,
) -> None:
    """Follow the whole edge-versions log into a read model for `serve` and the read commands."""
    from streams.replica import run_replica
    from streams.topics import TopicSettings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _emit({"log_records": run_replica(state, bootstrap, TopicSettings(prefix=topic_prefix),
                                      idle_exit_after=exit_when_idle)})


@app.command()
def produce(
    files: Annotated[list[Path], typer.Argument(help="JSONL event files.")],
    bootstrap: Annotated[str, typer.Option("--bootstrap", envvar="EDGELEDGER_KAFKA_BOOTSTRAP",
                                           help="Kafka bootstrap servers.")],
    topic_prefix: Annotated[str, typer.Option("--topic-prefix")] = "edgeledger.",
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Send event files to the input topics (idempotent producer, keyed by tenant)."""
    from streams.produce import produce_files
    from streams.topics import TopicSettings, ensure_topics

    topics = TopicSettings(prefix=topic_prefix)
    ensure_topics(bootstrap, topics)
    sent = produce_files(files, bootstrap, topics, progress=not quiet)
    _emit({"sent": sent})


@app.command()
def demo(
    state: Annotated[Path, typer.Option("--state", help="Where to keep the demo ledger.")] = Path("demo-state"),
    offline: Annotated[bool, typer.Option(
        "--offline", help="Load in-process with the simulated clock instead of streaming through a broker.")] = False,
    bootstrap: Annotated[str | None, typer.Option(
        "--bootstrap", envvar="EDGELEDGER_KAFKA_BOOTSTRAP",
        help="Use this Kafka cluster instead of the embedded broker.")] = None,
) -> None:
    """Stream a CMDB + HR + policy scenario with a late correction through the pipeline; answer the questions."""
    from streams.demo import run_demo

    run_demo(state, offline=offline, bootstrap=bootstrap)


@app.command("ontology")
def show_ontology(path: OntologyFile = None) -> None:
    """Print the relationship vocabulary: domain, range and cardinality."""
    ontology = _ontology(path)
    sys.stdout.write(json.dumps(ontology.model_dump(mode="json"), indent=2) + "\n")


def main() -> None:
    try:
        app(standalone_mode=False)
    except typer.Exit as done:
        raise SystemExit(done.exit_code) from None
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write("edgeledger: aborted\n")
        raise SystemExit(130) from None
    except Exception as error:
        sys.stderr.write(f"edgeledger: error: {_describe(error)}\n")
        raise SystemExit(2) from None


def _describe(error: Exception) -> str:
    format_message = getattr(error, "format_message", None)
    if callable(format_message):
        return f"{format_message()} (see --help)"
    if isinstance(error, ValidationError):
        # Pydantic's first line is only "N validation errors for Model": name each field and its message.
        return f"invalid {error.title}: {validation_summary(error)}"
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if "lock" in message.lower() and "LOCK" in message:
        return f"the state directory is locked by another writer ({message})"
    if isinstance(error, (CliError, PlanRefused, ValueError, FileNotFoundError, PermissionError,
                          NotADirectoryError, IsADirectoryError, FileExistsError)):
        return message
    return f"{type(error).__name__}: {message}"


if __name__ == "__main__":
    main()
