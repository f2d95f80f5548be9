"""Consecutive exports of one table (an HR directory as CSV) diffed into ``change`` events.

Each record (row, by its key column) is compared with the same record in the previous export, on the
columns the mapping reads only (a changed phone number changes nothing). A changed record states
the difference: what it no longer says is retracted and what it now says asserted, from its
effective date. A record that disappeared retracts everything it stated, from the new export's
time. Without a previous export, each record is sent as a snapshot of itself, so the ledger
retracts whatever that record stated before and omits now; the same export sent twice changes
nothing either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from operator import itemgetter
from typing import NamedTuple

from processors.feeds.output import EventWriter, FeedCounts, Origin, Output, digest
from processors.feeds.rules import InstantReader, RowRefused
from processors.feeds.statements import Directory, Statement, TableReader, diff
from processors.vocabulary import Vocabulary
from schemas.feed_mapping import FeedMapping
from schemas.ontology import Ontology
from schemas.times import format_micros


class Export(NamedTuple):
    """One export: its name (for dead letters), header, rows as (line, values) and when it was taken."""

    name: str
    header: tuple[str, ...]
    rows: Iterable[tuple[int, list[str]]]
    exported_at: int
    """Microseconds since the epoch: the export's change time (``detected_at``)."""


class SnapshotAdapter:
    def __init__(self, mapping: FeedMapping, table: str, tenant: str, ontology: Ontology) -> None:
        rule = mapping.tables[table]
        if mapping.referenced_tables():
            raise ValueError(f"tables.{table}: an export is one table, so a 'ref' to another table's rows "
                             "cannot be resolved; name the entity by an id template instead")
        self.table = table
        self.reader = TableReader(table, rule, Vocabulary(ontology), Directory())
        self.columns = rule.columns()
        self.key_index = self.columns.index(rule.key)
        self.effective = InstantReader(rule.effective, f"tables.{table}.effective") if rule.effective else None
        self.has_edges = bool(rule.edges)
        self.system = mapping.system
        self.writer = EventWriter(tenant, mapping.system)
        self.counts = FeedCounts()

    def missing_columns(self, header: tuple[str, ...]) -> list[str]:
        """Columns the mapping reads that an export's header lacks."""
        return [column for column in self.columns if column not in header]

    def diff(self, previous: Export | None, current: Export) -> Iterator[Output]:
        """The events and dead letters taking ``previous`` to ``current``; the rows are read once."""
        detected_at = format_micros(current.exported_at)
        assert detected_at is not None
        baseline = self._index(previous) if previous is not None else None
        project = self._projection(current.header)
        width = len(current.header)
        key_at = current.header.index(self.columns[self.key_index])
        first_line: dict[str, int] = {}
        for line, values in current.rows:
            self.counts.rows += 1
            origin = Origin(current.name, None, line)
            if len(values) != width:
                if baseline is not None and len(values) > key_at:  # its record's facts stay: nothing says they ended
                    baseline.pop(values[key_at].strip(), None)
                yield self._dead(origin, "header", f"the line has {len(values)} fields, the header {width}",
                                 {"values": values})
                continue
            projected = project(values)
            key = projected[self.key_index].strip()
            if not key:
                yield self._dead(origin, f"tables.{self.table}.key",
                                 f"{self.columns[self.key_index]} is empty: the row names no record",
                                 dict(zip(current.header, values, strict=True)))
                continue
            if key in first_line:
                yield self._dead(origin, f"tables.{self.table}.key",
                                 f"{self.columns[self.key_index]} {key!r} is also on line {first_line[key]}: "
                                 "a record appears once in an export",
                                 dict(zip(current.header, values, strict=True)))
                continue
            first_line[key] = line
            old = baseline.pop(key, None) if baseline is not None else None
            if old is not None and old == projected:
                self.counts.unchanged += 1
                continue
            try:
                event = self._changed(key, old, projected, baseline is not None, detected_at)
            except RowRefused as refused:
                yield self._dead(origin, refused.rule, refused.reason, dict(zip(current.header, values, strict=True)))
                continue
            if event is None:
                self.counts.unchanged += 1
            else:
                self.counts.events += 1
                yield "event", event
        for key, projected in (baseline or {}).items():
            self.counts.rows += 1
            event = self._disappeared(key, projected, detected_at)
            if event is None:
                self.counts.unchanged += 1
            else:
                self.counts.events += 1
                yield "event", event

    def _index(self, export: Export) -> dict[str, tuple[str, ...]]:
        """The previous export by key (its first row of a key; malformed rows were refused when it was new)."""
        project = self._projection(export.header)
        width = len(export.header)
        index: dict[str, tuple[str, ...]] = {}
        for _, values in export.rows:
            if len(values) == width:
                projected = project(values)
                index.setdefault(projected[self.key_index].strip(), projected)
        index.pop("", None)
        return index

    def _projection(self, header: tuple[str, ...]):  # type: ignore[no-untyped-def]
        """A row's values of the mapping's columns, in the mapping's order (an export may order them otherwise)."""
        missing = self.missing_columns(header)
        if missing:
            raise ValueError(f"the header lacks the columns {', '.join(missing)} that the mapping reads")
        indices = [header.index(column) for column in self.columns]
        if len(indices) == 1:
            only = indices[0]
            return lambda values: (values[only],)
        return itemgetter(*indices)

    def _statement(self, projected: tuple[str, ...], effective: str | None) -> Statement:
        return self.reader.statement(dict(zip(self.columns, projected, strict=True)), effective)

    def _changed(self, key: str, old: tuple[str, ...] | None, projected: tuple[str, ...], diffing: bool,
                 detected_at: str) -> dict[str, object] | None:
        row = dict(zip(self.columns, projected, strict=True))
        effective = (self.effective.read(row) if self.effective else None) or detected_at
        after = self.reader.statement(row, effective)
        event_id = f"{self.system}-{self.table}-" + digest(self.table, key, old, projected, detected_at)
        version = after.version or detected_at
        if not diffing:
            if not self.has_edges:
                return None
            return self.writer.change(event_id, f"{self.table}/{key}", version, detected_at,
                                      list(after.edges.values()), effective, [], None, snapshot_from=effective)
        before = self._readable(old)
        asserted, retracted = diff(before, after)
        if not asserted and not retracted:
            return None
        return self.writer.change(event_id, f"{self.table}/{key}", version, detected_at, asserted, effective,
                                  retracted, effective)

    def _disappeared(self, key: str, projected: tuple[str, ...], detected_at: str) -> dict[str, object] | None:
        before = self._readable(projected)
        if before is None or not before.edges:
            return None  # it stated nothing the ledger could hold
        event_id = f"{self.system}-{self.table}-" + digest(self.table, key, projected, None, detected_at)
        return self.writer.change(event_id, f"{self.table}/{key}", detected_at, detected_at, [], None,
                                  list(before.edges.values()), detected_at)

    def _readable(self, projected: tuple[str, ...] | None) -> Statement | None:
        """What an earlier row stated; ``None`` if it was refused then (it stated nothing)."""
        if projected is None:
            return None
        try:
            return self._statement(projected, None)
        except RowRefused:
            return None

    def _dead(self, origin: Origin, rule: str, reason: str, row: dict[str, object]) -> Output:
        self.counts.dead_lettered += 1
        return "dead_letter", self.writer.dead_letter(origin, self.table, rule, reason, row=row)
