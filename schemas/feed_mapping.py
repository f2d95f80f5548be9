"""A feed mapping: which table or file of a source gives which entities and relationships.

One YAML file per source system (``deploy/feeds/*.yaml``). The adapters (``edgeledger adapt``) read
rows through it and write contract ``change`` events; ``processors.feeds`` applies it. A file that
does not fit is refused in one line naming the file, each failing field and the reason, before any
row is read: a mapping mistake found at row 40,000 would have dead-lettered the 39,999 before it.

Entity ids and names are written as templates over a row's columns: ``"cmdb:{sys_id}"``. A template
whose column is empty renders nothing, so an optional reference (an empty ``manager_id``) states no
edge rather than an edge to ``Person:hr:``.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Annotated, Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml  # type: ignore[import-untyped]  # no stubs; only safe_load is used
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from schemas.config_files import ConfigFileError, validation_summary
from schemas.ontology import Ontology

SELF: Final = "self"
"""An edge end that is the row's own entity."""
OTHER: Final = "other"
"""The relationship a value outside a relationship map becomes, with the source's wording as its phrase."""
DEFAULT_POSITION_FIELDS = ("lsn", "commit_lsn", "change_lsn", "event_serial_no", "scn", "file", "pos", "row", "ord")
"""Debezium ``source`` fields that say where a change sits in its database's log (PostgreSQL, SQL
Server, Oracle, MySQL, MongoDB), joined with ``:`` into the source version."""

Name = Annotated[str, Field(min_length=1, max_length=256)]


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def template_columns(template: str) -> tuple[str, ...]:
    """The columns a template names: ``"hr:{employee_id}"`` -> ``("employee_id",)``."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as error:
        raise ValueError(f"template {template!r}: {error}") from None
    columns = []
    for _, column, spec, conversion in parts:
        if column is None:
            continue
        if not column or spec or conversion:
            raise ValueError(f"template {template!r}: write each column as {{column}}, without a format")
        columns.append(column)
    return tuple(columns)


Template = Annotated[str, Field(min_length=1, max_length=1024)]


class ValueMap(_Rule):
    """A value taken from a column through a map. Keys may hold ``*`` wildcards (``cmdb_ci_service*``):
    an exact key wins, then the patterns in file order."""

    column: Name
    map: dict[str, Name]
    default: Name | None = None
    """The value for a column value the map does not name; without it such a row is dead-lettered."""


class EntityRule(_Rule):
    """An entity named by a row: its type (fixed, or from a column through a map), its identifier,
    its name and aliases."""

    type: Name | ValueMap
    id: Template | None = None
    """Template of the system-of-record identifier (the canonical id is ``Type:id``)."""
    name: Name | None = None
    """Column holding the entity's name; the ledger keeps names as aliases."""
    aliases: tuple[Name, ...] = ()
    """Columns whose values are further names of the entity (an e-mail address)."""
    missing_id: Literal["refuse", "name"] = "refuse"
    """Where ``id`` renders nothing: ``refuse`` (the row is dead-lettered, or the edge is not stated
    when this is an edge's end) or ``name`` (a mention by name alone, left to entity resolution)."""

    @field_validator("id")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        if value is not None and not template_columns(value):
            raise ValueError(f"template {value!r} names no column: write it as 'prefix:{{column}}'")
        return value

    @model_validator(mode="after")
    def _names_the_entity(self) -> EntityRule:
        if self.id is None and self.name is None:
            raise ValueError("an entity needs an 'id' template or a 'name' column")
        if self.missing_id == "name" and self.name is None:
            raise ValueError("missing_id 'name' needs a 'name' column")
        return self

    def columns(self) -> tuple[str, ...]:
        typed = (self.type.column,) if isinstance(self.type, ValueMap) else ()
        named = (self.name,) if self.name else ()
        return (*typed, *(template_columns(self.id) if self.id else ()), *named, *self.aliases)


class Reference(_Rule):
    """An edge end that is the entity of another table's row: ``column`` holds that row's key."""

    ref: Name
    column: Name


class Relationship(_Rule):
    """One map entry: the relationship, and ``reverse`` when the row's dst is the edge's src."""

    rel: Name
    reverse: bool = False


class RelationshipMap(_Rule):
    """A relationship taken from a column: a value outside the map becomes ``other`` with the
    value as its phrase (the source's own wording, kept for review)."""

    column: Name
    map: dict[str, Name | Relationship]


def _end_kind(value: object) -> str:
    """Which kind of end a value is, so a bad one is reported against that kind alone."""
    if isinstance(value, str):
        return "self"
    if isinstance(value, dict):
        return "ref" if "ref" in value else "entity"
    return "ref" if isinstance(value, Reference) else "entity"


End = Annotated[
    Annotated[Literal["self"], Tag("self")] | Annotated[EntityRule, Tag("entity")] | Annotated[Reference, Tag("ref")],
    Discriminator(_end_kind),
]


class EdgeRule(_Rule):
    rel: Name | RelationshipMap
    src: End = SELF
    dst: End
    evidence: Template | None = None
    """Template of the evidence each edge carries. Default: the table, the columns and their values."""

    def columns(self) -> tuple[str, ...]:
        used = [self.rel.column] if isinstance(self.rel, RelationshipMap) else []
        for end in (self.src, self.dst):
            if isinstance(end, EntityRule):
                used += end.columns()
            elif isinstance(end, Reference):
                used.append(end.column)
        return (*used, *(template_columns(self.evidence) if self.evidence else ()))


class DateRule(_Rule):
    """A column holding an instant: ISO-8601 text, or a number (epoch ``unit``s, unless a Debezium
    schema names the column's logical type)."""

    column: Name
    timezone: Name | None = None
    """How to read a date-time without an offset (``UTC``, ``Europe/Paris``); without it such a value
    is dead-lettered, never guessed. A date alone is midnight UTC."""
    unit: Literal["days", "s", "ms", "us", "ns"] = "ms"

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"unknown time zone {value!r}") from None
        return value


class TableRule(_Rule):
    """How one table (or CSV export) is read."""

    key: Name
    """Column identifying a row: the source record is ``<table>/<key>``."""
    entity: EntityRule | None = None
    """The entity each row is about; ``self`` in an edge, and what a ``ref`` to this table names."""
    edges: tuple[EdgeRule, ...] = ()
    effective: DateRule | None = None
    """When a row's facts began to hold; a row without it holds from its change time."""
    version: Name | None = None
    """Column holding the record's version (Debezium: the log position by default)."""

    @field_validator("effective", mode="before")
    @classmethod
    def _column_alone(cls, value: object) -> object:
        return {"column": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _self_needs_an_entity(self) -> TableRule:
        for index, edge in enumerate(self.edges):
            if SELF in (edge.src, edge.dst) and self.entity is None:
                raise ValueError(f"edges[{index}] starts or ends at 'self', but the table has no 'entity'")
        return self

    def columns(self) -> tuple[str, ...]:
        """Every column a rule reads: a CSV export missing one is refused before its first row."""
        used = [self.key, *(self.entity.columns() if self.entity else ())]
        for edge in self.edges:
            used += edge.columns()
        if self.effective:
            used.append(self.effective.column)
        if self.version:
            used.append(self.version)
        return tuple(dict.fromkeys(used))


class FeedMapping(_Rule):
    """A source's mapping: its system name and how each of its tables is read."""

    system: Name
    tables: dict[Name, TableRule] = Field(min_length=1)
    position: tuple[Name, ...] = DEFAULT_POSITION_FIELDS
    """Debezium ``source`` fields making the source version, in order (those present are used)."""

    @model_validator(mode="after")
    def _references_name_entity_tables(self) -> FeedMapping:
        for table, rule in self.tables.items():
            for index, edge in enumerate(rule.edges):
                for side in ("src", "dst"):
                    end = getattr(edge, side)
                    if not isinstance(end, Reference):
                        continue
                    target = self.tables.get(end.ref)
                    if target is None:
                        raise ValueError(f"tables.{table}.edges[{index}].{side}: ref {end.ref!r} is not a table "
                                         f"of this mapping ({', '.join(self.tables)})")
                    if target.entity is None:
                        raise ValueError(f"tables.{table}.edges[{index}].{side}: table {end.ref!r} has no "
                                         f"'entity' for a ref to name")
        return self

    def referenced_tables(self) -> frozenset[str]:
        """Tables whose rows other rows refer to: the adapter remembers their entities."""
        return frozenset(end.ref for rule in self.tables.values() for edge in rule.edges
                         for end in (edge.src, edge.dst) if isinstance(end, Reference))


def ontology_problems(mapping: FeedMapping, ontology: Ontology) -> list[str]:
    """Where a mapping names an entity type or relationship the ontology lacks (``field: reason``)."""
    problems = []
    types, rels = set(ontology.entity_types), set(ontology.relationships)

    def check_type(where: str, entity: EntityRule) -> None:
        named = [entity.type] if isinstance(entity.type, str) else [*entity.type.map.values(), entity.type.default]
        for value in named:
            if value is not None and value not in types:
                problems.append(f"{where}.type: {value!r} is not an entity type of the ontology")

    for table, rule in mapping.tables.items():
        if rule.entity:
            check_type(f"tables.{table}.entity", rule.entity)
        for index, edge in enumerate(rule.edges):
            where = f"tables.{table}.edges[{index}]"
            named_rels = [edge.rel] if isinstance(edge.rel, str) else [
                value if isinstance(value, str) else value.rel for value in edge.rel.map.values()]
            problems += [f"{where}.rel: {rel!r} is not a relationship of the ontology"
                         for rel in named_rels if rel not in rels]
            for side in ("src", "dst"):
                end = getattr(edge, side)
                if isinstance(end, EntityRule):
                    check_type(f"{where}.{side}", end)
    return problems


def load_mapping(path: Path | str, ontology: Ontology | None = None) -> FeedMapping:
    """The mapping file at ``path``, checked against ``ontology`` when given; ``ConfigFileError``
    naming the file, each failing field and the reason otherwise."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigFileError(f"{path}: cannot read the feed mapping: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ConfigFileError(f"{path} is not a valid feed mapping: not UTF-8 text") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise ConfigFileError(f"{path} is not a valid feed mapping: not YAML{at} "
                              f"({getattr(error, 'problem', None) or error})") from None
    try:
        mapping = FeedMapping.model_validate(document)
    except ValidationError as error:
        raise ConfigFileError(f"{path} is not a valid feed mapping: {validation_summary(error)}") from None
    problems = ontology_problems(mapping, ontology) if ontology is not None else []
    if problems:
        raise ConfigFileError(f"{path} is not a valid feed mapping: {'; '.join(problems)}")
    return mapping
