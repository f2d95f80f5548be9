"""The `traces` commands: replay the recorded answers that later changes touched, show one, list all."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from processors.freshness import stale_sources_for_queries
from processors.queries import QueryEngine
from processors.replay import ACTION_RANK, AffectedTrace
from processors.trace_replay import Replay
from schemas.ontology import Ontology
from schemas.slo import slo_or_default
from schemas.times import format_micros
from state.kv import MemoryKV, RocksKV
from state.open import reading
from state.replays import catch_up, replay_one, replays_since
from state.store import LedgerStore
from state.trace_index import TraceIndex, index_path, trace_of
from streams import listings
from streams.cli import render
from streams.cli.options import (
    AsJson,
    CliError,
    OntologyFile,
    RecordedBy,
    StateDir,
    Tenant,
    emit,
    emit_listing,
    instant,
    ontology_from,
)

Since = Annotated[str | None, typer.Option(
    "--since", help="Only changes recorded after this transaction time (ISO-8601). Default: every change.")]


@contextmanager
def trace_index(state: Path) -> Iterator[TraceIndex]:
    """The index beside the state; an in-memory one, built afresh, while another process holds it."""
    try:
        index = TraceIndex(RocksKV(index_path(state)))
    except Exception:  # rocksdict raises a bare Exception for a held lock
        index = TraceIndex(MemoryKV())
    try:
        yield index
    finally:
        index.close()


def engine_for(store: LedgerStore, ontology: Ontology) -> QueryEngine:
    """The engine `query` uses: a past answer's coverage is judged on the activity recorded by then."""
    stale = stale_sources_for_queries(ontology, slo_or_default(None), store.source_activity)
    return QueryEngine(store, ontology, stale)


def replay_items(state: Path, tenant: str, since: int | None, known: int, ontology: Ontology) -> list[Replay]:
    with reading(state) as store, trace_index(state) as index:
        return replays_since(store, index, engine_for(store, ontology), tenant, since, known)


def traces_replay(state: StateDir, tenant: Tenant, since: Since = None, known_at: RecordedBy = None,
                  as_json: AsJson = False, ontology_file: OntologyFile = None) -> None:
    """Recorded answers that changes after them touched, re-run with the newer knowledge and diffed.

    A trace is listed when a version appended or closed after its known_at lies on an adjacency its
    query read and is valid at its valid_at. Action-bearing first, then changed, then oldest."""
    replays = replay_items(state, tenant, instant(since, "--since") if since else None,
                           instant(known_at, "--known-at"), ontology_from(ontology_file))
    if as_json:
        emit([r.as_json() for r in replays])
        return
    for replay in replays:
        before, after = set(replay.before.results), set(replay.after.results)
        by = ", ".join(str(change["event_id"]) for change in replay.changes_json())
        sys.stdout.write(f"{replay.trace.trace_id}  [{replay.trace.action}]  known at "
                         f"{format_micros(replay.trace.known_at)}  {replay.verdict}  "
                         f"+{','.join(sorted(after - before)) or '-'}  -{','.join(sorted(before - after)) or '-'}"
                         f"  by {by or '-'}\n")
    if not replays:
        sys.stdout.write("no recorded answer was touched by a later change\n")


def traces_show(trace_id: Annotated[str, typer.Argument(help="The trace id.")], state: StateDir, tenant: Tenant,
                known_at: RecordedBy = None, as_json: AsJson = False, ontology_file: OntologyFile = None) -> None:
    """One trace explained: what it asked, what it read, and its replay if a later change touched it."""
    item = show_item(state, tenant, trace_id, instant(known_at, "--known-at"), ontology_from(ontology_file))
    if as_json:
        emit(item)
        return
    for key, value in item.items():
        sys.stdout.write(f"{key}: {value}\n")


def show_item(state: Path, tenant: str, trace_id: str, known: int, ontology: Ontology) -> dict[str, object]:
    with reading(state) as store, trace_index(state) as index:
        engine = engine_for(store, ontology)
        catch_up(store, index, engine, tenant)
        trace = trace_of(store, tenant, trace_id)
        if trace is None or trace.tx_at > known:
            raise CliError(f"no trace {trace_id!r} for tenant {tenant!r}")
        item = render.trace_dict(trace)
        item["read"] = index.read_set(tenant, trace_id)
        replay = replay_one(store, index, engine, trace, known)
        item["replay"] = replay.as_json() if replay is not None else None
        return item


def traces_list(state: StateDir, tenant: Tenant, known_at: RecordedBy = None, as_json: AsJson = False) -> None:
    """Every recorded trace of the tenant, by trace id."""
    known = instant(known_at, "--known-at")
    with reading(state) as store:
        items = listings.trace_items(store, tenant, known)
    emit_listing(items, as_json, lambda item: f"{item['trace_id']}  [{item['action']}]  {item['query']}  known at "
                                              f"{item['known_at']}", "no trace recorded")


def with_additions(found: list[AffectedTrace], replays: list[Replay]) -> list[AffectedTrace]:
    """``traces affected``'s list and the traces a replay finds through their read sets (late additions
    included), one entry a trace, ranked as before; an addition's ``corrected`` holds the appended versions."""
    listed = {a.trace.trace_id for a in found}
    merged = found + [AffectedTrace(r.trace, r.versions, (), "re-derived") for r in replays
                      if r.trace.trace_id not in listed]
    merged.sort(key=lambda a: (ACTION_RANK.get(a.trace.action, 1), a.trace.known_at, a.trace.trace_id))
    return merged


def replay_agent(
    state: StateDir,
    bootstrap: Annotated[str, typer.Option("--bootstrap", envvar="EDGELEDGER_KAFKA_BOOTSTRAP",
                                           help="Kafka bootstrap servers.")],
    topic_prefix: Annotated[str, typer.Option("--topic-prefix")] = "edgeledger.",
    group: Annotated[str, typer.Option("--group", help="Consumer group id.")] = "edgeledger-replay",
    ontology_file: OntologyFile = None,
) -> None:
    """Replay the traces each committed change batch touches and publish them to replay-results
    (a faust-streaming agent on the edge-versions log; reads the ledger at --state read-only)."""
    import logging

    import faust

    from streams.kafka.topics import TopicSettings
    from streams.worker.replay_agent import build_replay_app

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app, _ = build_replay_app(bootstrap, state, TopicSettings(prefix=topic_prefix), group,
                              ontology_from(ontology_file))
    faust.Worker(app, loglevel="WARNING").execute_from_commandline()
