"""Debezium change events into contract ``change`` events, through a feed mapping.

A Debezium record (with or without the ``schema``/``payload`` wrapper of the JSON converter) says
what happened to one row: ``op`` ``c`` (created), ``u`` (updated), ``d`` (deleted) or ``r`` (read by
a snapshot), the row's ``before`` and ``after`` images, the ``source`` block (table and log
position) and ``ts_ms``. How each becomes an event:

- ``c``: the edges the new row states, asserted from its effective date (else its change time).
- ``u``: the difference between what ``before`` and ``after`` state: edges it no longer states are
  retracted and new ones asserted, both from the new image's effective date. Without a usable
  ``before`` (PostgreSQL sends none unless the table's replica identity is full) the update is a
  snapshot of the record: the ledger retracts what the record stated and now omits.
- ``r``: a snapshot of the record, so a re-snapshot corrects what changes were missed.
- ``d``: a snapshot of the record stating nothing, from the deletion's time: all it stated ends.

``ts_ms`` becomes ``detected_at``, the log position the source version, ``<table>/<key>`` the record.
"""

from __future__ import annotations

from typing import NamedTuple

import orjson

from processors.feeds.holding import Holding
from processors.feeds.output import EventWriter, FeedCounts, Origin, Output, digest
from processors.feeds.rules import DEBEZIUM_TIME_UNITS, InstantReader, Row, RowRefused, Unresolved, iso_of_millis
from processors.feeds.statements import Directory, Statement, TableReader, diff
from processors.vocabulary import Vocabulary
from schemas.feed_mapping import FeedMapping
from schemas.ontology import Ontology

ENVELOPE = "debezium envelope"
"""The rule a record breaks when it is not a Debezium change event at all."""


class ChangeRecord(NamedTuple):
    table: str
    op: str
    before: Row | None
    after: Row | None
    ts_ms: int
    source: dict[str, object]
    schema: object


class _Waiting(NamedTuple):
    record: ChangeRecord
    origin: Origin
    document: object


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
    return {list: "a list", str: "a string", dict: "an object"}.get(type(value), f"a {type(value).__name__}")


def schema_unit(schema: object, column: str) -> str | None:
    """The unit of a number in ``column`` by the record's schema (``io.debezium.time.MicroTimestamp``)."""
    fields = schema.get("fields") if isinstance(schema, dict) else None
    for image in fields if isinstance(fields, list) else ():
        if isinstance(image, dict) and image.get("field") == "after" and isinstance(image.get("fields"), list):
            for field in image["fields"]:
                if isinstance(field, dict) and field.get("field") == column:
                    return DEBEZIUM_TIME_UNITS.get(str(field.get("name")))
    return None


class DebeziumAdapter:
    """One source's Debezium records in, events and dead letters out, rows counted.

    ``take`` maps a record; rows referring to rows not yet seen wait (``held``) until ``take`` or
    ``learn`` (a follower reading the referenced tables) brings them; ``finish`` dead-letters what
    still waits when a finite input ends."""

    def __init__(self, mapping: FeedMapping, tenant: str, ontology: Ontology) -> None:
        self.system = mapping.system
        self.directory = Directory()
        vocabulary = Vocabulary(ontology)
        self.readers = {table: TableReader(table, rule, vocabulary, self.directory)
                        for table, rule in mapping.tables.items()}
        self.effective = {table: InstantReader(rule.effective, f"tables.{table}.effective")
                          for table, rule in mapping.tables.items() if rule.effective is not None}
        self.referenced = mapping.referenced_tables()
        self.position_fields = mapping.position
        self.writer = EventWriter(tenant, mapping.system)
        self.counts = FeedCounts()
        self.holding: Holding[_Waiting] = Holding()
        self.latest_ts_ms: int | None = None
        """The newest change time read: a heartbeat after a file says the source was alive then."""

    def take(self, raw: bytes | str, origin: Origin) -> list[Output]:
        """Map one record's JSON text."""
        self.counts.rows += 1
        out: list[Output] = []
        try:
            document = orjson.loads(raw)
        except orjson.JSONDecodeError as error:
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            self._dead(out, origin, None, ENVELOPE, f"not JSON: {error}", original=text)
            return out
        try:
            record = decode(document)
        except RowRefused as refused:
            self._dead(out, origin, None, refused.rule, refused.reason, document)
            return out
        if record is None:
            self.counts.unchanged += 1
            return out
        reader = self.readers.get(record.table)
        if reader is None:
            self._dead(out, origin, record.table, "tables", f"table {record.table!r} is not in the mapping", document)
            return out
        if self.latest_ts_ms is None or record.ts_ms > self.latest_ts_ms:
            self.latest_ts_ms = record.ts_ms
        try:
            key = reader.key(record.before if record.op == "d" else record.after)  # type: ignore[arg-type]
        except RowRefused as refused:
            self._dead(out, origin, record.table, refused.rule, refused.reason, document)
            return out
        waiting = _Waiting(record, origin, document)
        if self.holding.blocked((record.table, key)):
            self.holding.hold((record.table, key), waiting, None)
            self.counts.held += 1
        elif not self._settle(waiting, out):
            self.counts.held += 1
        self._learn(reader, record, key, origin, out)
        return out

    def learn(self, raw: bytes | str, origin: Origin) -> list[Output]:
        """A record read only for the directory (a follower of the referenced tables): what it lets
        waiting rows say."""
        out: list[Output] = []
        try:
            record = decode(orjson.loads(raw))
        except (orjson.JSONDecodeError, RowRefused):
            return out  # the adapter reading it as a row dead-letters it
        reader = self.readers.get(record.table) if record is not None else None
        if record is None or reader is None or record.table not in self.referenced:
            return out
        try:
            key = reader.key(record.before if record.op == "d" else record.after)  # type: ignore[arg-type]
        except RowRefused:
            return out
        self._learn(reader, record, key, origin, out)
        return out

    def finish(self) -> list[Output]:
        """The input ended: rows still waiting refer to rows it never gave, and are dead-lettered."""
        out: list[Output] = []
        for waiting in self.holding.drain():
            self.counts.held -= 1
            try:
                self._counted(self._change(waiting.record, waiting.origin), out)
            except Unresolved as missing:
                self._dead(out, waiting.origin, waiting.record.table, "ref",
                           f"refers to {missing.table} row {missing.key!r}, which the feed never gave: "
                           "what it is cannot be known", waiting.document)
            except RowRefused as refused:
                self._dead(out, waiting.origin, waiting.record.table, refused.rule, refused.reason, waiting.document)
        return out

    def waiting_origins(self) -> list[Origin]:
        return [waiting.origin for waiting in self.holding.items()]

    def _learn(self, reader: TableReader, record: ChangeRecord, key: str, origin: Origin, out: list[Output]) -> None:
        if record.table not in self.referenced:
            return
        image = record.after
        if image is None:
            # A deleted row keeps the entity it had, so a late reference to it still resolves; its old
            # image names it only when nothing better is known (it may hold the key alone).
            if (record.table, key) in self.directory.entries:
                return
            image = record.before
        assert image is not None
        order = (origin.partition or 0, origin.position)
        if self.directory.learn(record.table, key, reader.directory_entry(image), order):
            self._release((record.table, key), out)

    def _release(self, referenced: tuple[str, str], out: list[Output]) -> None:
        for record_key in self.holding.ready(referenced):
            while (waiting := self.holding.first(record_key)) is not None:
                try:
                    event = self._change(waiting.record, waiting.origin)
                except Unresolved as missing:
                    self.holding.wait_again(record_key, (missing.table, missing.key))
                    break
                except RowRefused as refused:
                    self.counts.held -= 1
                    self._dead(out, waiting.origin, waiting.record.table, refused.rule, refused.reason,
                               waiting.document)
                else:
                    self.counts.held -= 1
                    self._counted(event, out)
                self.holding.done(record_key)

    def _settle(self, waiting: _Waiting, out: list[Output]) -> bool:
        """Map a row now; ``False`` when it must wait for a row it refers to."""
        try:
            event = self._change(waiting.record, waiting.origin)
        except Unresolved as missing:
            reader = self.readers[waiting.record.table]
            image = waiting.record.before if waiting.record.op == "d" else waiting.record.after
            assert image is not None
            self.holding.hold((waiting.record.table, reader.key(image)), waiting, (missing.table, missing.key))
            return False
        except RowRefused as refused:
            self._dead(out, waiting.origin, waiting.record.table, refused.rule, refused.reason, waiting.document)
            return True
        self._counted(event, out)
        return True

    def _counted(self, event: dict[str, object] | None, out: list[Output]) -> None:
        if event is None:
            self.counts.unchanged += 1
        else:
            self.counts.events += 1
            out.append(("event", event))

    def _dead(self, out: list[Output], origin: Origin, table: str | None, rule: str, reason: str,
              row: object = None, original: str | None = None) -> None:
        self.counts.dead_lettered += 1
        out.append(("dead_letter", self.writer.dead_letter(origin, table, rule, reason, row, original)))

    def _change(self, record: ChangeRecord, origin: Origin) -> dict[str, object] | None:
        """The event a change makes, or ``None`` when it changes nothing."""
        reader = self.readers[record.table]
        detected_at = iso_of_millis(record.ts_ms)
        event_id = f"{self.system}-{record.table}-" + digest(record.table, record.op, record.source or record.ts_ms,
                                                              record.before, record.after)
        if record.op == "d":
            assert record.before is not None
            if not reader.edges:
                return None
            return self.writer.change(event_id, f"{record.table}/{reader.key(record.before)}",
                                      self._position(record), detected_at, [], None, [], None,
                                      snapshot_from=detected_at)
        assert record.after is not None
        after = reader.statement(record.after, self._effective(record, record.after) or detected_at)
        version = after.version or self._position(record)
        record_name = f"{record.table}/{after.key}"
        valid_from = after.effective
        before = self._before(reader, record) if record.op == "u" else None
        if record.op == "c" or before is not None:
            asserted, retracted = diff(before, after)
            if not asserted and not retracted:
                return None
            return self.writer.change(event_id, record_name, version, detected_at, asserted, valid_from,
                                      retracted, valid_from)
        if not reader.edges:
            return None
        return self.writer.change(event_id, record_name, version, detected_at, list(after.edges.values()),
                                  valid_from, [], None, snapshot_from=valid_from)

    def _before(self, reader: TableReader, record: ChangeRecord) -> Statement | None:
        """What the old image stated; ``None`` when it cannot be read (then the update is a snapshot)."""
        if record.before is None:
            return None
        try:
            before = reader.statement(record.before, None)
        except (RowRefused, Unresolved):
            return None
        return before if before.key == reader.key(record.after or {}) else None

    def _effective(self, record: ChangeRecord, row: Row) -> str | None:
        instant = self.effective.get(record.table)
        if instant is None:
            return None
        value = row.get(instant.column)
        unit = schema_unit(record.schema, instant.column) if isinstance(value, int) and record.schema else None
        return instant.read(row, unit)

    def _position(self, record: ChangeRecord) -> str | None:
        source = record.source
        parts = [str(source[name]) for name in self.position_fields if source.get(name) is not None]
        return ":".join(parts) if parts else None
