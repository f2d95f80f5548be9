"""What a committed batch emits: its records on ``edge-versions`` (the ledger's event-sourced log)
and on the other output topics, built as bytes for the worker's outbox.

Each batch writes, in this order, one record per appended or closed edge version, one per new or
renamed entity and per new alias, one per merge made or split (``merge``, the merge as it then
stands), one per tenant listing what the batch filed about source records' statements (``filings``:
restatements and revocations; several past ``FILED_FACTS_PER_RECORD``), one per placeholder entity
recorded (``placeholder``), one per correction (``correction``, its parts as on ``edge-
corrections``), review item (``review``), review decision (``decision``), dead letter
(``dead_letter``), trace and heartbeat, and a closing ``batch`` marker per tenant with the event ids
it applied, the input offsets it consumed, what it heard from each source (``heard``: system, kind,
detected_at, tx of each applied change and heartbeat, for source activity) and how many records it
closes (``records``: a part that lost one to a failed delivery is not applied). Replaying a
partition's records (``streams.log.records.Replay``) rebuilds the same ledger state (what a worker
that lost its disk, or a query replica, does). Each marker also carries the ``epoch`` of the
``fence`` its writer put on that log partition, and the log holds those fences, and ``probe``
records a reader skips (``streams.worker.fences``). The review item's and dead letter's original
text is kept to its first ``ORIGINAL_KEPT`` characters there, as on their own topics. Every record
has a ``record_id`` so consumers can de-duplicate re-sent outbox records, and names its ``batch``.

An ``edge_version`` record's ``version`` is the ledger's own encoding of the version: a JSON array
of ``processors.model.EdgeVersion``'s fields in order, instants as integer microseconds since the
epoch (``state.codec.encode_version``, the bytes of the stored row), and its ``layout`` names that
order (``VERSION_LAYOUT``; a reader refuses a layout it does not know rather than misread it).
``schemas.log_records`` describes every record kind.

Other outputs: ``edge-corrections`` (correction events), ``dead-letter`` (original bytes, stage,
reason), ``review-queue`` (parked events and flagged conflicts).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from typing import NamedTuple

import orjson

from processors.model import Correction, DeadLetter, EdgeVersion, EncodedVersion, Epoch
from processors.pending import PendingLedger
from schemas.times import format_micros
from schemas.topics import Topic, tenant_partition


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
"""The field order of an ``edge_version`` record's ``version`` array: 1 is ``EdgeVersion``'s 19 fields.
Change it with any change to ``EdgeVersion``'s fields: a reader refuses a layout it does not know."""
_VERSION_FLAGS = {(appended, closed): b',"appended":%s,"closed":%s,"layout":%d,"version":' % (
    orjson.dumps(appended), orjson.dumps(closed), VERSION_LAYOUT)
    for appended in (False, True) for closed in (False, True)}


def version_head(batch_id: str) -> bytes:
    """The bytes an ``edge_version`` record of batch ``batch_id`` starts with, up to its record id:
    built once per batch, not per version."""
    return b'{"kind":"edge_version","batch":' + orjson.dumps(batch_id) + b',"record_id":'


def version_record_id(version: EdgeVersion) -> str:
    """An ``edge_version`` record's id: a version's open and closed states are two records."""
    return f"{version.tenant}/{version.edge_id}@{'closed' if version.tx_to is not None else 'open'}"


def version_record(version: EdgeVersion, appended: bool, closed: bool, encoded: bytes, head: bytes,
                   record_id: str | None = None) -> bytes:
    """The ``edge_version`` record of a version whose stored encoding is ``encoded``: the bytes
    ``orjson.dumps`` gives for {kind, batch, record_id, appended, closed, layout, version}, without
    decoding or encoding the version again. Speed: re-shaping each version as the contract's edge
    (five instants formatted as text, a nested object) was a large share of a worker's main-thread
    time per event; the log's readers decode the stored array straight back to the same ``EdgeVersion``.
    ``head``: ``version_head`` of the record's batch; ``record_id``: ``version_record_id``, when the
    caller has it already."""
    if record_id is None:
        record_id = version_record_id(version)
    return b"".join((head, orjson.dumps(record_id), _VERSION_FLAGS[appended, closed], encoded, b"}"))


CORRECTION_IDS_PER_RECORD = 100_000
"""Edge ids one ``edge-corrections`` record names at most (about 2 MB). Revoking a whole source
closes every version it asserted, and one record naming a million ids would be more than the
producer sends, and refused again at every restart of the worker."""


FILED_FACTS_PER_RECORD = 100_000
"""At most this many entries (facts restated, joined or ended) in one ``filings`` record (a few MB),
far below a broker's limit; a batch that filed more sends several."""


def _filings_records(pending: PendingLedger) -> list[tuple[str, list[list[object]]]]:
    """The batch's filings as ``filings`` records' contents: a tenant's in one, or in several past
    ``FILED_FACTS_PER_RECORD`` (a resent snapshot of a large record files every fact it repeats)."""
    parts: list[tuple[str, list[list[object]]]] = []
    open_part: dict[str, tuple[list[list[object]], int]] = {}
    for filing in pending.filings:
        held, facts = open_part.get(filing.tenant, ([], 0))
        counted = len(filing.restated) + len(filing.joined) + len(filing.ended)
        if held and facts + counted > FILED_FACTS_PER_RECORD:
            parts.append((filing.tenant, held))
            held, facts = [], 0
        held.append(list(filing))
        open_part[filing.tenant] = (held, facts + counted)
    parts += [(tenant, held) for tenant, (held, _) in open_part.items()]
    return parts


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
        # Speed: the fields by hand; ``asdict`` deep-copies, which costs more than the rest of the record.
        record_id = f"{alias.tenant}/alias/{alias.normalised}/{alias.entity_id}"
        fields: dict[str, object] = {"tenant": alias.tenant, "normalised": alias.normalised,
                                     "entity_id": alias.entity_id, "tx_from": alias.tx_from}
        if alias.actor is not None:
            fields["actor"], fields["reason"] = alias.actor, alias.reason
        records.append(OutRecord(log, alias.tenant, orjson.dumps(
            {"kind": "alias", "batch": batch_id, "record_id": record_id, "alias": fields})))
        ids.append(record_id)
    for merge in pending.merge_rows.values():
        # The merge as it stands after the batch: a split sends it again, closed (a reader keeps the last).
        record_id = f"{merge.tenant}/merge/{merge.merge_id}/{merge.tx_to}"
        records.append(OutRecord(log, merge.tenant, orjson.dumps(
            {"kind": "merge", "batch": batch_id, "record_id": record_id, "merge": merge._asdict()})))
        ids.append(record_id)
    for tenant, filings in _filings_records(pending):
        record_id = f"{tenant}/filings/{batch_id}/{len(ids)}"
        records.append(OutRecord(log, tenant, orjson.dumps(
            {"kind": "filings", "batch": batch_id, "record_id": record_id, "tenant": tenant, "filings": filings})))
        ids.append(record_id)
    for tenant, entity_id in pending.placeholders:
        record_id = f"{tenant}/placeholder/{entity_id}"
        records.append(OutRecord(log, tenant, orjson.dumps(
            {"kind": "placeholder", "batch": batch_id, "record_id": record_id, "tenant": tenant,
             "entity_id": entity_id})))
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
    for decision in pending.decisions:
        record_id = f"{decision.tenant}/decision/{decision.review_id}"
        records.append(OutRecord(log, decision.tenant, orjson.dumps(
            {"kind": "decision", "batch": batch_id, "record_id": record_id, "decision": asdict(decision)})))
        ids.append(record_id)
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
    ``edge-versions`` say (``from``). A marker of a batch built without ``first`` (``from`` empty)
    gives -1 there: the first is not known, so any progress of the group counts as past it."""
    consumed: dict[tuple[str, int], int] = {}
    for topic, _, value, _ in records:
        if topic == Topic.EDGE_VERSIONS and is_marker(value):
            marker = orjson.loads(value)
            started = marker["from"] or [[name, partition, -1] for name, partition, _ in marker["inputs"]]
            for name, partition, offset in started:
                key = (str(name), int(partition))
                consumed[key] = min(int(offset), consumed.get(key, int(offset)))
    return consumed
