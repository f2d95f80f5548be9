"""Reading a Debezium record: its JSON (with or without the converter's schema wrapper), the change
it carries, and the unit its schema gives a number. What a change then states is
``processors.feeds.debezium``'s job."""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from processors.feeds.rules import DEBEZIUM_TIME_UNITS, Row, RowRefused

ENVELOPE = "debezium envelope"
"""The rule a record breaks when it is not a Debezium change event at all."""


class ChangeRecord(NamedTuple):
    table: str
    op: str
    before: Row | None
    after: Row | None
    ts_ms: int
    source: dict[str, Any]
    schema: Any


_PAYLOAD = b'"payload":'


def parse_record(raw: bytes | str) -> Any:
    """A record's JSON. A record of the JSON converter with schemas on (``{"schema": ..., "payload":
    ...}``) spends three quarters of its bytes on the schema, the same for every row of a table: only
    its payload is parsed here, and the schema's text is kept (``schema_unit`` reads it when a number
    needs its unit). Anything else, or a payload that does not parse alone, is parsed whole.
    ``orjson.JSONDecodeError`` for text that is not JSON."""
    if isinstance(raw, bytes) and raw.startswith(b'{"schema"'):
        at = raw.find(_PAYLOAD)
        body = raw[at + len(_PAYLOAD):].rstrip()
        if at > 0 and body.endswith(b"}"):
            try:
                payload = orjson.loads(body[:-1])
            except orjson.JSONDecodeError:
                payload = False
            if payload is None or (isinstance(payload, dict) and "op" in payload):
                return {"schema": raw[:at], "payload": payload}
    return orjson.loads(raw)


def shown(document: Any) -> Any:
    """A record as a dead letter shows it: without a schema kept as text (``parse_record``)."""
    if isinstance(document, dict) and isinstance(document.get("schema"), bytes):
        return {"payload": document["payload"]}
    return document


def decode(document: object) -> ChangeRecord | None:
    """The change a Debezium record carries; ``None`` for one that changes no row (a tombstone, a
    logical-decoding message). ``RowRefused`` for anything else."""
    if document is None:
        return None
    if not isinstance(document, dict):
        raise RowRefused(ENVELOPE, f"a record is a JSON object, not {_kind(document)}")
    schema = None
    if "payload" in document and "schema" in document:
        schema, document = document["schema"], document["payload"]
        if document is None:
            return None
        if not isinstance(document, dict):
            raise RowRefused(ENVELOPE, f"payload is {_kind(document)}, not an object")
    op = document.get("op")
    if op == "m":
        return None
    if op == "t":
        raise RowRefused(ENVELOPE, "a truncate names no rows, so it cannot say which records end: "
                                   "snapshot the table again")
    if op not in ("c", "u", "d", "r"):
        raise RowRefused(ENVELOPE, f"op {op!r} is not one of c, u, d, r")
    source = document.get("source")
    if not isinstance(source, dict) or not isinstance(source.get("table"), str) or not source["table"]:
        raise RowRefused(ENVELOPE, "no source.table: the record does not say which table it changes")
    ts_ms = document.get("ts_ms", source.get("ts_ms"))
    if not isinstance(ts_ms, int) or isinstance(ts_ms, bool):
        raise RowRefused(ENVELOPE, "no ts_ms: the record does not say when the change was seen")
    before, after = document.get("before"), document.get("after")
    for image, value in (("before", before), ("after", after)):
        if value is not None and not isinstance(value, dict):
            raise RowRefused(ENVELOPE, f"{image} is {_kind(value)}, not a row")
    if op == "d" and before is None:
        raise RowRefused(ENVELOPE, "a delete without 'before' names no row")
    if op != "d" and after is None:
        raise RowRefused(ENVELOPE, f"op {op!r} without 'after' gives no row")
    return ChangeRecord(source["table"], op, before, after, ts_ms, source, schema)


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return "an object" if isinstance(value, dict) else f"a {type(value).__name__}"


_SCHEMA_UNITS: dict[bytes, dict[str, str | None]] = {}
"""Schema text (``parse_record``) -> column -> unit: a table's records repeat one schema."""


def schema_unit(schema: object, column: str) -> str | None:
    """The unit of a number in ``column`` by the record's schema (``io.debezium.time.MicroTimestamp``),
    given parsed or as the text ``parse_record`` kept."""
    if isinstance(schema, bytes):
        units = _SCHEMA_UNITS.get(schema)
        if units is None:
            if len(_SCHEMA_UNITS) >= 256:  # a bound against a feed whose schemas keep changing
                _SCHEMA_UNITS.clear()
            units = _SCHEMA_UNITS[schema] = {}
        if column not in units:
            try:
                parsed = orjson.loads(schema.rstrip().removesuffix(b",") + b"}").get("schema")
            except orjson.JSONDecodeError:
                parsed = None
            units[column] = _unit_in(parsed, column)
        return units[column]
    return _unit_in(schema, column)


def _unit_in(schema: object, column: str) -> str | None:
    fields = schema.get("fields") if isinstance(schema, dict) else None
    for image in fields if isinstance(fields, list) else ():
        if isinstance(image, dict) and image.get("field") == "after" and isinstance(image.get("fields"), list):
            for field in image["fields"]:
                if isinstance(field, dict) and field.get("field") == column:
                    return DEBEZIUM_TIME_UNITS.get(str(field.get("name")))
    return None
