"""The records of the ``edge-versions`` log, one ``TypedDict`` per kind: what ``processors.outbox``
builds (as bytes, from templates: the hot path never builds these) and ``streams.log.records``
reads back. A test validates what the builders emit against ``LOG_RECORD``
(``pydantic.TypeAdapter(LOG_RECORD)``).

Instants are integer microseconds since the epoch, except a correction's ``tx_at``, which is
ISO-8601 text as on ``edge-corrections``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict  # pydantic validates only this one before Python 3.12

_EXACT = ConfigDict(extra="forbid")

Outcome = Literal["applied", "duplicate", "dead_lettered", "queued_for_review"]

StoredVersion = tuple[str, str, str, str, str, int | None, int | None, int, int | None, str, str | None,
                      str | None, str, float, str, list[str], str, int | None, str | None]
"""``processors.model.EdgeVersion``'s fields in order (``state.codec.encode_version``): edge_id, tenant,
src, rel, dst, valid_from, valid_to, tx_from, tx_to, authority, source_record, source_version,
evidence, confidence, origin, supersedes, event_id, detected_at, phrase."""


@with_config(_EXACT)
class EdgeVersionRecord(TypedDict):
    kind: Literal["edge_version"]
    batch: str
    record_id: str
    appended: bool
    closed: bool
    layout: Literal[1]
    """``processors.outbox.VERSION_LAYOUT``: the order of ``version``."""
    version: StoredVersion


@with_config(_EXACT)
class EntityFields(TypedDict):
    tenant: str
    entity_id: str
    type: str
    name: str | None
    first_tx: int


@with_config(_EXACT)
class EntityRecord(TypedDict):
    kind: Literal["entity"]
    batch: str
    record_id: str
    entity: EntityFields


@with_config(_EXACT)
class AliasFields(TypedDict):
    tenant: str
    normalised: str
    entity_id: str
    tx_from: int
    actor: NotRequired[str]
    reason: NotRequired[str]


@with_config(_EXACT)
class AliasRecord(TypedDict):
    kind: Literal["alias"]
    batch: str
    record_id: str
    alias: AliasFields


@with_config(_EXACT)
class MergeFields(TypedDict):
    tenant: str
    merge_id: str
    keep: str
    absorb: str
    actor: str
    reason: str
    tx_from: int
    tx_to: int | None
    split_id: str | None
    split_actor: str | None
    split_reason: str | None


@with_config(_EXACT)
class MergeRecord(TypedDict):
    """A merge as a batch left it: made (``tx_to`` null) or closed by a split."""

    kind: Literal["merge"]
    batch: str
    record_id: str
    merge: MergeFields


@with_config(_EXACT)
class PlaceholderRecord(TypedDict):
    """A ``Type:~name`` entity was recorded (the ``Z`` row: its tenant has placeholders to absorb)."""

    kind: Literal["placeholder"]
    batch: str
    record_id: str
    tenant: str
    entity_id: str


FiledStatement = tuple[str, str, str, int, str | None, str, list[tuple[str, int | None, int | None]], bool,
                       list[tuple[str, str]], list[tuple[str, int | None]]]
"""``processors.model.Filing``'s fields in order: tenant, system, record, tx, version, event_id, restated
(lineage, valid_from, valid_to), revoked, joined (lineage, evidence), ended (lineage, from)."""


@with_config(_EXACT)
class FilingsRecord(TypedDict):
    """What a batch filed about a tenant's source records: versions that stated facts again, and
    versions revoked (``processors.statements``)."""

    kind: Literal["filings"]
    batch: str
    record_id: str
    tenant: str
    filings: list[FiledStatement]


@with_config(_EXACT)
class CorrectionRecord(TypedDict):
    """A correction, or one ``part`` of ``parts`` of one too large for a record."""

    kind: Literal["correction"]
    batch: str
    record_id: str
    correction_id: str
    tenant: str
    event_id: str
    tx_at: str
    cause: str
    old_edge_ids: list[str]
    new_edge_ids: list[str]
    part: NotRequired[int]
    parts: NotRequired[int]


@with_config(_EXACT)
class ReviewFields(TypedDict):
    review_id: str
    tenant: str
    event_id: str
    tx_at: int
    category: str
    reason: str
    details: dict[str, Any]
    original: str | None


@with_config(_EXACT)
class ReviewRecord(TypedDict):
    kind: Literal["review"]
    batch: str
    record_id: str
    item: ReviewFields


@with_config(_EXACT)
class DecisionFields(TypedDict):
    tenant: str
    review_id: str
    event_id: str
    decision: Literal["choose", "new", "reject"]
    entity: str | None
    actor: str
    reason: str
    tx_at: int
    category: str
    mention: dict[str, Any] | None
    candidates: list[str]


@with_config(_EXACT)
class DecisionRecord(TypedDict):
    """A review decision (``processors.model.Decision``): it closes its review item."""

    kind: Literal["decision"]
    batch: str
    record_id: str
    decision: DecisionFields


@with_config(_EXACT)
class DeadLetterFields(TypedDict):
    tx_at: int
    stage: Literal["decode", "validate", "apply"]
    reason: str
    original: str
    tenant: str | None
    event_id: str | None
    original_base64: str | None
    input_topic: str | None
    input_partition: int | None
    input_offset: int | None


@with_config(_EXACT)
class DeadLetterRecord(TypedDict):
    kind: Literal["dead_letter"]
    batch: str
    record_id: str
    letter: DeadLetterFields


@with_config(_EXACT)
class TraceFields(TypedDict):
    tenant: str
    trace_id: str
    event_id: str
    query: dict[str, Any]
    valid_at: int
    known_at: int
    edge_ids: list[str] | None
    action: str
    tx_at: int


@with_config(_EXACT)
class TraceRecord(TypedDict):
    kind: Literal["trace"]
    batch: str
    record_id: str
    trace: TraceFields


@with_config(_EXACT)
class HeartbeatFields(TypedDict):
    tenant: str
    system: str
    detected_at: int
    tx_at: int


@with_config(_EXACT)
class HeartbeatRecord(TypedDict):
    kind: Literal["heartbeat"]
    batch: str
    record_id: str
    heartbeat: HeartbeatFields


_Started = TypedDict("_Started", {"from": list[tuple[str, int, int]]})
"""A marker's ``from`` (a keyword, so named here): (topic, partition, first offset) of each input the
batch consumed; empty when the batch was built without them."""


@with_config(_EXACT)
class BatchMarker(_Started):
    """Closes a batch's records on its log partition: per tenant, and one without a tenant per log
    partition whose input partition the batch consumed."""

    kind: Literal["batch"]
    record_id: str
    batch: str
    tenant: str | None
    outcomes: dict[str, Outcome]
    """The events the batch applied for the tenant, by event id."""
    inputs: list[tuple[str, int, int]]
    """(topic, partition, last offset) of each input the batch consumed."""
    heard: list[tuple[str, str, int | None, int | None]]
    """(system, kind, detected_at, tx) of each change and heartbeat applied for the tenant."""
    last_tx: int
    records: NotRequired[int]
    """Distinct records the marker closes on its partition, where its writer knows where they landed."""
    epoch: NotRequired[tuple[int, int]]
    """The epoch of the fence its writer put on the partition (``streams.worker.fences``)."""


@with_config(_EXACT)
class FenceRecord(TypedDict):
    kind: Literal["fence"]
    record_id: str
    partition: int
    epoch: tuple[int, int]
    worker: str
    lineage: str
    fenced_at: float


@with_config(_EXACT)
class ProbeRecord(TypedDict):
    """A record a reader skips: its writer reads the log up to it."""

    kind: Literal["probe"]
    record_id: str


@with_config(_EXACT)
class InputResetRecord(TypedDict):
    """Input offsets a reader forgets: the topics were made anew (``streams.worker.positions``)."""

    kind: Literal["input_reset"]
    record_id: str
    partition: int
    inputs: list[tuple[str, int]]
    """(topic, partition) of each input whose offsets restart."""
    epoch: tuple[int, int] | None
    """The epoch of its writer's fence on the partition."""
    reason: str


HeldRecord = (EdgeVersionRecord | EntityRecord | AliasRecord | MergeRecord | PlaceholderRecord | FilingsRecord
              | CorrectionRecord | ReviewRecord | DecisionRecord | DeadLetterRecord | TraceRecord | HeartbeatRecord)
"""The records a batch marker closes."""

LOG_RECORD = Annotated[HeldRecord | BatchMarker | FenceRecord | ProbeRecord | InputResetRecord,
                       Field(discriminator="kind")]
"""Any record on ``edge-versions``."""
