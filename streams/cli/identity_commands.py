"""`edgeledger identity`: merge and split entities and record aliases (audited commands, versioned in
transaction time), and list an entity's identity edits.

A merge, split or alias is an ordinary ``merge``/``split``/``alias`` event: with ``--state`` it is applied in-process as
``load`` applies a file (the state's writer lock is taken, so not while ``run`` writes it); with
``--bootstrap`` it is produced to ``alias-commands`` as ``produce`` does, and the worker applies it.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from processors.batch import BatchRunner
from state.identity_history import identity_history
from state.open import open_writer, reading
from streams.cli.options import (
    AsJson,
    CliError,
    RecordedBy,
    StateDir,
    Tenant,
    emit,
    emit_listing,
    given_bootstrap,
    instant,
)
from streams.processor import make_processor

identity_app = typer.Typer(help="Merge and split entities, record aliases; list an entity's identity edits.",
                           no_args_is_help=True)

Actor = Annotated[str, typer.Option("--actor", help="Who makes the edit (audited).")]
Reason = Annotated[str, typer.Option("--reason", help="Why (audited).")]
EventId = Annotated[str | None, typer.Option(
    "--event-id", help="The command's event id (a split names a merge by it). Default: a new one, printed.")]
Target = Annotated[Path | None, typer.Option("--state", help="Apply it to this ledger state directory in-process.")]
Bootstrap = Annotated[str | None, typer.Option(
    "--bootstrap", envvar="EDGELEDGER_KAFKA_BOOTSTRAP", help="Produce it to the alias-commands topic instead.")]
TopicPrefix = Annotated[str, typer.Option("--topic-prefix", help="Prefix of the topic names (with --bootstrap).")]


@identity_app.command("merge")
def merge(
    tenant: Tenant,
    keep: Annotated[str, typer.Option("--keep", help="The entity that stays (Type:system-id).")],
    absorb: Annotated[str, typer.Option("--absorb", help="The entity that becomes the same as --keep.")],
    actor: Actor,
    reason: Reason = "",
    event_id: EventId = None,
    state: Target = None,
    bootstrap: Bootstrap = None,
    topic_prefix: TopicPrefix = "edgeledger.",
) -> None:
    """Merge --absorb into --keep from now on: queries reach both entities' edges through either id;
    an as-known query from before still sees two; `identity split` undoes it. No edge is rewritten."""
    command = {"kind": "merge", "event_id": event_id or f"merge-{uuid.uuid4().hex[:12]}", "tenant": tenant,
               "keep": keep, "absorb": absorb, "actor": actor, "reason": reason}
    _submit(command, state, bootstrap, topic_prefix)


@identity_app.command("split")
def split(
    merge_id: Annotated[str, typer.Argument(help="The event id of the merge to undo.")],
    tenant: Tenant,
    actor: Actor,
    reason: Reason = "",
    event_id: EventId = None,
    state: Target = None,
    bootstrap: Bootstrap = None,
    topic_prefix: TopicPrefix = "edgeledger.",
) -> None:
    """Undo a merge from now on: answers are again as before it; as-known queries while it held still see it."""
    command = {"kind": "split", "event_id": event_id or f"split-{uuid.uuid4().hex[:12]}", "tenant": tenant,
               "merge": merge_id, "actor": actor, "reason": reason}
    _submit(command, state, bootstrap, topic_prefix)


@identity_app.command("alias")
def alias(
    tenant: Tenant,
    entity: Annotated[str, typer.Option("--entity", help="The entity the name names (Type:system-id).")],
    name: Annotated[str, typer.Option("--name", help="Another name or identifier of it (an e-mail, a slug).")],
    actor: Actor,
    reason: Reason = "",
    event_id: EventId = None,
    state: Target = None,
    bootstrap: Bootstrap = None,
    topic_prefix: TopicPrefix = "edgeledger.",
) -> None:
    """Record --name as an alias of --entity from now on: a mention by that name resolves to it."""
    command = {"kind": "alias", "event_id": event_id or f"alias-{uuid.uuid4().hex[:12]}", "tenant": tenant,
               "entity": entity, "alias": name, "actor": actor, "reason": reason}
    _submit(command, state, bootstrap, topic_prefix)


def _submit(command: dict[str, Any], state: Path | None, bootstrap: str | None, topic_prefix: str) -> None:
    if (state is None) == (bootstrap is None):
        raise CliError("give --state DIR (apply it here) or --bootstrap B (produce it to alias-commands), one of them")
    line = orjson.dumps(command)
    if bootstrap is not None:
        from streams.kafka.produce import produce_lines
        from streams.kafka.topics import TopicSettings, ensure_topics

        servers = given_bootstrap(bootstrap)
        topics = TopicSettings(prefix=topic_prefix)
        ensure_topics(servers, topics)
        sent = produce_lines([line], servers, topics, progress=False)
        emit({"event_id": command["event_id"], "sent": sent})
        return
    assert state is not None
    from schemas.ontology import default_ontology

    store = open_writer(state)
    try:
        counts = BatchRunner(make_processor(default_ontology(), False), store, store.commit).run([line])
        letters = [letter.reason for letter in store.dead_letters()
                   if letter.tenant == command["tenant"] and letter.event_id == command["event_id"]]
    finally:
        store.close()
    outcome = ("applied" if counts.applied else "duplicate" if counts.duplicates
               else "queued_for_review" if counts.queued_for_review else "dead_lettered")
    emit({"event_id": command["event_id"], "outcome": outcome, **({"reason": letters[-1]} if letters else {})})
    if outcome == "dead_lettered":
        raise typer.Exit(1)


@identity_app.command("history")
def history(state: StateDir, tenant: Tenant,
            entity: Annotated[str, typer.Option("--entity", help="The entity id (Type:system-id).")],
            known_at: RecordedBy = None, as_json: AsJson = False) -> None:
    """Every identity edit of an entity, oldest first: merges, splits and aliases, with actor, reason and
    transaction time."""
    known = instant(known_at, "--known-at")
    with reading(state) as store:
        items = [edit.as_json() for edit in identity_history(store, tenant, entity, known)]
    emit_listing(items, as_json, _line, f"no identity edit recorded for {entity}")


def _line(item: dict[str, Any]) -> str:
    by = f"  by {item['actor']}" if item["actor"] else ""
    why = f": {item['reason']}" if item["reason"] else ""
    return f"{item['tx_at']}  {item['kind']:<6} {item['edit_id']:<24} {item['other']}{by}{why}"

