"""The ledger processor: one raw event in, effects on a ``PendingLedger`` out.

decode -> validate -> resolve -> apply (``processors.apply``). Every failure becomes data: a dead
letter carrying the original text, the stage and the reason, or a review item when we abstain.
Nothing is lost, and ``BatchCounts.balanced()`` proves it.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
from pydantic import ValidationError

from processors.apply import Parked, Rejected, apply_event
from processors.clock import TransactionClock, micros_of
from processors.model import DeadLetter, EventOutcome, Outcome, ReviewItem, fields_of
from processors.pending import PendingLedger
from processors.versioning import derive_id
from processors.vocabulary import Vocabulary
from schemas.bounds import TENANT_PATTERN
from schemas.events import ClockEvent, LedgerEvent, validate_event, validate_event_json
from schemas.ontology import Ontology

_NAMEABLE_TENANT = re.compile(TENANT_PATTERN)
"""A tenant a read can name (``--tenant``, the HTTP path): the events' own rule."""

Misrouted = Callable[[str], str | None]
"""Given an event's tenant: why it may not be applied where it arrived (a pipeline's routing rule), or None."""


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
        events around it, is much slower than validating the same events one after another: applying
        evicts the validator's working set from the CPU caches (docs/performance.md). Validation has no
        effect on the ledger, so moving it ahead changes nothing else. An event the schema refuses
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
            return EventOutcome(_text(tenant), _text(kind), _text(system), outcome, None, ledger.tx)
        stated = fields_of(event)
        source = stated.get("source")
        system = fields_of(source)["system"] if source else None
        detected = stated.get("detected_at")
        return EventOutcome(stated.get("tenant"), stated["kind"], system, outcome,
                            micros_of(detected) if detected else None, ledger.tx)

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
            apply_event(event, ledger, tx, self._vocabulary)
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
        which decide: a refused event's dead letter says which step failed (not UTF-8, malformed JSON,
        not an object, the schema); an event these accept is applied (``tests/processors/test_decode.py``
        has the one kind known)."""
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
                # A tenant no read can name is none: the letter is listed as untenanted, not lost.
                tenant=tenant if isinstance(tenant, str) and _NAMEABLE_TENANT.match(tenant) else None,
                event_id=event_id if isinstance(event_id, str) else None,
                original_base64=original_base64,
            )
        )
        ledger.counts.dead_lettered += 1
        if isinstance(tenant, str) and isinstance(event_id, str) and stage == "apply":
            ledger.mark_seen(tenant, event_id, "dead_lettered")
        return "dead_lettered"


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
