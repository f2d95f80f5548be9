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

from typing import Any, NamedTuple

import orjson

from processors.feeds.envelope import ENVELOPE, ChangeRecord, decode, parse_record, schema_unit, shown
from processors.feeds.holding import Holding
from processors.feeds.output import EventWriter, FeedCounts, Origin, Output, digest
from processors.feeds.rules import InstantReader, Mention, Row, RowRefused, Unresolved, iso_of_millis
from processors.feeds.statements import Directory, DirectoryEntry, Statement, TableReader, diff
from processors.vocabulary import Vocabulary
from schemas.feed_mapping import FeedMapping
from schemas.ontology import Ontology


class _Waiting(NamedTuple):
    record: ChangeRecord
    origin: Origin
    document: Any


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
        self._entity_read: Mention | None = None
        self._entity_read_of: Row | None = None
        """The last image whose entity the directory read, and that entity: mapping it need not read it again."""
        self.latest_ts_ms: int | None = None
        """The newest change time read: a heartbeat after a file says the source was alive then."""

    def take(self, raw: bytes | str, origin: Origin) -> list[Output]:
        """Map one record's JSON text."""
        self.counts.rows += 1
        out: list[Output] = []
        try:
            document = parse_record(raw)
        except orjson.JSONDecodeError as error:
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            self._dead(out, origin, None, ENVELOPE, f"not JSON: {error}", original=text)
            return out
        try:
            record = decode(document)
        except RowRefused as refused:
            self._dead(out, origin, None, refused.rule, refused.reason, shown(document))
            return out
        if record is None:
            self.counts.unchanged += 1
            return out
        reader = self.readers.get(record.table)
        if reader is None:
            self._dead(out, origin, record.table, "tables", f"table {record.table!r} is not in the mapping",
                       shown(document))
            return out
        if self.latest_ts_ms is None or record.ts_ms > self.latest_ts_ms:
            self.latest_ts_ms = record.ts_ms
        try:
            key = reader.key(record.before if record.op == "d" else record.after)  # type: ignore[arg-type]
        except RowRefused as refused:
            self._dead(out, origin, record.table, refused.rule, refused.reason, shown(document))
            return out
        entry = self._entry(reader, record, key)
        waiting = _Waiting(record, origin, shown(document))
        if self.holding.blocked((record.table, key)):
            self.holding.hold((record.table, key), waiting, None)
            self.counts.held += 1
        elif not self._settle(waiting, out):
            self.counts.held += 1
        if entry is not None:
            self._remember(record.table, key, entry, origin, out)
        return out

    def learn(self, raw: bytes | str, origin: Origin) -> list[Output]:
        """A record read only for the directory (a follower of the referenced tables): what it lets
        waiting rows say."""
        out: list[Output] = []
        try:
            record = decode(parse_record(raw))
        except (orjson.JSONDecodeError, RowRefused):
            return out  # the adapter reading it as a row dead-letters it
        reader = self.readers.get(record.table) if record is not None else None
        if record is None or reader is None or record.table not in self.referenced:
            return out
        try:
            key = reader.key(record.before if record.op == "d" else record.after)  # type: ignore[arg-type]
        except RowRefused:
            return out
        entry = self._entry(reader, record, key)
        if entry is not None:
            self._remember(record.table, key, entry, origin, out)
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

    def _entry(self, reader: TableReader, record: ChangeRecord, key: str) -> DirectoryEntry | None:
        """The entity a row of a referenced table names, for the directory; ``None`` for other tables."""
        if record.table not in self.referenced:
            return None
        image = record.after
        if image is None:
            # A deleted row keeps the entity it had, so a late reference to it still resolves; its old
            # image names it only when nothing better is known (it may hold the key alone).
            if (record.table, key) in self.directory.entries:
                return None
            image = record.before
        assert image is not None
        entry = reader.directory_entry(image)
        self._entity_read, self._entity_read_of = entry[0], image
        return entry

    def _remember(self, table: str, key: str, entry: DirectoryEntry, origin: Origin, out: list[Output]) -> None:
        if self.directory.learn(table, key, entry, (origin.partition or 0, origin.position)):
            self._release((table, key), out)

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
        if record.op == "d":
            assert record.before is not None
            if not reader.edges:
                return None
            detected_at = iso_of_millis(record.ts_ms)
            return self.writer.change(self._event_id(record), f"{record.table}/{reader.key(record.before)}",
                                      self._position(record), detected_at, [], None, [], None,
                                      snapshot_from=detected_at)
        after_row = record.after
        assert after_row is not None
        before_row = record.before if record.op == "u" else None
        if before_row is not None and reader.states_the_same(before_row, after_row):
            return None  # Speed: most updates touch columns no rule reads; nothing to map
        detected_at = iso_of_millis(record.ts_ms)
        after = reader.statement(after_row, self._effective(record, after_row) or detected_at,
                                 self._entity_read if self._entity_read_of is after_row else None)
        before = self._before(reader, before_row, after.key) if before_row is not None else None
        if record.op == "c" or before is not None:
            asserted, retracted = diff(before, after)
            if not asserted and not retracted:
                return None
            return self.writer.change(self._event_id(record), f"{record.table}/{after.key}",
                                      after.version or self._position(record), detected_at, asserted,
                                      after.effective, retracted, after.effective)
        if not reader.edges:
            return None
        return self.writer.change(self._event_id(record), f"{record.table}/{after.key}",
                                  after.version or self._position(record), detected_at,
                                  list(after.edges.values()), after.effective, [], None,
                                  snapshot_from=after.effective)

    def _event_id(self, record: ChangeRecord) -> str:
        return f"{self.system}-{record.table}-" + digest(record.table, record.op, record.source or record.ts_ms,
                                                         record.before, record.after)

    @staticmethod
    def _before(reader: TableReader, before_row: Row, key: str) -> Statement | None:
        """What the old image stated; ``None`` when it cannot be read (then the update is a snapshot)."""
        try:
            before = reader.statement(before_row, None)
        except (RowRefused, Unresolved):
            return None
        return before if before.key == key else None

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
