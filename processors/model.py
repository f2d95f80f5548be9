"""The domain's value types. Instants are ``int`` microseconds since the epoch, UTC.

``None`` as a valid-time bound means unknown start (``valid_from``) or no known end
(``valid_to``); ``None`` as ``tx_to`` means the ledger still believes the version.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

Direction = Literal["out", "in"]
Outcome = Literal["applied", "dead_lettered", "queued_for_review", "duplicate"]


class EdgeVersion(NamedTuple):
    """One version of an edge. Immutable; a NamedTuple rather than a frozen dataclass because the
    ledger builds one per append, closing and decode, and a frozen dataclass costs 7x as much to build
    (1.3 µs against 0.18 µs for these 19 fields)."""

    edge_id: str
    tenant: str
    src: str
    rel: str
    dst: str
    valid_from: int | None
    valid_to: int | None
    tx_from: int
    tx_to: int | None
    authority: str
    """The source system that asserted the fact; cardinality and retraction act within it."""
    source_record: str | None
    source_version: str | None
    evidence: str
    confidence: float
    origin: str
    """Edge id of the assertion this fact came from; a remainder keeps its parent's origin."""
    supersedes: tuple[str, ...]
    event_id: str
    detected_at: int | None
    phrase: str | None = None

    @property
    def believed(self) -> bool:
        return self.tx_to is None

    def known_at(self, known_at: int) -> bool:
        return self.tx_from <= known_at and (self.tx_to is None or known_at < self.tx_to)

    def closed_as_known_at(self, known_at: int) -> int | None:
        """``tx_to`` as the ledger knew it at ``known_at``: a closing recorded later had not happened."""
        tx_to = self.tx_to
        return tx_to if tx_to is not None and tx_to <= known_at else None

    def as_known_at(self, known_at: int) -> EdgeVersion | None:
        """The version as the ledger held it at ``known_at``; None if it was recorded after."""
        if self.tx_from > known_at:
            return None
        return self if self.closed_as_known_at(known_at) == self.tx_to else self._replace(tx_to=None)

    def valid_at(self, valid_at: int) -> bool:
        return (self.valid_from is None or self.valid_from <= valid_at) and (
            self.valid_to is None or valid_at < self.valid_to
        )

    def visible(self, valid_at: int, known_at: int) -> bool:
        return self.known_at(known_at) and self.valid_at(valid_at)

    def close_belief(self, tx: int) -> EdgeVersion:
        # Positionally: ``_replace`` parses keywords, and this runs for every closing.
        return EdgeVersion(self.edge_id, self.tenant, self.src, self.rel, self.dst, self.valid_from,
                           self.valid_to, self.tx_from, tx, self.authority, self.source_record,
                           self.source_version, self.evidence, self.confidence, self.origin,
                           self.supersedes, self.event_id, self.detected_at, self.phrase)


EncodedVersion = tuple[EdgeVersion, bool, bool, bytes]
"""A version a batch touched, in its final state, with (is_new, closed_now) and its stored encoding."""

Epoch = tuple[int, int]
"""A fence's (era, group generation) on a log partition; epochs compare as tuples."""


def fields_of(model: object) -> dict[str, Any]:
    """A validated pydantic model's field values, by field name: pydantic keeps them in the model's
    ``__dict__``. Speed: one attribute read per model, where each read of a pydantic model's
    attribute goes through its ``__getattr__`` hook (about 350 instructions; some 30 an event)."""
    return model.__dict__


class Entity(NamedTuple):
    tenant: str
    entity_id: str
    type: str
    name: str | None
    first_tx: int


class AliasEntry(NamedTuple):
    """A normalised name recorded for an entity at ``tx_from``; ``actor`` and ``reason`` when a person
    recorded it (an ``alias`` command), None and "" when a source's mention named the entity so."""

    tenant: str
    normalised: str
    entity_id: str
    tx_from: int
    actor: str | None = None
    reason: str = ""


class Filing(NamedTuple):
    """What one event filed about a source record's statements: the facts a version of the record stated
    again (``restated``: each fact's lineage, the ``origin`` its pieces share, with the valid interval
    the version stated; ``joined``: those of them another record of the source first stated, each with
    the evidence this record gave), that the
    version was revoked (``revoked``: every statement it made before ``tx`` is withdrawn; with no
    version, every version's), or that the record stopped stating facts (``ended``: lineage and the
    valid time from which its statements made before ``tx`` no longer hold). A fact's first statement is
    its versions' own provenance; filings add every other statement, so withdrawing one leaves what the
    others still state."""

    tenant: str
    system: str
    record: str
    tx: int
    version: str | None
    event_id: str
    restated: tuple[tuple[str, int | None, int | None], ...] = ()
    revoked: bool = False
    joined: tuple[tuple[str, str], ...] = ()
    ended: tuple[tuple[str, int | None], ...] = ()


class Merge(NamedTuple):
    """An audited identity merge: ``absorb`` is the same entity as ``keep`` from ``tx_from`` on, until a
    split closes it (``tx_to``, the split's transaction time, and who split it and why). As an edge
    version, a merge is never deleted: a split rewrites only its ``tx_to``, so an as-known read before
    the split still sees it."""

    tenant: str
    merge_id: str
    """The merge command's event id (a placeholder absorption's id is derived from its event's)."""
    keep: str
    absorb: str
    actor: str
    reason: str
    tx_from: int
    tx_to: int | None = None
    split_id: str | None = None
    split_actor: str | None = None
    split_reason: str | None = None

    def in_effect(self, known_at: int | None) -> bool:
        """Whether the ledger held this merge at ``known_at`` (``None``: now)."""
        if known_at is None:
            return self.tx_to is None
        return self.tx_from <= known_at and (self.tx_to is None or known_at < self.tx_to)


@dataclass(frozen=True, slots=True)
class LogicalEdge:
    src: str
    rel: str
    dst: str
    phrase: str | None = None
    """The source's wording, for ``other`` only: there each wording is an edge of its own."""


class Correction(NamedTuple):
    """A change of belief: the versions one event closed and those it appended. A NamedTuple: most
    events make one, and a frozen dataclass's ``__init__`` cost about as
    much as the rest of the event's versioning (interpreted, one ``object.__setattr__`` a field)."""

    correction_id: str
    tenant: str
    event_id: str
    tx_at: int
    cause: str
    old_edge_ids: tuple[str, ...]
    new_edge_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReviewItem:
    review_id: str
    tenant: str
    event_id: str
    tx_at: int
    category: str
    reason: str
    details: dict[str, object] = field(default_factory=dict)
    original: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """A person's audited decision on a review item (a ``decision`` event): who, why, when (``tx_at``),
    what the parked mention (if any) now resolves to (``entity``: the chosen or the new entity; None
    for a rejection), and the candidates the matcher had offered."""

    tenant: str
    review_id: str
    event_id: str
    decision: str
    entity: str | None
    actor: str
    reason: str
    tx_at: int
    category: str
    mention: dict[str, object] | None = None
    candidates: tuple[str, ...] = ()

    def entities(self) -> tuple[str, ...]:
        """The entities the decision is about (its entity index, ``decisions_for``)."""
        return tuple(dict.fromkeys((*((self.entity,) if self.entity else ()), *self.candidates)))


@dataclass(frozen=True, slots=True)
class DeadLetter:
    tx_at: int
    stage: Literal["decode", "validate", "apply"]
    reason: str
    original: str
    tenant: str | None = None
    event_id: str | None = None
    original_base64: str | None = None
    """The event's bytes, base64, when they are not UTF-8 text: ``original`` then shows each byte
    that is not with U+FFFD, and only these give the bytes back."""
    input_topic: str | None = None
    """Where a pipeline read the event (topic, partition, offset); None for a file's events."""
    input_partition: int | None = None
    input_offset: int | None = None


class EventOutcome(NamedTuple):
    """How one event ended; metrics and freshness observe these, the core never calls them."""

    tenant: str | None
    kind: str | None
    system: str | None
    outcome: Outcome
    detected_at: int | None
    tx_at: int | None


@dataclass(frozen=True, slots=True)
class SourceActivity:
    """What the ledger last heard from one source system: the transaction time of the last change and
    of the last heartbeat it applied (``*_tx``), and the newest ``detected_at`` among them. An event
    with an older ``detected_at`` than one seen before is still heard: it is a late fact, not silence."""

    tenant: str
    system: str
    last_change_detected_at: int | None = None
    last_change_tx: int | None = None
    last_heartbeat_detected_at: int | None = None
    last_heartbeat_tx: int | None = None


def last_heard_tx(activity: SourceActivity | None) -> int | None:
    """Transaction time of the newest change or heartbeat the ledger applied from a source."""
    if activity is None:
        return None
    change, heartbeat = activity.last_change_tx, activity.last_heartbeat_tx
    if change is None:
        return heartbeat
    if heartbeat is None:
        return change
    return max(change, heartbeat)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    tenant: str
    system: str
    detected_at: int
    tx_at: int


@dataclass(frozen=True, slots=True)
class Trace:
    tenant: str
    trace_id: str
    event_id: str
    query: dict[str, object]
    valid_at: int
    known_at: int
    edge_ids: tuple[str, ...] | None
    action: str
    tx_at: int
