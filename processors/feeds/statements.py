"""What one row states: the entity it is about and the edges it gives, read through its table's rule.

A change of a row is the difference between what its old and its new image state (``diff``), so
the adapters need no memory of the ledger: a Debezium update carries both images, and a snapshot
feed keeps the previous export. Rows that refer to other rows (``ref``) look them up in a
``Directory`` of the entities those rows named.
"""

from __future__ import annotations

from typing import NamedTuple

from processors.feeds.rules import (
    EntityReader,
    Mention,
    Row,
    RowRefused,
    Unresolved,
    ValueLookup,
    bounded_name,
    identity,
    text_of,
)
from processors.vocabulary import Vocabulary
from schemas.bounds import MAX_TEXT
from schemas.feed_mapping import OTHER, SELF, EdgeRule, EntityRule, Reference, Relationship, TableRule, template_columns

EdgeKey = tuple[str, str | None, tuple[str, str], tuple[str, str]]
"""(rel, phrase of an ``other`` edge, src identity, dst identity): the edge, whatever names its ends carry."""


class Edge(NamedTuple):
    src: Mention
    rel: str
    dst: Mention
    phrase: str | None
    evidence: str


class Statement(NamedTuple):
    """What one image of a row states."""

    key: str
    entity: Mention | None
    edges: dict[EdgeKey, Edge]
    effective: str | None
    """When its facts began to hold (ISO-8601), ``None`` when the row does not say."""
    version: str | None


DirectoryEntry = tuple[Mention | None, str | None]
"""A referenced row's entity: (its mention, or None with the reason it names none)."""


class Directory:
    """The entities of the rows other rows refer to, by (table, key), kept at their latest image.

    ``order`` is where the image sits in its feed ((partition, offset), or (0, line)): an image read
    twice, by the adapter and by a follower catching up, keeps the later one."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], tuple[tuple[int, int], DirectoryEntry]] = {}

    def learn(self, table: str, key: str, entry: DirectoryEntry, order: tuple[int, int]) -> bool:
        """Record a row's entity; whether the directory changed."""
        known = self.entries.get((table, key))
        if known is not None:
            known_order, known_entry = known
            if known_order[0] == order[0] and known_order >= order:  # an older image of the same partition
                return False
            if known_entry == entry:
                self.entries[(table, key)] = (order, entry)
                return False
        self.entries[(table, key)] = (order, entry)
        return True

    def entity(self, table: str, key: str, rule: str) -> Mention:
        known = self.entries.get((table, key))
        if known is None:
            raise Unresolved(table, key)
        mention, reason = known[1]
        if mention is None:
            raise RowRefused(rule, f"{table} row {key!r} names no entity: {reason}")
        return mention


class _End:
    """One end of an edge: the row's own entity, an entity the row names, or another row's."""

    def __init__(self, end: object, rule: str) -> None:
        self.is_self = end == SELF
        self.reader = EntityReader(end, rule) if isinstance(end, EntityRule) else None
        self.ref = end if isinstance(end, Reference) else None
        self.rule = rule

    def mention(self, row: Row, own: Mention | None, directory: Directory) -> Mention | None:
        if self.is_self:
            return own
        if self.reader is not None:
            return self.reader.mention(row)
        assert self.ref is not None
        key = text_of(row, self.ref.column, self.rule)
        return None if key is None else directory.entity(self.ref.ref, key, self.rule)


class EdgeReader:
    """The edge one ``EdgeRule`` reads from a row, or ``None`` when an end is blank (no manager)."""

    def __init__(self, table: str, edge: EdgeRule, rule: str) -> None:
        self.rule = rule
        self.table = table
        self.fixed_rel = edge.rel if isinstance(edge.rel, str) else None
        self.rel_column = None if isinstance(edge.rel, str) else edge.rel.column
        self.rels = None if isinstance(edge.rel, str) else ValueLookup(edge.rel.map, None)
        self.src = _End(edge.src, f"{rule}.src")
        self.dst = _End(edge.dst, f"{rule}.dst")
        self.evidence_columns = edge.columns() if edge.evidence is None else template_columns(edge.evidence)
        self.evidence_template = edge.evidence
        self.evidence_labels = [(column, column + "=") for column in self.evidence_columns]
        self.evidence_prefix = table + " "
        self.rel_rule = f"{rule}.rel"

    def read(self, row: Row, key: str, own: Mention | None, directory: Directory) -> Edge | None:
        rel, phrase, reverse = self._relationship(row)
        if rel is None:
            return None
        src = self.src.mention(row, own, directory)
        dst = self.dst.mention(row, own, directory)
        if src is None or dst is None:
            return None
        if reverse:
            src, dst = dst, src
        return Edge(src, rel, dst, phrase, self._evidence(row, key))

    def _relationship(self, row: Row) -> tuple[str | None, str | None, bool]:
        if self.fixed_rel is not None:
            return self.fixed_rel, None, False
        assert self.rel_column is not None and self.rels is not None
        wording = text_of(row, self.rel_column, self.rel_rule)
        if wording is None:
            return None, None, False
        mapped = self.rels.get(wording)
        if mapped is None:  # kept as the source said it, for review of what the vocabulary lacks
            return OTHER, bounded_name(wording, self.rel_rule, "the relationship's wording"), False
        if isinstance(mapped, Relationship):
            return mapped.rel, None, mapped.reverse
        return str(mapped), None, False

    def _evidence(self, row: Row, key: str) -> str:
        if self.evidence_template is not None:
            values = {column: text_of(row, column, self.rule) or "" for column in self.evidence_columns}
            return self.evidence_template.format_map(values)[:MAX_TEXT]
        rule = self.rule
        stated = [label + value for column, label in self.evidence_labels
                  if (value := text_of(row, column, rule)) is not None]
        return (self.evidence_prefix + key + ": " + ", ".join(stated))[:MAX_TEXT]


class TableReader:
    """Reads rows of one table through its ``TableRule``."""

    def __init__(self, table: str, rule: TableRule, vocabulary: Vocabulary, directory: Directory) -> None:
        self.table = table
        self.where = f"tables.{table}"
        self.key_column = rule.key
        self.entity = EntityReader(rule.entity, f"{self.where}.entity") if rule.entity else None
        self.edges = [EdgeReader(table, edge, f"{self.where}.edges[{index}]") for index, edge in enumerate(rule.edges)]
        self.version_column = rule.version
        self.vocabulary = vocabulary
        self.directory = directory
        self._violations: dict[tuple[str, str, str, bool], str | None] = {}
        unread = {rule.version, rule.effective.column if rule.effective else None}
        self.stating_columns = tuple(column for column in rule.columns() if column not in unread)
        """The columns that decide what a row states: two images equal on them state the same."""

    def key(self, row: Row) -> str:
        key = text_of(row, self.key_column, f"{self.where}.key")
        if key is None:
            raise RowRefused(f"{self.where}.key", f"{self.key_column} is empty: the row names no record")
        return key

    def statement(self, row: Row, effective: str | None, own: Mention | None = None) -> Statement:
        """What the row states; ``effective`` is its effective instant, read by the caller (its unit
        may come from the feed's schema); ``own``, its entity when the caller read it already.
        Raises ``RowRefused`` or ``Unresolved``."""
        key = self.key(row)
        if own is None:
            own = self.own_entity(row)
        edges: dict[EdgeKey, Edge] = {}
        for reader in self.edges:
            edge = reader.read(row, key, own, self.directory)
            if edge is None:
                continue
            violation = self._violation(edge)
            if violation:
                raise RowRefused(reader.rule, f"ontology: {violation}")
            edges[(edge.rel, edge.phrase, identity(edge.src), identity(edge.dst))] = edge
        version = text_of(row, self.version_column, f"{self.where}.version") if self.version_column else None
        return Statement(key, own, edges, effective, version)

    def _violation(self, edge: Edge) -> str | None:
        """The vocabulary's objection to an edge; the few type and relationship combinations of a
        feed are asked once each."""
        shape = (str(edge.src["type"]), edge.rel, str(edge.dst["type"]), edge.phrase is not None)
        if shape not in self._violations:
            self._violations[shape] = self.vocabulary.violation(shape[0], shape[1], shape[2], edge.phrase)
        return self._violations[shape]

    def states_the_same(self, before: Row, after: Row) -> bool:
        """Whether two images agree on every column that decides what a row states (an update of a
        timestamp alone states nothing new)."""
        return all(before.get(column) == after.get(column) for column in self.stating_columns)

    def own_entity(self, row: Row) -> Mention | None:
        if self.entity is None:
            return None
        mention = self.entity.mention(row)
        if mention is None:
            raise RowRefused(f"{self.entity.rule}.id", "the id's column is empty: the row names no entity")
        return mention

    def directory_entry(self, row: Row) -> DirectoryEntry:
        """The row's entity as a ``ref`` to it reads it, or why it names none."""
        try:
            return self.own_entity(row), None
        except RowRefused as refused:
            return None, f"{refused.rule}: {refused.reason}"


def diff(before: Statement | None, after: Statement | None) -> tuple[list[Edge], list[Edge]]:
    """(edges to assert, edges to retract) taking ``before`` to ``after``. An edge whose ends are now
    named otherwise (a renamed entity) is asserted again: the ledger keeps the fact as it was and
    records the new name."""
    old = before.edges if before is not None else {}
    new = after.edges if after is not None else {}
    asserted = [edge for key, edge in new.items() if old.get(key) != edge]
    retracted = [edge for key, edge in old.items() if key not in new]
    return asserted, retracted
