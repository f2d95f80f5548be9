"""The ledger's event-sourced log: what each committed batch did, as records on ``edge-versions``.

Each batch writes, in this order, one record per appended or closed edge version, one per new or
renamed entity and per new alias, one per correction (``correction``, its parts as on
``edge-corrections``), review item (``review``), dead letter (``dead_letter``), trace and
heartbeat, and a closing ``batch`` marker per tenant with the event ids it applied, the input
offsets it consumed, what it heard from each source (``heard``: system, kind, detected_at, tx
of each applied change and heartbeat, for source activity) and how many records it closes
(``records``: a part that lost one to a failed delivery is not applied). Replaying a partition's records
through ``Replay`` rebuilds the same ledger state (what a worker that lost its disk, or a query
replica, does). Each marker also carries the ``epoch`` of the ``fence`` its writer put on that log
partition, and the log holds those fences, and ``probe`` records a reader skips (``streams.worker.fences``).
The review item's and dead letter's original text is kept to its first
``ORIGINAL_KEPT`` characters there, as on their own topics. Every record has a ``record_id`` so
consumers can de-duplicate re-sent outbox records.

An ``edge_version`` record's ``version`` is the ledger's own encoding of the version: a JSON array
of ``processors.model.EdgeVersion``'s fields in order, instants as integer microseconds since the
epoch (``state.codec.encode_version``, the bytes of the stored row), and its ``layout`` names that
order (``VERSION_LAYOUT``; a reader refuses a layout it does not know rather than misread it).
Logs written before carry the contract's edge shape there (an object, ISO-8601 instants, plus
``detected_at_us``, no ``layout``); ``Replay`` reads both.

Other outputs: ``edge-corrections`` (correction events), ``dead-letter`` (original bytes, stage,
reason), ``review-queue`` (parked events and flagged conflicts).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

import orjson

from processors.model import (
    AliasEntry,
    Correction,
    DeadLetter,
    EdgeVersion,
    Entity,
    EventOutcome,
    Heartbeat,
    ReviewItem,
    Trace,
)
from processors.pending import PendingLedger
from processors.ports import LedgerReader
from schemas.times import format_micros, parse_micros
from state import codec
from state.store import EncodedVersion
from streams.kafka.topics import Topic, tenant_partition
from streams.worker.fences import Epoch, epoch_of

log = logging.getLogger(__name__)


class OutRecord(NamedTuple):
    """Speed: a NamedTuple, a quarter of a frozen dataclass's cost to build; a batch builds two per event."""

    topic: str
    key: str
    value: bytes
    partition: int = -1
    """-1: the producer chooses by ``key``."""


ORIGINAL_KEPT = 128 * 1024
"""Characters of an event's original text that a dead-letter or review record carries. The input
fitted in one Kafka record, but the same text JSON-escaped inside another record may not (up to 6x
for control characters), and a record the producer refuses would stop the worker at every restart.
The ledger's own state keeps the whole text: ``edgeledger dead-letters --state DIR --tenant T`` and ``review``."""


def bounded_original(original: str | None) -> dict[str, object]:
    """The ``original`` field of a dead-letter or review record, cut to ``ORIGINAL_KEPT`` characters,
    with ``original_length`` and ``original_truncated`` saying whether anything was cut."""
    if original is None:
        return {"original": None}
    return {"original": original[:ORIGINAL_KEPT], "original_length": len(original),
            "original_truncated": len(original) > ORIGINAL_KEPT}


def _bounded_base64(encoded: str | None) -> dict[str, object]:
    """A dead letter's ``original_base64``, cut to ``ORIGINAL_KEPT`` characters (whole 4-character
    groups, so what is kept decodes to the first bytes), and ``original_base64_truncated``: base64
    is a third longer than the bytes, so it can be cut where the text (``original_truncated``) is not."""
    if encoded is None:
        return {}
    kept = ORIGINAL_KEPT - ORIGINAL_KEPT % 4
    return {"original_base64": encoded[:kept], "original_base64_truncated": len(encoded) > kept}


VERSION_LAYOUT = 1
"""The field order of an ``edge_version`` record's ``version`` array: 1 is ``EdgeVersion``'s 19 fields
as of format 3 of the stored state. Change it with any change to ``EdgeVersion``'s fields, and teach
``decode_logged_version`` the old order: the log is kept forever."""
_VERSION_FLAGS = {(appended, closed): b',"appended":%s,"closed":%s,"layout":%d,"version":' % (
    orjson.dumps(appended), orjson.dumps(closed), VERSION_LAYOUT)
    for appended in (False, True) for closed in (False, True)}


def version_head(batch_id: str | None = None) -> bytes:
    """The bytes an ``edge_version`` record of batch ``batch_id`` starts with, up to its record id:
    built once per batch, not per version."""
    if batch_id is None:
        return b'{"kind":"edge_version","record_id":'
    return b'{"kind":"edge_version","batch":' + orjson.dumps(batch_id) + b',"record_id":'


_NO_BATCH = version_head()


def version_record_id(version: EdgeVersion) -> str:
    """An ``edge_version`` record's id: a version's open and closed states are two records."""
    return f"{version.tenant}/{version.edge_id}@{'closed' if version.tx_to is not None else 'open'}"


def version_record(version: EdgeVersion, appended: bool, closed: bool, encoded: bytes,
                   head: bytes = _NO_BATCH, record_id: str | None = None) -> bytes:
    """The ``edge_version`` record of a version whose stored encoding is ``encoded``: the bytes
    ``orjson.dumps`` gives for {kind, record_id, appended, closed, layout, version}, without decoding or
    encoding the version again. Speed: re-shaping each version as the contract's edge (five
    instants formatted as text, a nested object) took 13 of a worker's 69 µs of main-thread time
    per event (200k events); the log's readers decode it back to the same ``EdgeVersion`` either way.
    ``head``: ``version_head`` of the record's batch; ``record_id``: ``version_record_id``, when the
    caller has it already."""
    if record_id is None:
        record_id = version_record_id(version)
    return b"".join((head, orjson.dumps(record_id), _VERSION_FLAGS[appended, closed], encoded, b"}"))


CORRECTION_IDS_PER_RECORD = 100_000
"""Edge ids one ``edge-corrections`` record names at most (about 2 MB). Revoking a whole source
closes every version it asserted, and one record naming a million ids would be more than the
producer sends, and refused again at every restart of the worker."""


def correction_records(correction: Correction) -> list[dict]:
    """The correction as ``edge-corrections`` records: one, or, past ``CORRECTION_IDS_PER_RECORD``
    ids, parts that share its ``correction_id`` and say ``part`` (from 1) of ``parts``; each part
    names a slice of the old ids and then of the new ones, and together they name all of them."""
    head = {"kind": "correction", "correction_id": correction.correction_id, "tenant": correction.tenant,
            "event_id": correction.event_id, "tx_at": format_micros(correction.tx_at), "cause": correction.cause}
    old, new = correction.old_edge_ids, correction.new_edge_ids
    if len(old) + len(new) <= CORRECTION_IDS_PER_RECORD:
        return [{**head, "record_id": correction.correction_id, "old_edge_ids": old, "new_edge_ids": new}]
    # Part n covers positions [start, end) of old + new: the old ids there, then the new ones.
    starts = range(0, len(old) + len(new), CORRECTION_IDS_PER_RECORD)
    return [{**head, "record_id": f"{correction.correction_id}/part-{number}", "part": number, "parts": len(starts),
             "old_edge_ids": old[start:start + CORRECTION_IDS_PER_RECORD],
             "new_edge_ids": new[max(0, start - len(old)):max(0, start + CORRECTION_IDS_PER_RECORD - len(old))]}
            for number, start in enumerate(starts, 1)]


def outbox_for(pending: PendingLedger, versions: list[EncodedVersion], inputs: dict[tuple[str, int], int],
               batch_id: str, log_partitions: int = 0,
               first: dict[tuple[str, int], int] | None = None,
               epochs: dict[int, Epoch] | None = None) -> list[OutRecord]:
    """Every record a batch must emit, keyed by tenant (the partitioning unit); ``versions`` are
    the batch's versions as its commit encoded them (``state.store.LogRows``). With
    ``log_partitions`` (the ``edge-versions`` partition count), also a marker without a tenant in
    each log partition whose input partition the batch consumed: a batch that applied nothing there
    (only dead letters of events that named no tenant, say) still records its input offsets where a
    rebuild of that partition reads them. Markers name the last input offset of each (topic,
    partition) the batch consumed (``inputs``) and, given ``first``, the first (``from``).

    Each tenant's records come right before its marker, so on any log partition the records a
    marker closes (``Replay``) are its own tenant's: a send cut short after one tenant's marker
    leaves that tenant's part of the batch whole on the log, and none of the next's applied.
    With ``log_partitions``, each marker also counts the records it closes (``records``: distinct
    record ids on its log partition since the partition's previous marker), so that a reader can
    tell a part that lost a record to a failed delivery from a whole one, and the epoch of the fence
    its writer put on that partition (``epochs``, by log partition; ``streams.worker.fences``)."""
    records: list[OutRecord] = []
    ids: list[str | None] = []
    """Each record's ``record_id`` on the log (None: a record of another topic), for the markers' counts."""
    log = Topic.EDGE_VERSIONS
    head = version_head(batch_id)
    for version, is_new, closed_now, encoded in versions:
        record_id = version_record_id(version)
        records.append(OutRecord(log, version.tenant, version_record(version, is_new, closed_now, encoded, head,
                                                                    record_id)))
        ids.append(record_id)
    for entity in pending.entities.values():
        record_id = f"{entity.tenant}/entity/{entity.entity_id}/{entity.name}"
        records.append(OutRecord(log, entity.tenant, orjson.dumps(
            {"kind": "entity", "batch": batch_id, "record_id": record_id, "entity": entity._asdict()})))
        ids.append(record_id)
    for alias in pending.aliases:
        # Speed: the fields by hand; ``asdict`` deep-copies and cost 15 µs an alias (0.3 per event here).
        record_id = f"{alias.tenant}/alias/{alias.normalised}/{alias.entity_id}"
        records.append(OutRecord(log, alias.tenant, orjson.dumps(
            {"kind": "alias", "batch": batch_id, "record_id": record_id,
             "alias": {"tenant": alias.tenant, "normalised": alias.normalised, "entity_id": alias.entity_id,
                       "tx_from": alias.tx_from}})))
        ids.append(record_id)
    for correction in pending.corrections:
        for part in correction_records(correction):
            records.append(OutRecord(Topic.EDGE_CORRECTIONS, correction.tenant, orjson.dumps(part)))
            records.append(OutRecord(log, correction.tenant, orjson.dumps({**part, "batch": batch_id})))
            ids += (None, part["record_id"])
    for item in pending.review_items:
        fields, bounded = asdict(item), bounded_original(item.original)
        records.append(OutRecord(Topic.REVIEW_QUEUE, item.tenant, orjson.dumps(
            {"record_id": item.review_id, **fields, "tx_at": format_micros(item.tx_at), **bounded})))
        record_id = f"{item.tenant}/review/{item.review_id}"
        records.append(OutRecord(log, item.tenant, orjson.dumps(  # the item's own fields: Replay rebuilds it
            {"kind": "review", "batch": batch_id, "record_id": record_id,
             "item": {**fields, "original": bounded["original"]}})))
        ids += (None, record_id)
    marked = sorted({partition for _, partition in inputs if partition < log_partitions})
    anchor = marked[0] if marked else -1
    for letter in pending.dead_letters:
        record_id = f"{batch_id}/{letter.tx_at}"
        fields = asdict(letter)
        bounded, raw = bounded_original(letter.original), _bounded_base64(letter.original_base64)
        records.append(OutRecord(Topic.DEAD_LETTER, letter.tenant or "", orjson.dumps(
            {"record_id": record_id, **fields, "tx_at": format_micros(letter.tx_at), **bounded, **raw})))
        # On the log, a letter goes with its tenant's records (keyed by the tenant), except:
        # - one that names no tenant has no key to place it: it goes where this batch writes a marker;
        # - one read off its tenant's partition stays with the partition it arrived on, closed by that
        #   partition's marker: its tenant's partition may be another worker's, and two workers' batches
        #   interleaved on one partition would discard each other's records in a replay.
        key, partition = letter.tenant or "", -1
        if not letter.tenant:
            partition = anchor
        elif read_off_home(letter, log_partitions):
            assert letter.input_partition is not None  # a letter read off its home names where it was read
            key, partition = "", letter.input_partition
        records.append(OutRecord(log, key, orjson.dumps(
            {"kind": "dead_letter", "batch": batch_id, "record_id": f"{record_id}/log",
             "letter": {**fields, "original": bounded["original"], "original_base64": raw.get("original_base64")}}),
            partition))
        ids += (None, f"{record_id}/log")
    for trace in pending.traces:
        record_id = f"{trace.tenant}/trace/{trace.trace_id}"
        records.append(OutRecord(log, trace.tenant, orjson.dumps(
            {"kind": "trace", "batch": batch_id, "record_id": record_id, "trace": asdict(trace)})))
        ids.append(record_id)
    for beat in pending.heartbeats:
        record_id = f"{beat.tenant}/heartbeat/{beat.system}/{beat.tx_at}"
        records.append(OutRecord(log, beat.tenant, orjson.dumps(
            {"kind": "heartbeat", "batch": batch_id, "record_id": record_id, "heartbeat": asdict(beat)})))
        ids.append(record_id)
    heard: dict[str, list[list]] = {}
    for outcome in pending.outcomes:
        if outcome.outcome == "applied" and outcome.tenant is not None and outcome.system is not None \
                and outcome.kind in ("change", "heartbeat"):
            heard.setdefault(outcome.tenant, []).append(
                [outcome.system, outcome.kind, outcome.detected_at, outcome.tx_at])
    seen_by_tenant: dict[str, list[str]] = {}
    for tenant, event_id in pending.seen:
        seen_by_tenant.setdefault(tenant, []).append(event_id)
    consumed = [[topic, partition, offset] for (topic, partition), offset in sorted(inputs.items())]
    started = [[topic, partition, offset] for (topic, partition), offset in sorted((first or {}).items())]
    by_tenant: dict[str, _Group] = {}
    for record, logged_id in zip(records, ids, strict=True):
        group = by_tenant.get(record.key)  # by tenant ("": a letter naming none, or read off its tenant's partition)
        if group is None:
            group = by_tenant[record.key] = _Group(record.key, [], [])
        group.records.append(record)
        group.ids.append(logged_id)
    # A marker for every tenant the batch wrote a log record of or saw an event of.
    tenants = {key for key, group in by_tenant.items() if key and any(group.ids)} | seen_by_tenant.keys()
    # Records of no tenant (dead letters that name none or were read off their tenant's partition) go
    # before the marker without a tenant that closes them or, where the batch writes none, before the
    # first tenant's marker.
    untenanted = _Group("", [], [])
    for key, group in by_tenant.items():
        if key not in tenants:
            untenanted.records.extend(group.records)
            untenanted.ids.extend(group.ids)
    ordered: list[_Group | _Marker] = [] if marked else [untenanted]
    for tenant in sorted(tenants):
        ordered.append(by_tenant.get(tenant) or _Group(tenant, [], []))
        ordered.append(_Marker(tenant, -1, {
            "kind": "batch", "record_id": f"{batch_id}/{tenant}", "batch": batch_id, "tenant": tenant,
            "outcomes": {event_id: pending.seen[(tenant, event_id)] for event_id in seen_by_tenant.get(tenant, [])},
            "inputs": consumed, "from": started, "heard": heard.get(tenant, []), "last_tx": pending.last_tx()}))
    if marked:
        ordered.append(untenanted)
    for partition in marked:
        ordered.append(_Marker("", partition, {
            "kind": "batch", "record_id": f"{batch_id}/partition-{partition}", "batch": batch_id, "tenant": None,
            "outcomes": {}, "inputs": consumed, "from": started, "heard": [], "last_tx": pending.last_tx()}))
    # A log record with neither key nor partition lands where the producer chooses at random.
    placed = all(record.partition >= 0 for record, record_id in zip(untenanted.records, untenanted.ids, strict=True)
                 if record_id is not None)
    return _counted(ordered, log_partitions, placed, epochs or {})


class _Group(NamedTuple):
    """A batch's records of one key, with each one's ``record_id`` on the log (None: another topic's)."""

    key: str
    records: list[OutRecord]
    ids: list[str | None]


class _Marker(NamedTuple):
    """A batch marker not yet encoded: its count of records is known once those before it are placed."""

    key: str
    partition: int
    body: dict


def _counted(ordered: list[_Group | _Marker], log_partitions: int, placed: bool,
             epochs: dict[int, Epoch]) -> list[OutRecord]:
    """The records and markers in ``ordered``, each marker with the epoch of its partition's fence
    and the count of distinct log records before it on its partition since that partition's previous
    marker. Without ``log_partitions`` where a marker lands is not known here, and unless every record
    is ``placed`` neither is where they all land: the markers then carry no epoch, or no count."""
    counting = placed and log_partitions > 0
    since_marker: dict[int, set[str | None]] = {}
    result: list[OutRecord] = []
    for entry in ordered:
        if isinstance(entry, _Marker):
            if log_partitions:
                landing = entry.partition if entry.partition >= 0 else tenant_partition(entry.key, log_partitions)
                if counting:
                    closed = since_marker.pop(landing, set())
                    closed.discard(None)
                    entry.body["records"] = len(closed)
                epoch = epochs.get(landing)
                if epoch is not None:
                    entry.body["epoch"] = list(epoch)
            result.append(OutRecord(Topic.EDGE_VERSIONS, entry.key, orjson.dumps(entry.body), entry.partition))
            continue
        result += entry.records
        if not counting:
            continue
        if entry.key:  # a tenant's records: keyed by it, placed by the producer
            since_marker.setdefault(tenant_partition(entry.key, log_partitions), set()).update(entry.ids)
            continue
        for record, record_id in zip(entry.records, entry.ids, strict=True):  # each placed by its partition
            since_marker.setdefault(record.partition, set()).add(record_id)
    return result


def read_off_home(letter: DeadLetter, log_partitions: int) -> bool:
    """Whether a pipeline read the letter's event off its tenant's partition (a misrouted record)."""
    return (log_partitions > 0 and letter.tenant is not None and letter.input_partition is not None
            and letter.input_partition != tenant_partition(letter.tenant, log_partitions))


def is_marker(value: bytes) -> bool:
    """Whether a log record's bytes are a ``batch`` marker's (as ``outbox_for`` writes them), without decoding."""
    return value.startswith(b'{"kind":"batch"')


def parked_inputs(records: Iterable[tuple[str, str, bytes, int]]) -> dict[tuple[str, int], int]:
    """The input (topic, partition)s that the batches of parked outbox ``(topic, key, value, partition)``
    records consumed, each with the first offset consumed there, as their ``batch`` markers on
    ``edge-versions`` say. A marker written before markers named it (no ``from``) gives -1 there:
    the first is not known, so any progress of the group counts as past it."""
    consumed: dict[tuple[str, int], int] = {}
    for topic, _, value, _ in records:
        if topic == Topic.EDGE_VERSIONS and is_marker(value):
            marker = orjson.loads(value)
            started = marker.get("from") or [[name, partition, -1] for name, partition, _ in marker["inputs"]]
            for name, partition, offset in started:
                key = (str(name), int(partition))
                consumed[key] = min(int(offset), consumed.get(key, int(offset)))
    return consumed


def decode_logged_version(record: dict) -> EdgeVersion:
    """The version an ``edge_version`` record carries: the stored encoding (an array, in ``layout``
    order), or, in logs written before it, the contract's edge shape (an object)."""
    data, layout = record["version"], record.get("layout")
    if isinstance(data, dict) and layout is None:
        return _from_edge_shape(data)
    if layout != VERSION_LAYOUT:
        raise ValueError(f"an edge_version record in layout {layout!r}: this edgeledger reads layout "
                         f"{VERSION_LAYOUT} (a newer edgeledger wrote it?)")
    if not isinstance(data, list) or len(data) != len(EdgeVersion._fields):
        raise ValueError(f"an edge_version record's version must be an array of {len(EdgeVersion._fields)} "
                         f"fields ({', '.join(EdgeVersion._fields)}), got {type(data).__name__}")
    return codec.version_from_fields(data)


def _from_edge_shape(data: dict) -> EdgeVersion:
    source = data["source"]
    return EdgeVersion(
        edge_id=data["edge_id"], tenant=data["tenant"], src=data["src"], rel=data["rel"], dst=data["dst"],
        valid_from=_micros(data["valid_from"]), valid_to=_micros(data["valid_to"]),
        tx_from=parse_micros(data["tx_from"]), tx_to=_micros(data["tx_to"]), authority=source["system"],
        source_record=source["record"], source_version=source["version"], evidence=data["evidence"] or "",
        confidence=data["confidence"], origin=data["origin"], supersedes=tuple(data["supersedes"]),
        event_id=data["event_id"], detected_at=data.get("detected_at_us"), phrase=data.get("phrase"),
    )


def _micros(text: str | None) -> int | None:
    return parse_micros(text) if text is not None else None


@dataclass
class _Open:
    """What one log partition has sent of the batch now being read: held until its marker."""

    pending: PendingLedger
    batch: str | None = None
    """The batch its records name (records of logs written before they named one: None)."""
    record_ids: set[str] = field(default_factory=set)
    parts: dict[str, list[dict]] = field(default_factory=dict)
    """The parts of a correction split over several records (``correction_records``), by correction id."""


@dataclass
class Replay:
    """Rebuilds ledger state from ``edge-versions`` records, one committed batch at a time.

    Each log partition's records are held until a batch marker closes them, and a batch is applied
    once. A marker whose inputs on its own partition number are all at or below what was applied
    already (``inputs_seen``) closes a batch applied before (re-sent after a crash, or read again by
    a rebuild over state that holds it): its records are dropped. ``inputs_seen`` moves for an input
    partition at the batch's last marker in the log partition of the same number, the one without a
    tenant, so the batch's tenant markers before it are each applied once, also across a restart
    between them (a tenant's events and its log records share the partition number). A marker seen
    again before that (a send cut short, then re-sent) is dropped, and records of another batch than
    the held ones of the same writer (the rest of a send cut short) discard what is held. Batches of
    two writers (a late one's among the owner's) are held apart, by the worker their ids name, on a
    partition with a fence (logs of before fences are read as then). Within a batch a record id
    counts once. Markers of logs written before markers named their batch
    move ``inputs_seen`` at once and are always applied, as then.

    Fences (``streams.worker.fences``): per log partition the highest fence read so far is kept in
    ``fences`` (a caller that starts past a partition's beginning hands in the last one before), a
    lower fence read later is ignored, and a marker whose epoch is lower than the partition's fence
    (or that carries none, once there is one) closes a batch of a writer that had lost the partition
    by then: its part is dropped, with its records, and counted in ``fenced_off``."""

    reader: LedgerReader
    fences: dict[int, Epoch] = field(default_factory=dict)
    fenced_off: int = 0
    """Markers dropped for an epoch below their partition's fence."""
    fenced_off_epochs: set[Epoch | None] = field(default_factory=set)
    """The epochs those markers carried."""
    _open: dict[int, dict[str | None, _Open]] = field(default_factory=dict)
    """Per log partition and writer (``_writer``): the batch being read."""
    _applied: dict[int, set[str]] = field(default_factory=dict)
    """Per log partition: the markers applied since ``inputs_seen`` last moved there."""
    _short: dict[int, dict[str, set[str]]] = field(default_factory=dict)
    """Per log partition and batch: the markers that closed fewer or other records than they counted."""

    def feed(self, values: Iterable[bytes], commit, inputs_seen: dict[tuple[str, int], int],
             partition: int = 0) -> int:
        """Apply the records of log partition ``partition``; commit at each marker of a batch not
        applied before; ``inputs_seen`` (the input offsets applied so far) is read and updated.
        Returns how many records were read."""
        count = 0
        for raw in values:
            count += 1
            record = orjson.loads(raw)
            kind = record.get("kind")
            if kind == "batch":
                self._close(record, commit, inputs_seen, partition)
                continue
            if kind == "fence":
                self._fence(record, partition)
                continue
            if kind == "probe":
                continue
            batch = record.get("batch")
            open_here, writer = self._open.setdefault(partition, {}), self._writer(batch, partition)
            held = open_here.get(writer)
            if held is None or (batch is not None and held.batch is not None and held.batch != batch):
                held = open_here[writer] = _Open(PendingLedger(self.reader), batch)
            record_id = record.get("record_id")
            if record_id is not None:
                if record_id in held.record_ids:
                    continue
                held.record_ids.add(record_id)
            _hold(held, kind, record)
        return count

    def _writer(self, batch: str | None, partition: int) -> str | None:
        """Whose open batch a record of ``batch`` joins: on a fenced partition the worker its id names
        (``WORKER-N-OFFSET``), elsewhere one for all, as before fences."""
        return batch.rsplit("-", 2)[0] if batch is not None and partition in self.fences else None

    def _fence(self, record: dict, partition: int) -> None:
        epoch, latest = epoch_of(record), self.fences.get(partition)
        if epoch is not None and (latest is None or epoch > latest):
            self.fences[partition] = epoch
            # A batch still open here can only close with a marker below this fence: a new owner
            # fences before it writes, and a worker re-sends what it parked before it fences.
            self._open.pop(partition, None)
        else:
            log.warning("log partition %d: fence %s of epoch %s is not above the partition's fence %s: a late "
                        "one, ignored", partition, record.get("record_id"), epoch, latest)

    def _close(self, marker: dict, commit, inputs_seen: dict[tuple[str, int], int], partition: int) -> None:
        batch, tenant = marker.get("batch"), marker["tenant"]
        held = self._open.get(partition, {}).pop(self._writer(batch, partition), None)
        fence, epoch = self.fences.get(partition), epoch_of(marker)
        if fence is not None and (epoch is None or epoch < fence):
            self.fenced_off += 1
            self.fenced_off_epochs.add(epoch)
            log.warning("log partition %d: batch %s's marker %s of epoch %s is below the partition's fence %s: "
                        "its writer had lost the partition, not applied", partition, batch,
                        marker.get("record_id"), epoch, fence)
            return
        if held is not None and batch is not None and held.batch not in (None, batch):
            held = None  # the rest of another batch's send, cut short
        applied = self._applied.setdefault(partition, set())
        own = [(topic, offset) for topic, number, offset in marker["inputs"] if number == partition]
        fresh = not own or any(offset > inputs_seen.get((topic, partition), -1) for topic, offset in own)
        if batch is not None and (not fresh or marker["record_id"] in applied):
            return
        if batch is not None and not self._whole(marker, held, partition):
            return
        pending = held.pending if held is not None else PendingLedger(self.reader)
        if tenant is not None:
            for event_id, outcome in marker["outcomes"].items():
                pending.mark_seen(tenant, event_id, outcome)
            for system, event_kind, detected_at, tx in marker.get("heard", ()):
                pending.outcomes.append(EventOutcome(tenant, event_kind, system, "applied", detected_at, tx))
        pending.tx = marker["last_tx"]
        if batch is None or tenant is None:  # the batch's last marker here (or a log of before)
            for topic, offset in own:
                inputs_seen[(topic, partition)] = max(offset, inputs_seen.get((topic, partition), -1))
            applied.clear()
            if batch is not None:
                self._short.get(partition, {}).pop(batch, None)
        else:
            applied.add(marker["record_id"])
        commit(pending)

    def _whole(self, marker: dict, held: _Open | None, partition: int) -> bool:
        """Whether the batch's records on this partition up to ``marker`` are all there, as far as the
        marker can tell: it counts the records it closes (``records``, in logs written since session 19),
        and one lost to a failed delivery leaves fewer. A part that is not whole is not applied, and
        neither is the batch's last marker here, so ``inputs_seen`` stays short of the batch: the
        batch sent again (the worker's restart re-sends its outbox) applies what is missing, and a
        rebuilt worker applies those inputs itself."""
        batch, expected = marker["batch"], marker.get("records")
        short = self._short.setdefault(partition, {})
        if expected is not None and expected != (len(held.record_ids) if held is not None else 0):
            short.setdefault(batch, set()).add(marker["record_id"])
            log.warning("log partition %d: batch %s's marker %s counts %d records and %d arrived before it; "
                        "not applied until the batch is sent whole", partition, batch, marker["record_id"],
                        expected, len(held.record_ids) if held is not None else 0)
            return False
        missing = short.get(batch)
        if missing is not None:
            missing.discard(marker["record_id"])
            if marker["tenant"] is None and missing:
                return False  # the batch's last marker here: its inputs are not all applied
            if not missing:
                del short[batch]
        return True


def _hold(held: _Open, kind: str | None, record: dict) -> None:
    """Add one log record to the batch it belongs to."""
    pending = held.pending
    if kind == "edge_version":
        version = decode_logged_version(record)
        key = (version.tenant, version.edge_id)
        pending.versions[key] = version
        if record["appended"]:
            pending.appended.append(key)
        if record["closed"]:
            pending.closed.append(key)
    elif kind == "entity":
        pending.add_entity(Entity(**record["entity"]))
    elif kind == "alias":
        pending.add_alias(AliasEntry(**record["alias"]))
    elif kind == "correction":
        correction = _correction(held.parts, record)
        if correction is not None:
            pending.corrections.append(correction)
    elif kind == "review":
        pending.review_items.append(ReviewItem(**record["item"]))
    elif kind == "dead_letter":
        pending.dead_letters.append(DeadLetter(**record["letter"]))
    elif kind == "trace":
        fields = record["trace"]
        if fields["edge_ids"] is not None:
            fields["edge_ids"] = tuple(fields["edge_ids"])
        pending.traces.append(Trace(**fields))
    elif kind == "heartbeat":
        pending.heartbeats.append(Heartbeat(**record["heartbeat"]))


def _correction(parts_by_id: dict[str, list[dict]], record: dict) -> Correction | None:
    """The correction a ``correction`` record carries, once all its parts are in."""
    parts = record.get("parts")
    if parts is not None:
        collected = parts_by_id.setdefault(record["correction_id"], [])
        if record["part"] not in {part["part"] for part in collected}:
            collected.append(record)
        if len(collected) < parts:
            return None
        del parts_by_id[record["correction_id"]]
        collected.sort(key=lambda part: part["part"])
    else:
        collected = [record]
    head = collected[0]
    return Correction(head["correction_id"], head["tenant"], head["event_id"], parse_micros(head["tx_at"]),
                      head["cause"], tuple(i for part in collected for i in part["old_edge_ids"]),
                      tuple(i for part in collected for i in part["new_edge_ids"]))
