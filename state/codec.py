"""Value encodings for stored records: compact JSON arrays in a fixed field order."""

from __future__ import annotations

from sys import intern
from typing import Final

import orjson

from processors.model import (
    Correction,
    DeadLetter,
    Decision,
    EdgeVersion,
    Entity,
    Filing,
    Heartbeat,
    Merge,
    ReviewItem,
    SourceActivity,
    Trace,
)

_INTERNED_FIELDS: Final = tuple(EdgeVersion._fields.index(name)
                                for name in ("tenant", "src", "rel", "dst", "authority"))
"""Where in a stored version the names are that key the ledger's caches or are compared there."""


def encode_version(v: EdgeVersion) -> bytes:
    """A JSON array in the field order of ``EdgeVersion`` (a NamedTuple, so ``list(v)`` is that order).
    Compiled, ``list(v)`` is the cheaper copy: ``v[:]`` took 236 against 172 ns with ``dumps``."""
    return orjson.dumps(list(v))


def decode_version(data: bytes) -> EdgeVersion:
    return version_from_fields(orjson.loads(data))


def version_from_fields(fields: list) -> EdgeVersion:
    """The version ``encode_version`` wrote, from its decoded array (a stored row, or the ``version``
    of an ``edge-versions`` record). Takes the list over: ``supersedes`` becomes a tuple in place."""
    fields[15] = tuple(fields[15])  # supersedes
    # Speed: every version a query reads is decoded here, and the stored array is already in field
    # order; building the tuple directly skips the NamedTuple's argument handling (0.53 against 0.74 µs).
    return tuple.__new__(EdgeVersion, fields)


def decode_interned_version(data: bytes) -> EdgeVersion:
    """``decode_version`` for a version the ledger keeps in its caches while it writes: the names
    (see ``_INTERNED_FIELDS``) as the one interned string of each, as the processor's own are (see
    ``LedgerProcessor._apply_change``). Speed: about 0.3 µs more a version, so reads that only
    answer a query decode with ``decode_version``."""
    fields = orjson.loads(data)
    for index in _INTERNED_FIELDS:
        fields[index] = intern(fields[index])
    return version_from_fields(fields)


def encode_entity(e: Entity) -> bytes:
    return orjson.dumps([e.tenant, e.entity_id, e.type, e.name, e.first_tx])


def decode_entity(data: bytes) -> Entity:
    f = orjson.loads(data)
    return Entity(f[0], f[1], f[2], f[3], f[4])


def encode_record(record: ReviewItem | DeadLetter | Heartbeat | Trace | SourceActivity) -> bytes:
    return orjson.dumps(record)


def encode_corrections(records: list[Correction]) -> bytes:
    """JSON objects, one per correction, its fields in order (as when ``Correction`` was a dataclass)."""
    return orjson.dumps([
        {"correction_id": c.correction_id, "tenant": c.tenant, "event_id": c.event_id, "tx_at": c.tx_at,
         "cause": c.cause, "old_edge_ids": c.old_edge_ids, "new_edge_ids": c.new_edge_ids}
        for c in records
    ])


def decode_corrections(data: bytes) -> list[Correction]:
    """A batch's corrections, as ``encode_corrections`` wrote them."""
    return [_correction(f) for f in orjson.loads(data)]


def _correction(f: dict) -> Correction:
    f["old_edge_ids"] = tuple(f["old_edge_ids"])
    f["new_edge_ids"] = tuple(f["new_edge_ids"])
    return Correction(**f)


def encode_changes(changes: list[tuple[int, str, str]]) -> bytes:
    """A batch's (tx, ``a``/``c``, edge_id) entries for one tenant, in that order."""
    return orjson.dumps(changes)


def decode_changes(data: bytes) -> list[list]:
    """The entries ``encode_changes`` wrote, each a [tx, ``a``/``c``, edge_id] list."""
    return orjson.loads(data)


def decode_review(data: bytes) -> ReviewItem:
    return ReviewItem(**orjson.loads(data))


def encode_decision(decision: Decision) -> bytes:
    return orjson.dumps(decision)


def decode_decision(data: bytes) -> Decision:
    fields = orjson.loads(data)
    fields["candidates"] = tuple(fields["candidates"])
    return Decision(**fields)


def decode_dead_letter(data: bytes) -> DeadLetter:
    return DeadLetter(**orjson.loads(data))


def decode_heartbeat(data: bytes) -> Heartbeat:
    return Heartbeat(**orjson.loads(data))


def decode_activity(data: bytes) -> SourceActivity:
    return SourceActivity(**orjson.loads(data))


def encode_activity_entries(entries: list[list[int | None]]) -> bytes:
    """A ``P`` row: a source's [tx, last_change_detected_at, last_change_tx, last_heartbeat_detected_at,
    last_heartbeat_tx] after each event applied from it, oldest first."""
    return orjson.dumps(entries)


def activity_entry_at(data: bytes, known_at: int) -> list | None:
    """Of a ``P`` row's entries, the newest recorded at or before ``known_at``; None if none was."""
    entries: list[list] = orjson.loads(data)
    index = len(entries) - 1
    while index >= 0:  # newest last (compiled, mypyc could not build ``reversed`` over decoded JSON)
        if entries[index][0] <= known_at:
            return entries[index]
        index -= 1
    return None


def decode_trace(data: bytes) -> Trace:
    f = orjson.loads(data)
    f["edge_ids"] = tuple(f["edge_ids"]) if f["edge_ids"] is not None else None
    return Trace(**f)


def encode_merge(merge: Merge) -> bytes:
    """A JSON array in the field order of ``Merge``."""
    return orjson.dumps(list(merge))


def decode_merge(data: bytes) -> Merge:
    return Merge(*orjson.loads(data))


def encode_filing(filing: Filing) -> bytes:
    """An ``F`` row's value: what its key (tenant, system, record, tx) does not say."""
    return orjson.dumps((filing.version, filing.event_id, filing.restated, filing.revoked, filing.joined,
                         filing.ended))


def decode_filing(tenant: str, system: str, record: str, tx: int, data: bytes) -> Filing:
    return filing_of([tenant, system, record, tx, *orjson.loads(data)])


def filing_of(fields: list) -> Filing:
    """A ``Filing`` from its fields in order, as JSON gives them back (lists for tuples)."""
    tenant, system, record, tx, version, event_id, restated, revoked, joined, ended = fields
    return Filing(tenant, system, record, tx, version, event_id,
                  tuple((lineage, valid_from, valid_to) for lineage, valid_from, valid_to in restated), revoked,
                  tuple((lineage, evidence) for lineage, evidence in joined),
                  tuple((lineage, stopped_at) for lineage, stopped_at in ended))


def encode_alias(tx: int, entity_id: str, normalised: str) -> bytes:
    """The value of an ``N`` or ``S`` row: what a lookup needs from it, in the value, so that reading a
    neighbourhood decodes no key. A normalised name has no NUL (``identity.normalise_name``); an entity
    id may, from a source's id, so ``decode_alias`` splits the name off the end."""
    return b"%d\x00%s\x00%s" % (tx, entity_id.encode(), normalised.encode())


def encode_alias_audit(actor: str, reason: str) -> bytes:
    """The value of a ``C`` row: who recorded an alias by command, and why."""
    return orjson.dumps([actor, reason])


def decode_alias_audit(data: bytes) -> tuple[str, str]:
    actor, reason = orjson.loads(data)
    return actor, reason


def decode_alias(data: bytes) -> tuple[int, str, str]:
    """(tx, entity id, normalised name) of an ``encode_alias`` value."""
    tx, rest = data.split(b"\x00", 1)
    entity_id, normalised = rest.rsplit(b"\x00", 1)
    return int(tx), entity_id.decode(), normalised.decode()
