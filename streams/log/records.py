"""Reading the ``edge-versions`` log back: ``decode_logged_version`` and ``Replay``, which rebuilds
ledger state from the records ``processors.outbox`` builds, one committed batch at a time (what a
worker that lost its disk, or a query replica, does). ``schemas.log_records`` describes the records.

A record of a format this edgeledger does not write (an ``edge_version`` in another ``layout``, a
record that names no ``batch``) is refused with a ``LogFormatError`` rather than misread.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import orjson

from processors.model import (
    AliasEntry,
    Correction,
    DeadLetter,
    Decision,
    EdgeVersion,
    Entity,
    Epoch,
    EventOutcome,
    Heartbeat,
    Merge,
    ReviewItem,
    Trace,
)
from processors.outbox import VERSION_LAYOUT
from processors.pending import PendingLedger
from processors.ports import LedgerReader
from schemas.times import parse_micros
from state import codec
from streams.worker.fences import epoch_of

log = logging.getLogger(__name__)


class LogFormatError(ValueError):
    """An ``edge-versions`` record in a format this edgeledger does not write."""


def decode_logged_version(record: dict) -> EdgeVersion:
    """The version an ``edge_version`` record carries: the stored encoding, an array in ``layout`` order."""
    data, layout = record["version"], record.get("layout")
    if layout != VERSION_LAYOUT:
        raise LogFormatError(f"an edge_version record in layout {layout!r}: this edgeledger reads layout "
                             f"{VERSION_LAYOUT}")
    if not isinstance(data, list) or len(data) != len(EdgeVersion._fields):
        raise LogFormatError(f"an edge_version record's version must be an array of {len(EdgeVersion._fields)} "
                             f"fields ({', '.join(EdgeVersion._fields)}), got {type(data).__name__}")
    return codec.version_from_fields(data)



@dataclass
class _Open:
    """What one log partition has sent of the batch now being read: held until its marker."""

    pending: PendingLedger
    batch: str
    """The batch its records name."""
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
    partition with a fence (a partition without one has a single writer). Within a batch a record id
    counts once.

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
            if kind == "input_reset":
                self._input_reset(record, inputs_seen, partition)
                continue
            batch = record.get("batch")
            if batch is None:
                raise LogFormatError(f"log partition {partition}: a record of kind {kind!r} "
                                     f"({record.get('record_id')}) that names no batch: this edgeledger writes none")
            open_here, writer = self._open.setdefault(partition, {}), self._writer(batch, partition)
            held = open_here.get(writer)
            if held is None or held.batch != batch:
                held = open_here[writer] = _Open(PendingLedger(self.reader), batch)
            record_id = record["record_id"]
            if record_id in held.record_ids:
                continue
            held.record_ids.add(record_id)
            _hold(held, kind, record, partition)
        return count

    def _writer(self, batch: str, partition: int) -> str | None:
        """Whose open batch a record of ``batch`` joins: on a fenced partition the worker its id names
        (``WORKER-N-OFFSET``); a partition without a fence has one writer."""
        return batch.rsplit("-", 2)[0] if partition in self.fences else None

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

    def _input_reset(self, record: dict, inputs_seen: dict[tuple[str, int], int], partition: int) -> None:
        """Forget the input offsets seen on the partitions it names: their topics were made anew, and
        the batches that follow consume them from their start (``streams.worker.positions``). A reset
        below the partition's fence is a late writer's, ignored like its batches."""
        fence, epoch = self.fences.get(partition), epoch_of(record)
        if fence is not None and (epoch is None or epoch < fence):
            log.warning("log partition %d: input reset %s of epoch %s is below the partition's fence %s: a late "
                        "writer's, ignored", partition, record.get("record_id"), epoch, fence)
            return
        for topic, number in record["inputs"]:
            if number == partition:
                inputs_seen[(topic, number)] = -1
        self._applied.pop(partition, None)

    def _close(self, marker: dict, commit, inputs_seen: dict[tuple[str, int], int], partition: int) -> None:
        batch, tenant = marker.get("batch"), marker["tenant"]
        if batch is None:
            raise LogFormatError(f"log partition {partition}: a batch marker ({marker.get('record_id')}) that names "
                                 "no batch: this edgeledger writes none")
        held = self._open.get(partition, {}).pop(self._writer(batch, partition), None)
        fence, epoch = self.fences.get(partition), epoch_of(marker)
        if fence is not None and (epoch is None or epoch < fence):
            self.fenced_off += 1
            self.fenced_off_epochs.add(epoch)
            log.warning("log partition %d: batch %s's marker %s of epoch %s is below the partition's fence %s: "
                        "its writer had lost the partition, not applied", partition, batch,
                        marker.get("record_id"), epoch, fence)
            return
        if held is not None and held.batch != batch:
            held = None  # the rest of another batch's send, cut short
        applied = self._applied.setdefault(partition, set())
        own = [(topic, offset) for topic, number, offset in marker["inputs"] if number == partition]
        fresh = not own or any(offset > inputs_seen.get((topic, partition), -1) for topic, offset in own)
        if not fresh or marker["record_id"] in applied:
            return
        if not self._whole(marker, held, partition):
            return
        pending = held.pending if held is not None else PendingLedger(self.reader)
        if tenant is not None:
            for event_id, outcome in marker["outcomes"].items():
                pending.mark_seen(tenant, event_id, outcome)
            for system, event_kind, detected_at, tx in marker.get("heard", ()):
                pending.outcomes.append(EventOutcome(tenant, event_kind, system, "applied", detected_at, tx))
        pending.tx = marker["last_tx"]
        if tenant is None:  # the batch's last marker here
            for topic, offset in own:
                inputs_seen[(topic, partition)] = max(offset, inputs_seen.get((topic, partition), -1))
            applied.clear()
            self._short.get(partition, {}).pop(batch, None)
        else:
            applied.add(marker["record_id"])
        commit(pending)

    def _whole(self, marker: dict, held: _Open | None, partition: int) -> bool:
        """Whether the batch's records on this partition up to ``marker`` are all there, as far as the
        marker can tell: it counts the records it closes (``records``; a marker whose writer could not
        tell where its records landed counts none), and one lost to a failed delivery leaves fewer. A
        part that is not whole is not applied, and neither is the batch's last marker here, so
        ``inputs_seen`` stays short of the batch: the
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


def _hold(held: _Open, kind: str | None, record: dict, partition: int) -> None:
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
    elif kind == "merge":
        pending.add_merge(Merge(**record["merge"]))
    elif kind == "placeholder":
        pending.add_placeholder(record["tenant"], record["entity_id"])
    elif kind == "filings":
        for fields in record["filings"]:
            pending.add_filing(codec.filing_of(fields))
    elif kind == "correction":
        correction = _correction(held.parts, record)
        if correction is not None:
            pending.corrections.append(correction)
    elif kind == "review":
        pending.review_items.append(ReviewItem(**record["item"]))
    elif kind == "decision":
        fields = record["decision"]
        pending.decisions.append(Decision(**{**fields, "candidates": tuple(fields["candidates"])}))
    elif kind == "dead_letter":
        pending.dead_letters.append(DeadLetter(**record["letter"]))
    elif kind == "trace":
        fields = record["trace"]
        if fields["edge_ids"] is not None:
            fields["edge_ids"] = tuple(fields["edge_ids"])
        pending.traces.append(Trace(**fields))
    elif kind == "heartbeat":
        pending.heartbeats.append(Heartbeat(**record["heartbeat"]))
    else:
        raise LogFormatError(f"log partition {partition}: a record of kind {kind!r} ({record['record_id']}): "
                             "this edgeledger writes none")


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
