"""Applying one validated event to a ``PendingLedger``, by kind: a change through entity resolution
and the versioner, revocations, identity commands (alias, merge, split), review decisions, traces and
heartbeats. An event that cannot be
applied raises ``Rejected`` (it is dead-lettered) or ``Parked`` (it waits for review); the caller,
``processors.ledger.LedgerProcessor``, turns either into data."""

from __future__ import annotations

from sys import intern
from typing import Any

from processors.clock import micros_of
from processors.identity import Beside, Decided, Mention, MentionResolver, Resolution, normalise_name
from processors.identity_map import (
    merge_refusal,
    split,
    split_refusal,
)
from processors.intervals import Interval
from processors.matching import entity_type_of
from processors.model import (
    Decision,
    EdgeVersion,
    Filing,
    Heartbeat,
    LogicalEdge,
    Merge,
    ReviewItem,
    Trace,
    fields_of,
)
from processors.pending import PendingLedger
from processors.statements import Statement, StatementIndex, withdrawing
from processors.versioning import WORDED, Fact, Provenance, Versioner
from processors.vocabulary import Vocabulary
from schemas.events import (
    AliasCommand,
    Assertion,
    ChangeEvent,
    DecisionCommand,
    HeartbeatEvent,
    MergeCommand,
    Retraction,
    RevokeEvent,
    RevokeSourceEvent,
    SplitCommand,
    TraceEvent,
    validate_event_json,
)


class Rejected(Exception):
    """The event cannot be applied; it goes to dead-letter with this reason."""


class Parked(Exception):
    """We abstain: the event waits in the review queue."""

    def __init__(self, category: str, reason: str, details: dict[str, object]):
        super().__init__(reason)
        self.category = category
        self.details = details


def apply_event(event: object, ledger: PendingLedger, tx: int, vocabulary: Vocabulary) -> None:
    """Apply ``event`` (validated, not yet seen) at transaction time ``tx``; raises ``Rejected`` or ``Parked``."""
    match event:
        case ChangeEvent():
            _apply_change(event, ledger, tx, vocabulary)
        case RevokeEvent():
            version = ledger.version(event.tenant, event.edge_id)
            if version is None:
                raise Rejected(f"unknown edge id {event.edge_id!r} for tenant {event.tenant!r}")
            # The fact and what remains of it: the believed versions of its edge that share its origin.
            fact = [v for v in ledger.believed_edge(event.tenant, version.src, version.rel, version.dst)
                    if v.origin == version.origin]
            versioner = Versioner(ledger, vocabulary, event.tenant, event.event_id, tx)
            versioner.revoke_fact(fact, version)
            versioner.finish("revoke")
        case RevokeSourceEvent():
            _apply_revoke_source(event, ledger, tx, vocabulary)
        case AliasCommand():
            if ledger.entity(event.tenant, event.entity) is None:
                raise Rejected(f"unknown entity {event.entity!r} for tenant {event.tenant!r}")
            resolver = MentionResolver(ledger, event.tenant, event.event_id, audit=(event.actor, event.reason))
            entity_type, _, system_id = event.entity.partition(":")
            resolver.resolve(Mention(entity_type, system_id, None, (event.alias,)))
            resolver.commit(ledger, tx)
        case MergeCommand():
            _apply_merge(event, ledger, tx)
        case SplitCommand():
            merge = ledger.merge(event.tenant, event.merge)
            refusal = split_refusal(event.tenant, event.merge, merge)
            if refusal is not None:
                raise Rejected(refusal)
            assert merge is not None
            ledger.add_merge(split(merge, event.event_id, event.actor, event.reason, tx))
        case DecisionCommand():
            _apply_decision(event, ledger, tx, vocabulary)
        case TraceEvent():
            ledger.traces.append(
                Trace(
                    tenant=event.tenant,
                    trace_id=event.trace_id,
                    event_id=event.event_id,
                    query=event.query,
                    valid_at=micros_of(event.valid_at),
                    known_at=micros_of(event.known_at),
                    edge_ids=event.edge_ids,
                    action=event.action,
                    tx_at=tx,
                )
            )
        case HeartbeatEvent():
            ledger.heartbeats.append(
                Heartbeat(event.tenant, event.source.system, micros_of(event.detected_at), tx)
            )


def _apply_revoke_source(event: RevokeSourceEvent, ledger: PendingLedger, tx: int, vocabulary: Vocabulary) -> None:
    """A source, a record or one version of a record was wrong: what it stated is withdrawn, and a piece
    ends where no other statement (another version or another record of the source) still states it
    (``processors.statements``). The revocation is filed for each record it withdrew statements of."""
    tenant, source = event.tenant, event.source
    system, record, version = source.system, source.record, source.version
    versioner = Versioner(ledger, vocabulary, tenant, event.event_id, tx)
    pieces = ledger.believed_by_source(tenant, system, record)
    if record is None and version is None:
        versioner.revoke(pieces, "revoke_source")  # the whole source: none of its records states anything
        versioner.finish("revoke_source")
        return
    if record is not None:
        pieces += joined_pieces(ledger, tenant, system, record)

    def withdrawn(statement: Statement) -> Interval | None:
        named = (record is None or statement.record == record) and (version is None or statement.version == version)
        return None if named else statement.valid

    changed, touched = withdrawing(pieces, StatementIndex(ledger, tenant), withdrawn)
    versioner.withdraw(changed, "revoke_source")
    for of_record in dict.fromkeys(of_record for _, of_record in touched):
        ledger.add_filing(Filing(tenant, system, of_record, tx, version, event.event_id, revoked=True))
    versioner.finish("revoke_source")


def joined_pieces(ledger: PendingLedger, tenant: str, system: str, record: str) -> list[EdgeVersion]:
    """The believed pieces of the facts ``record`` joined: another record of ``system`` made them."""
    found: dict[str, EdgeVersion] = {}
    for lineage in ledger.record_joins(tenant, system, record):
        first = ledger.version(tenant, lineage)
        if first is None:
            continue
        for piece in ledger.believed_edge(tenant, first.src, first.rel, first.dst):
            if piece.origin == lineage and piece.source_record != record:
                found[piece.edge_id] = piece
    return list(found.values())


def _apply_merge(event: MergeCommand, ledger: PendingLedger, tx: int) -> None:
    """A merge, refused with its reason when it would not make one entity of two that exist, share a
    type and are both survivors now; edges are left as they are (reads resolve through the merge)."""
    tenant, keep, absorb = event.tenant, event.keep, event.absorb
    now = ledger.identity(tenant, None)
    refusal = merge_refusal(tenant, keep, absorb, ledger.entity(tenant, keep), ledger.entity(tenant, absorb), now)
    if refusal is not None:
        raise Rejected(refusal)
    ledger.add_merge(Merge(tenant, event.event_id, keep, absorb, event.actor, event.reason, tx))


def _apply_decision(event: DecisionCommand, ledger: PendingLedger, tx: int, vocabulary: Vocabulary) -> None:
    """Close a review item as a person decided. ``choose`` and ``new`` apply the parked change event
    with its mention resolved to the chosen or a new entity (so its name becomes an alias of that
    entity); ``reject`` applies nothing. If another mention of the same event is ambiguous too, the
    event is parked again under a new item that remembers this decision."""
    tenant, review_id = event.tenant, event.review_id
    item = ledger.review_item(tenant, review_id)
    if item is None:
        raise Rejected(f"no review item {review_id!r} for tenant {tenant!r}")
    done = ledger.decision(tenant, review_id)
    if done is not None:
        raise Rejected(f"review item {review_id!r} was already decided ({done.decision}, by {done.actor!r}, "
                       f"event {done.event_id!r}); a decision is final")
    stated = item.details.get("mention")
    mention = stated if item.category == "ambiguous_entity" and isinstance(stated, dict) else None
    offered = item.details.get("candidates")
    candidates = tuple(str(c) for c in offered) if isinstance(offered, list) else ()
    entity: str | None = None
    if event.decision != "reject":
        if mention is None or item.original is None:
            raise Rejected(f"review item {review_id!r} ({item.category}) holds no parked mention to resolve: "
                           "it can only be rejected")
        entity_type, normalised = str(mention["type"]), normalise_name(str(mention["name"]))
        entity = _decided_entity(event, ledger, entity_type, normalised)
        earlier = item.details.get("decided")
        decided: Decided = {(str(t), str(n)): str(e) for t, n, e in earlier} if isinstance(earlier, list) else {}
        decided[(entity_type, normalised)] = entity
        parked = validate_event_json(item.original)
        if not isinstance(parked, ChangeEvent):
            raise Rejected(f"review item {review_id!r} parks a {parked.kind} event, not a change: reject it")
        try:
            _apply_change(parked, ledger, tx, vocabulary, decided=decided)
        except Parked as again:
            ledger.review_items.append(ReviewItem(
                review_id=f"{review_id}.{len(decided)}", tenant=tenant, event_id=item.event_id, tx_at=tx,
                category=again.category, reason=str(again),
                details={**again.details, "decided": [[t, n, e] for (t, n), e in decided.items()]},
                original=item.original))
        except Rejected as refused:
            raise Rejected(f"the event parked in review item {review_id!r} cannot be applied: {refused}; "
                           "reject the item instead") from None
    ledger.decisions.append(Decision(tenant, review_id, event.event_id, event.decision, entity, event.actor,
                                     event.reason, tx, item.category, mention, candidates))
    ledger.counts.review_decided += 1
    if event.decision == "reject":
        ledger.counts.review_rejected += 1


def _decided_entity(event: DecisionCommand, ledger: PendingLedger, entity_type: str, normalised: str) -> str:
    """The entity a ``choose`` names (known, of the mention's type), or the id of a ``new`` one."""
    if event.decision == "choose":
        assert event.entity is not None  # the schema requires it with choose
        if entity_type_of(event.entity) != entity_type:
            raise Rejected(f"entity {event.entity!r} is not a {entity_type}, the type of the parked mention")
        if ledger.entity(event.tenant, event.entity) is None:
            raise Rejected(f"unknown entity {event.entity!r} for tenant {event.tenant!r}")
        return event.entity
    new = f"{entity_type}:~{normalised}"
    # The name's own id may already be taken (by an entity since renamed): the review item tells them apart.
    return new if ledger.entity(event.tenant, new) is None else f"{new}~{event.review_id}"


def _apply_change(event: ChangeEvent, ledger: PendingLedger, tx: int, vocabulary: Vocabulary,
                  decided: Decided | None = None) -> None:
    # Speed: every field of the event is read once, from the models' ``fields_of``. The names that
    # key the ledger's caches (tenant, relationship, source system, entity ids) are interned: late
    # in a large load most cache lookups miss the CPU caches, and a key made of the very strings
    # the cache holds compares by identity instead of reading the stored strings' text.
    stated_event = fields_of(event)
    tenant: str = intern(stated_event["tenant"])
    resolver = MentionResolver(ledger, tenant, stated_event["event_id"], decided)
    assertions = [_stated(resolver, item, True) for item in stated_event["assert_"]]
    retractions = [_stated(resolver, item, False) for item in stated_event["retract"]]
    for index, stated in enumerate(assertions):
        _check_ontology(vocabulary, stated, f"assert[{index}]")
    for index, stated in enumerate(retractions):
        _check_ontology(vocabulary, stated, f"retract[{index}]", check_phrase=False)
    resolver.commit(ledger, tx)

    source = fields_of(stated_event["source"])
    detected_at = micros_of(stated_event["detected_at"])
    provenance = Provenance(intern(source["system"]), source["record"], source["version"], detected_at)
    versioner = Versioner(ledger, vocabulary, tenant, stated_event["event_id"], tx)
    for stated in retractions:
        # A delta retraction ends the edge whichever record of the authority asserted it.
        versioner.retract(stated.src, stated.rel, stated.dst, provenance.authority, stated.valid_from,
                          stated.phrase)

    if stated_event["mode"] == "snapshot":
        record = provenance.record
        assert record is not None
        asserted = {_logical(stated.src, stated.rel, stated.dst, stated.phrase) for stated in assertions}
        says_now = ledger.believed_from_record(tenant, provenance.authority, record)
        if ledger.record_joins(tenant, provenance.authority, record):
            # Its statements are read only for an edge it omits: where it said nothing any more, no change.
            says_now += joined_pieces(ledger, tenant, provenance.authority, record)
        omitted = {_logical(v.src, v.rel, v.dst, v.phrase) for v in says_now} - asserted
        effective_at = stated_event["effective_at"]
        effective = micros_of(effective_at) if effective_at else detected_at
        for edge in sorted(omitted, key=lambda e: (e.src, e.rel, e.dst, e.phrase or "")):
            # Only this record's statements end: what another record states of the edge stays.
            versioner.retract(edge.src, edge.rel, edge.dst, provenance.authority, effective, edge.phrase,
                              record)

    for stated in assertions:
        versioner.assert_fact(stated.fact(), provenance)
    versioner.finish("change")


def _stated(resolver: MentionResolver, item: Assertion | Retraction, asserted: bool) -> _Stated:
    stated = fields_of(item)
    src, dst = Mention.of(stated["src"]), Mention.of(stated["dst"])
    # The other end of the fact is the evidence a name-only end is matched with: dst's id, if it has one.
    src_beside = None if src.id is not None else Beside(
        stated["rel"], f"{dst.type}:{dst.id}" if dst.id is not None else None, True)
    src_end = _resolve(resolver, src, src_beside)
    dst_beside = None if dst.id is not None else Beside(stated["rel"], src_end[1], False)
    return _Stated(stated, asserted, src_end, _resolve(resolver, dst, dst_beside))


def _resolve(resolver: MentionResolver, mention: Mention, beside: Beside | None) -> tuple[Mention, str]:
    """The mention, and the entity it resolves to."""
    resolution: Resolution = resolver.resolve(mention, beside)
    if resolution.kind == "ambiguous":
        details: dict[str, object] = {"mention": mention.as_json(), "candidates": list(resolution.candidates)}
        if resolution.scored:
            details["scores"] = [{"entity": s.entity_id, "score": round(s.score, 1), "alias": s.alias}
                                 for s in resolution.scored]
            why = "is like more than one of them, or not clearly like any" if len(resolution.scored) > 1 \
                else "is like one of them, but not clearly enough"
            reason = (f"the name {mention.name!r} names no {mention.type} exactly and {why}; "
                      "abstaining rather than guessing")
        else:
            reason = (f"the name {mention.name!r} matches several {mention.type} entities; "
                      "abstaining rather than guessing")
        raise Parked("ambiguous_entity", reason, details)
    assert resolution.entity_id is not None
    return mention, resolution.entity_id


def _check_ontology(vocabulary: Vocabulary, stated: _Stated, where: str, check_phrase: bool = True) -> None:
    violation = vocabulary.violation(stated.src_type, stated.rel, stated.dst_type, stated.phrase,
                                           check_phrase)
    if violation:
        raise Rejected(f"{where}: ontology violation: {violation}")


class _Stated:
    """An assertion or retraction of a change event (its ``fields_of``), its fields read once, its
    ends resolved."""

    def __init__(self, item: dict[str, Any], asserted: bool, src: tuple[Mention, str],
                 dst: tuple[Mention, str]) -> None:
        self.item = item
        self.asserted = asserted
        self.src_type = src[0].type
        self.src = src[1]
        self.dst_type = dst[0].type
        self.dst = dst[1]
        self.rel: str = intern(item["rel"])
        valid_from = item["valid_from"]
        self.valid_from = micros_of(valid_from) if valid_from else None
        self.phrase: str | None = item["phrase"]

    def fact(self) -> Fact:
        """The assertion as the versioner takes it (its remaining fields read here, once)."""
        assert self.asserted, "only an assertion states a fact"
        item = self.item
        valid_to = micros_of(item["valid_to"]) if item["valid_to"] else None
        return Fact(self.src, self.rel, self.dst, self.valid_from, valid_to, item["evidence"], item["confidence"],
                    self.phrase)


def _logical(src: str, rel: str, dst: str, phrase: str | None) -> LogicalEdge:
    """The logical edge a version or an assertion is of: the wording counts only for ``other``."""
    return LogicalEdge(src, rel, dst, phrase if rel == WORDED else None)

