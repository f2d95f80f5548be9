"""Value encodings for stored records: compact JSON arrays in a fixed field order."""

from __future__ import annotations

import orjson

from processors.model import (
    Correction,
    DeadLetter,
    EdgeVersion,
    Entity,
    Heartbeat,
    ReviewItem,
    SourceActivity,
    Trace,
)


def encode_version(v: EdgeVersion) -> bytes:
    return orjson.dumps(
        [v.edge_id, v.tenant, v.src, v.rel, v.dst, v.valid_from, v.valid_to, v.tx_from, v.tx_to,
         v.authority, v.source_record, v.source_version, v.evidence, v.confidence, v.origin,
         v.supersedes, v.event_id, v.detected_at, v.phrase]
    )


def decode_version(data: bytes) -> EdgeVersion:
    f = orjson.loads(data)
    return EdgeVersion(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10], f[11], f[12],
                       f[13], f[14], tuple(f[15]), f[16], f[17], f[18])


def encode_entity(e: Entity) -> bytes:
    return orjson.dumps([e.tenant, e.entity_id, e.type, e.name, e.first_tx])


def decode_entity(data: bytes) -> Entity:
    f = orjson.loads(data)
    return Entity(f[0], f[1], f[2], f[3], f[4])


def encode_record(record: Correction | ReviewItem | DeadLetter | Heartbeat | Trace | SourceActivity) -> bytes:
    return orjson.dumps(record)


def decode_correction(data: bytes) -> Correction:
    f = orjson.loads(data)
    f["old_edge_ids"] = tuple(f["old_edge_ids"])
    f["new_edge_ids"] = tuple(f["new_edge_ids"])
    return Correction(**f)


def decode_review(data: bytes) -> ReviewItem:
    return ReviewItem(**orjson.loads(data))


def decode_dead_letter(data: bytes) -> DeadLetter:
    return DeadLetter(**orjson.loads(data))


def decode_heartbeat(data: bytes) -> Heartbeat:
    return Heartbeat(**orjson.loads(data))


def decode_activity(data: bytes) -> SourceActivity:
    return SourceActivity(**orjson.loads(data))


def decode_trace(data: bytes) -> Trace:
    f = orjson.loads(data)
    f["edge_ids"] = tuple(f["edge_ids"]) if f["edge_ids"] is not None else None
    return Trace(**f)
