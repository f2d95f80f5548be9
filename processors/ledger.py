"""The ledger processor: one raw event in, effects on a ``PendingLedger`` out.

decode -> validate -> resolve -> apply. Every failure becomes data: a dead letter carrying the
original text, the stage and the reason, or a review item when we abstain. Nothing is lost, and
``BatchCounts.balanced()`` proves it.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from sys import intern
from typing import Any

import orjson
from pydantic import ValidationError

from processors.clock import TransactionClock, micros_of
from processors.identity import Mention, MentionResolver, Resolution
from processors.model import (
    DeadLetter,
    EventOutcome,
    Heartbeat,
    LogicalEdge,
    Outcome,
    ReviewItem,
    Trace,
    fields_of,
    new_tuple,
)
from processors.pending import PendingLedger
from processors.versioning import WORDED, Fact, Provenance, Versioner, derive_id
from processors.vocabulary import Vocabulary
from schemas.events import (
    AliasCommand,
    Assertion,
    ChangeEvent,
    ClockEvent,
    EntityMention,
    HeartbeatEvent,
    LedgerEvent,
    MergeCommand,
    Retraction,
    RevokeEvent,
    RevokeSourceEvent,
    SplitCommand,
    TraceEvent,
    validate_event,
    validate_event_json,
)
from schemas.ontology import Ontology

Misrouted = Callable[[str], str | None]
"""Given an event's tenant: why it may not be applied where it arrived (a pipeline's routing rule), or None."""


class Rejected(Exception):
    """The event cannot be applied; it goes to dead-letter with this reason."""


class Parked(Exception):
    """We abstain: the event waits in the review queue."""

    def __init__(self, category: str, reason: str, details: dict[str, object]):
        super().__init__(reason)
        self.category = category
        self.details = details


def describe_validation_error(error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False):
        location = ".".join(str(p) for p in item["loc"] if not str(p).startswith("function-after"))
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown field"
        parts.append(f"{location}: {message}" if location else message)
    return "; ".join(parts)


@dataclass
class LedgerProcessor:
    ontology: Ontology
    clock: TransactionClock
    _current: LedgerEvent | None = field(default=None, init=False, repr=False)
    _document: object | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._vocabulary = Vocabulary(self.ontology)

    def prepare(self, raws: list[bytes | str], ledger: PendingLedger) -> list[LedgerEvent | None]:
        """A batch's raw events validated in one pass, in order (None where the schema refuses one), and
        whether the store had seen each read ahead into ``ledger`` in one multi-get. ``process`` then
        takes each raw event with its entry here, and applies it exactly as if it had validated it itself.

        Why a pass of its own: validating an event inside ``process``, between the applications of the
        events around it, took about 2.5 times as long as validating the same events one after another
        (26 against 10 µs an event on a 300k-event load): applying evicts the validator's working set
        from the CPU caches. Validating the batch first, then applying it, took 13 % less of the loading
        thread at 300k events and 15-18 % less at 1M (docs/performance-log.md, session 23). Validation
        has no effect on the ledger, so moving it ahead changes nothing else. An event the schema refuses
        is validated again in ``process`` before its step-by-step decoding: refusals are rare, and the
        dead-letter path costs several validations' worth anyway."""
        validated: list[LedgerEvent | None] = []
        seen_keys: list[tuple[str, str]] = []
        for raw in raws:
            try:
                event = validate_event_json(raw)
            except ValidationError:
                validated.append(None)  # ``process`` decodes it step by step, and those steps decide
                continue
            validated.append(event)
            stated = fields_of(event)
            event_id = stated.get("event_id")
            if event_id is not None:
                seen_keys.append((stated["tenant"], event_id))
        ledger.recall_seen(seen_keys)
        return validated

    def process(self, raw: bytes | str, ledger: PendingLedger, misrouted: Misrouted | None = None,
                validated: LedgerEvent | None = None) -> Outcome:
        """Apply one raw event. ``misrouted`` (a pipeline's) says why an event of a tenant may not be
        applied where it arrived; such an event is dead-lettered, and not recorded as seen. ``validated``
        is the event's entry from ``prepare``; without it, the event is validated here."""
        ledger.counts.events_read += 1
        outcome = self._process(raw, ledger, misrouted, validated)
        ledger.outcomes.append(self._describe(ledger, outcome))
        return outcome

    def _describe(self, ledger: PendingLedger, outcome: Outcome) -> EventOutcome:
        event = self._current
        if event is None:
            document = self._document if isinstance(self._document, dict) else {}
            kind, tenant, source = document.get("kind"), document.get("tenant"), document.get("source")
            system = source.get("system") if isinstance(source, dict) else None
            return new_tuple(EventOutcome, (_text(tenant), _text(kind), _text(system), outcome, None, ledger.tx))
        stated = fields_of(event)
        source = stated.get("source")
        system = fields_of(source)["system"] if source else None
        detected = stated.get("detected_at")
        return new_tuple(EventOutcome, (stated.get("tenant"), stated["kind"], system, outcome,
                                        micros_of(detected) if detected else None, ledger.tx))

    def _process(self, raw: bytes | str, ledger: PendingLedger, misrouted: Misrouted | None,
                 validated: LedgerEvent | None) -> Outcome:
        self._current = None
        self._document = None
        if validated is not None:
            event: LedgerEvent = validated
        else:
            try:
                event = validate_event_json(raw)
            except ValidationError:
                decoded = self._decode_step_by_step(raw, ledger)
                if isinstance(decoded, str):
                    return decoded
                event = decoded
        self._current = event

        if isinstance(event, ClockEvent):
            try:
                self.clock.set_simulated(micros_of(event.now))
            except ValueError as error:
                return self._dead_letter(ledger, "validate", str(error), _original(raw), fields_of(event))
            ledger.counts.applied += 1
            return "applied"

        stated = fields_of(event)
        tenant: str = stated["tenant"]
        event_id: str = stated["event_id"]
        if misrouted is not None:
            refused = misrouted(tenant)
            if refused is not None:
                return self._dead_letter(ledger, "validate", refused, _original(raw), stated)
        if ledger.event_seen(tenant, event_id):
            ledger.counts.duplicates += 1
            return "duplicate"

        tx = self.clock.tick(ledger.last_tx())
        ledger.tx = tx
        try:
            self._apply(event, ledger, tx)
        except Rejected as rejected:
            outcome = self._dead_letter(ledger, "apply", str(rejected), _original(raw), stated)
        except Parked as parked:
            ledger.review_items.append(
                ReviewItem(
                    review_id=derive_id("r", tenant, event_id, "parked"),
                    tenant=tenant,
                    event_id=event_id,
                    tx_at=tx,
                    category=parked.category,
                    reason=str(parked),
                    details=parked.details,
                    original=_original(raw),
                )
            )
            ledger.counts.queued_for_review += 1
            outcome = "queued_for_review"
        else:
            ledger.counts.applied += 1
            outcome = "applied"
        ledger.mark_seen(tenant, event_id, outcome)
        return outcome

    def _decode_step_by_step(self, raw: bytes | str, ledger: PendingLedger) -> LedgerEvent | Outcome:
        """An event refused when validated from its bytes, decoded and validated again in two steps,
        as before that path existed: these decide. A refused event's dead letter says which step
        failed (not UTF-8, malformed JSON, not an object, the schema); an event these accept is
        applied (``tests/processors/test_decode.py`` has the one kind known)."""
        try:
            document = self._document = orjson.loads(raw)
        except orjson.JSONDecodeError as error:
            undecodable = _not_utf8(raw)
            if undecodable is not None:
                return self._dead_letter(ledger, "decode", f"not UTF-8 text: {undecodable}", _original(raw), None,
                                         base64.b64encode(raw).decode("ascii"))  # type: ignore[arg-type]
            return self._dead_letter(ledger, "decode", f"malformed JSON: {error}", _original(raw), None)
        if not isinstance(document, dict):
            return self._dead_letter(ledger, "decode", "an event must be a JSON object", _original(raw), None)
        try:
            return validate_event(document)
        except ValidationError as error:
            return self._dead_letter(ledger, "validate", describe_validation_error(error), _original(raw), document)

    def _dead_letter(
        self, ledger: PendingLedger, stage: str, reason: str, text: str, document: dict | None,
        original_base64: str | None = None,
    ) -> Outcome:
        tenant = document.get("tenant") if document else None
        event_id = document.get("event_id") if document else None
        if stage != "apply":
            ledger.tx = self.clock.tick(ledger.last_tx())
        tx_at = ledger.tx
        assert tx_at is not None  # ticked above, or before the event was applied
        ledger.dead_letters.append(
            DeadLetter(
                tx_at=tx_at,
                stage=stage,  # type: ignore[arg-type]
                reason=reason,
                original=text,
                tenant=tenant if isinstance(tenant, str) else None,
                event_id=event_id if isinstance(event_id, str) else None,
                original_base64=original_base64,
            )
        )
        ledger.counts.dead_lettered += 1
        if isinstance(tenant, str) and isinstance(event_id, str) and stage == "apply":
            ledger.mark_seen(tenant, event_id, "dead_lettered")
        return "dead_lettered"

    # -- per kind ------------------------------------------------------------------------------------------
    def _apply(self, event, ledger: PendingLedger, tx: int) -> None:
        match event:
            case ChangeEvent():
                self._apply_change(event, ledger, tx)
            case RevokeEvent():
                version = ledger.version(event.tenant, event.edge_id)
                if version is None:
                    raise Rejected(f"unknown edge id {event.edge_id!r} for tenant {event.tenant!r}")
                # The fact and what remains of it: the believed versions of its edge that share its origin.
                fact = [v for v in ledger.believed_edge(event.tenant, version.src, version.rel, version.dst)
                        if v.origin == version.origin]
                versioner = Versioner(ledger, self._vocabulary, event.tenant, event.event_id, tx)
                versioner.revoke(fact, "revoke")
                versioner.finish("revoke")
            case RevokeSourceEvent():
                source = event.source
                versions = ledger.believed_by_source(event.tenant, source.system, source.record, source.version)
                versioner = Versioner(ledger, self._vocabulary, event.tenant, event.event_id, tx)
                versioner.revoke(versions, "revoke_source")
                versioner.finish("revoke_source")
            case AliasCommand():
                if ledger.entity(event.tenant, event.entity) is None:
                    raise Rejected(f"unknown entity {event.entity!r} for tenant {event.tenant!r}")
                resolver = MentionResolver(ledger, event.tenant)
                entity_type, _, system_id = event.entity.partition(":")
                resolver.resolve(Mention(entity_type, system_id, None, (event.alias,)))
                resolver.commit(ledger, tx)
            case MergeCommand() | SplitCommand():
                raise Parked(
                    "identity_command",
                    f"{event.kind} commands are parked for review: this ledger does not apply merges or "
                    "splits yet (entity resolution is a later stage); nothing was changed",
                    {"command": event.model_dump(mode="json", by_alias=True)},
                )
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

    def _apply_change(self, event: ChangeEvent, ledger: PendingLedger, tx: int) -> None:
        # Speed: every field of the event is read once, from the models' ``fields_of``. The names that
        # key the ledger's caches (tenant, relationship, source system, entity ids) are interned: late
        # in a large load most cache lookups miss the CPU caches, and a key made of the very strings
        # the cache holds compares by identity instead of reading the stored strings' text.
        stated_event = fields_of(event)
        tenant: str = intern(stated_event["tenant"])
        resolver = MentionResolver(ledger, tenant)
        assertions = [self._stated(resolver, item, True) for item in stated_event["assert_"]]
        retractions = [self._stated(resolver, item, False) for item in stated_event["retract"]]
        for index, stated in enumerate(assertions):
            self._check_ontology(stated, f"assert[{index}]")
        for index, stated in enumerate(retractions):
            self._check_ontology(stated, f"retract[{index}]", check_phrase=False)
        resolver.commit(ledger, tx)

        source = fields_of(stated_event["source"])
        detected_at = micros_of(stated_event["detected_at"])
        provenance = Provenance(intern(source["system"]), source["record"], source["version"], detected_at)
        versioner = Versioner(ledger, self._vocabulary, tenant, stated_event["event_id"], tx)
        for stated in retractions:
            # A delta retraction ends the edge whichever record of the authority asserted it.
            versioner.retract(stated.src, stated.rel, stated.dst, provenance.authority, stated.valid_from,
                              stated.phrase)

        if stated_event["mode"] == "snapshot":
            record = provenance.record
            assert record is not None
            asserted = {_logical(stated.src, stated.rel, stated.dst, stated.phrase) for stated in assertions}
            says_now = ledger.believed_from_record(tenant, provenance.authority, record)
            omitted = {_logical(v.src, v.rel, v.dst, v.phrase) for v in says_now} - asserted
            effective_at = stated_event["effective_at"]
            effective = micros_of(effective_at) if effective_at else detected_at
            for edge in sorted(omitted, key=lambda e: (e.src, e.rel, e.dst, e.phrase or "")):
                # Only what this record still says: a piece another record restated is that record's.
                versioner.retract(edge.src, edge.rel, edge.dst, provenance.authority, effective, edge.phrase,
                                  record)

        for stated in assertions:
            versioner.assert_fact(stated.fact(), provenance)
        versioner.finish("change")

    def _stated(self, resolver: MentionResolver, item: Assertion | Retraction, asserted: bool) -> _Stated:
        stated = fields_of(item)
        return _Stated(stated, asserted, self._resolve(resolver, stated["src"]), self._resolve(resolver, stated["dst"]))

    @staticmethod
    def _resolve(resolver: MentionResolver, stated: EntityMention) -> tuple[Mention, str]:
        """The mention as read once, and the entity it resolves to."""
        mention = Mention.of(stated)
        resolution: Resolution = resolver.resolve(mention)
        if resolution.kind == "ambiguous":
            raise Parked(
                "ambiguous_entity",
                f"the name {mention.name!r} matches several {mention.type} entities; "
                "abstaining rather than guessing",
                {"mention": mention.as_json(), "candidates": list(resolution.candidates)},
            )
        assert resolution.entity_id is not None
        return mention, resolution.entity_id

    def _check_ontology(self, stated: _Stated, where: str, check_phrase: bool = True) -> None:
        violation = self._vocabulary.violation(stated.src_type, stated.rel, stated.dst_type, stated.phrase,
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


def _not_utf8(raw: bytes | str) -> str | None:
    """Why ``raw`` is not UTF-8 text (bytes only; a ``str`` is text already), or None if it is."""
    if isinstance(raw, str):
        return None
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"byte 0x{raw[error.start]:02x} at offset {error.start} ({error.reason})"
    return None


def _original(raw: bytes | str) -> str:
    """The event's text as received, for dead letters and the review queue (only built for them)."""
    return (raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw).rstrip("\r\n")


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
