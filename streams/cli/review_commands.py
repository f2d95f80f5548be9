"""`edgeledger review decide`: a person's decision on a review item, as a ``decision`` event applied to
a state directory (as ``load`` applies events) or produced to the ``alias-commands`` topic."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import orjson
import typer

from processors.batch import BatchRunner
from state.open import open_writer, reading
from streams.cli.options import CliError, OntologyFile, Tenant, emit, given_bootstrap, ontology_from
from streams.processor import make_processor, wall_clock_micros


def decision_event(tenant: str, review_id: str, decision: str, entity: str | None, actor: str, reason: str,
                   event_id: str) -> dict[str, object]:
    event: dict[str, object] = {"kind": "decision", "event_id": event_id, "tenant": tenant, "review_id": review_id,
                                "decision": decision, "actor": actor, "reason": reason}
    if entity is not None:
        event["entity"] = entity
    return event


def _check_open(state: Path, tenant: str, review_id: str) -> None:
    """Refuse, before anything is written, a decision on an unknown or already decided item."""
    with reading(state) as store:
        if store.review_item(tenant, review_id) is None:
            raise CliError(f"no review item {review_id!r} for tenant {tenant!r} (see `review list`)")
        done = store.decision(tenant, review_id)
    if done is not None:
        raise CliError(f"review item {review_id!r} was already decided ({done.decision}, by {done.actor!r}: "
                       f"{done.reason}); a decision is final")


def _apply(state: Path, event: dict[str, object], ontology_file: Path | None) -> None:
    store = open_writer(state)
    try:
        processor = make_processor(ontology_from(ontology_file), False)
        counts = BatchRunner(processor, store, store.commit).run([orjson.dumps(event)])
    finally:
        store.close()
    if counts.dead_lettered:
        with reading(state) as store:
            reasons = [letter.reason for letter in store.dead_letters() if letter.event_id == event["event_id"]]
        raise CliError(f"the decision was refused: {reasons[-1] if reasons else 'see dead-letters'}")


def review_decide(
    review_id: Annotated[str, typer.Argument(help="The item's review_id (`review list --json`).")],
    tenant: Tenant,
    actor: Annotated[str, typer.Option("--actor", help="Who decides (audited).")],
    reason: Annotated[str, typer.Option("--reason", help="Why (audited).")],
    choose: Annotated[str | None, typer.Option(
        "--choose", help="The entity the parked mention names (one of the candidates, or any of its type).")] = None,
    new: Annotated[bool, typer.Option("--new", help="The parked mention names a new entity.")] = False,
    reject: Annotated[bool, typer.Option("--reject", help="Close the item and apply nothing.")] = False,
    state: Annotated[Path | None, typer.Option(
        "--state", help="Apply the decision to this state directory (no broker).")] = None,
    bootstrap: Annotated[str | None, typer.Option(
        "--bootstrap", envvar="EDGELEDGER_KAFKA_BOOTSTRAP",
        help="Instead, produce it to the alias-commands topic for the worker to apply.")] = None,
    topic_prefix: Annotated[str, typer.Option("--topic-prefix")] = "edgeledger.",
    ontology_file: OntologyFile = None,
) -> None:
    """Decide a review item: --choose ENTITY, --new or --reject, with --actor and --reason. The decision
    is an event (kind `decision`): applied to --state, or produced with --bootstrap."""
    if (choose is not None) + new + reject != 1:
        raise CliError("give exactly one of --choose ENTITY, --new, --reject")
    if (state is None) == (bootstrap is None):
        raise CliError("give --state DIR (apply here) or --bootstrap SERVERS (produce for the worker), one of them")
    if not actor.strip() or not reason.strip():
        raise CliError("--actor and --reason may not be empty: every decision is audited")
    decision = "choose" if choose is not None else ("new" if new else "reject")
    event = decision_event(tenant, review_id, decision, choose, actor, reason,
                           f"decision-{review_id}-{wall_clock_micros()}")
    if state is not None:
        _check_open(state, tenant, review_id)
        _apply(state, event, ontology_file)
        emit({"applied": True, **event})
        return
    from streams.kafka.produce import produce_lines
    from streams.kafka.topics import TopicSettings, ensure_topics

    assert bootstrap is not None
    servers = given_bootstrap(bootstrap)
    topics = TopicSettings(prefix=topic_prefix)
    ensure_topics(servers, topics)
    produce_lines([orjson.dumps(event)], servers, topics)
    emit({"produced": True, **event})
