"""A feed mapping's rules made into plain objects that read one row each: templates, value maps,
instants, entity mentions.

``schemas.feed_mapping`` is the file's model; this is the reading, done once per row and column,
so it avoids the model's attribute hooks and caches what repeats (type and date values recur in
every feed). A rule that cannot read a row raises ``RowRefused`` naming itself and the reason.
"""

from __future__ import annotations

import fnmatch
import string
from collections.abc import Mapping
from datetime import UTC, date, datetime
from functools import lru_cache
from zoneinfo import ZoneInfo

from schemas.bounds import MAX_ALIASES, MAX_NAME
from schemas.feed_mapping import DateRule, EntityRule, ValueMap
from schemas.times import format_micros, to_micros

Row = Mapping[str, object]
"""A row as its feed gives it: column -> value (Debezium: JSON values; CSV: text)."""
Mention = dict[str, object]
"""An entity mention as the event contract writes it: ``type`` and ``id`` and/or ``name``, ``aliases``."""


class RowRefused(Exception):
    """A row the mapping cannot turn into facts: dead-lettered with ``rule`` (where in the mapping) and
    the reason."""

    def __init__(self, rule: str, reason: str) -> None:
        super().__init__(reason)
        self.rule = rule
        self.reason = reason


class Unresolved(Exception):
    """A row refers to a row of ``table`` not seen yet: it waits for it (``processors.feeds.directory``)."""

    def __init__(self, table: str, key: str) -> None:
        super().__init__(f"{table} row {key!r} not seen yet")
        self.table = table
        self.key = key


def text_of(row: Row, column: str, rule: str) -> str | None:
    """A column's value as text, ``None`` when absent or blank; a JSON object or list is refused."""
    value = row.get(column)
    if value.__class__ is str:  # Speed: nearly every value is text; this test is the cheapest there is
        return value.strip() or None  # type: ignore[union-attr]
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, bool):  # before int: a bool is an int
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise RowRefused(rule, f"column {column!r} holds a JSON {type(value).__name__}, not a value")


class Template:
    """``"cmdb:{sys_id}"`` over a row: the text, or ``None`` when a column it names is blank."""

    def __init__(self, template: str, rule: str) -> None:
        self.rule = rule
        self.parts: list[tuple[str, str | None]] = [
            (literal, column) for literal, column, _, _ in string.Formatter().parse(template)]
        single = len(self.parts) == 1 and self.parts[0][1] is not None
        self._prefix, self._column = (self.parts[0][0], self.parts[0][1]) if single else ("", None)

    def render(self, row: Row) -> str | None:
        if self._column is not None:  # Speed: nearly every template is a prefix and one column
            value = text_of(row, self._column, self.rule)
            return None if value is None else self._prefix + value
        pieces = []
        for literal, column in self.parts:
            pieces.append(literal)
            if column is not None:
                value = text_of(row, column, self.rule)
                if value is None:
                    return None
                pieces.append(value)
        return "".join(pieces)


class ValueLookup:
    """A map from column values to names: exact keys first, then ``*`` patterns in order, then the default."""

    def __init__(self, mapping: Mapping[str, object], default: object | None) -> None:
        self.exact = {key: value for key, value in mapping.items() if "*" not in key}
        self.patterns = [(key, value) for key, value in mapping.items() if "*" in key]
        self.default = default
        self._matched: dict[str, object | None] = {}

    def get(self, value: str) -> object | None:
        found = self.exact.get(value)
        if found is not None:
            return found
        if value in self._matched:
            return self._matched[value]
        found = next((name for pattern, name in self.patterns if fnmatch.fnmatchcase(value, pattern)), self.default)
        if len(self._matched) < 4096:  # a feed has few distinct classes; a bound against one that does not
            self._matched[value] = found
        return found


def bounded_name(value: str, rule: str, what: str) -> str:
    if len(value) > MAX_NAME:
        raise RowRefused(rule, f"{what} is {len(value):,} characters; the contract takes at most {MAX_NAME:,}")
    return value


class EntityReader:
    """The mention a row makes of an entity, by an ``EntityRule``; ``None`` when the row names none."""

    def __init__(self, entity: EntityRule, rule: str) -> None:
        self.rule = rule
        self.fixed_type = entity.type if isinstance(entity.type, str) else None
        self.type_map: ValueMap | None = entity.type if isinstance(entity.type, ValueMap) else None
        self.types = ValueLookup(self.type_map.map, self.type_map.default) if self.type_map else None
        self.id = Template(entity.id, f"{rule}.id") if entity.id else None
        self.name = entity.name
        self.aliases = entity.aliases
        self.by_name = entity.missing_id == "name" or entity.id is None
        self.type_rule = f"{rule}.type"

    def mention(self, row: Row) -> Mention | None:
        entity_id = self.id.render(row) if self.id is not None else None
        name = text_of(row, self.name, self.rule) if self.name else None
        if entity_id is None and not (self.by_name and name):
            return None
        mention: Mention = {"type": self._type(row)}
        if entity_id is not None:
            mention["id"] = entity_id if len(entity_id) <= MAX_NAME else bounded_name(entity_id, self.rule, "the id")
        if name is not None:
            mention["name"] = name if len(name) <= MAX_NAME else bounded_name(name, self.rule, "the name")
        if self.aliases:
            aliases = [bounded_name(alias, self.rule, "an alias") for column in self.aliases
                       if (alias := text_of(row, column, self.rule)) is not None]
            if aliases:
                mention["aliases"] = aliases[:MAX_ALIASES]
        return mention

    def _type(self, row: Row) -> str:
        if self.fixed_type is not None:
            return self.fixed_type
        assert self.type_map is not None and self.types is not None
        value = text_of(row, self.type_map.column, self.type_rule)
        found = self.types.get(value) if value is not None else self.types.default
        if found is None:
            raise RowRefused(self.type_rule, f"{self.type_map.column} {value!r} has no entity type in the "
                                             "map, and the rule has no default")
        return str(found)


def identity(mention: Mention) -> tuple[str, str]:
    """What a mention names, whatever further names it carries: (type, id), or (type, ``~name``)."""
    entity_id = mention.get("id")
    return str(mention["type"]), str(entity_id) if entity_id is not None else "~" + str(mention["name"]).casefold()


DEBEZIUM_TIME_UNITS = {
    "io.debezium.time.Date": "days",
    "org.apache.kafka.connect.data.Date": "days",
    "io.debezium.time.Timestamp": "ms",
    "org.apache.kafka.connect.data.Timestamp": "ms",
    "io.debezium.time.MicroTimestamp": "us",
    "io.debezium.time.NanoTimestamp": "ns",
}
"""Debezium's logical types of a number that is an instant, and its unit."""
_PER_UNIT = {"days": 86_400_000_000, "s": 1_000_000, "ms": 1_000, "us": 1}


class InstantReader:
    """An instant column (``DateRule``) read as ISO-8601 UTC text (``2026-04-01T00:00:00Z``)."""

    def __init__(self, rule: DateRule, where: str) -> None:
        self.column = rule.column
        self.zone = rule.timezone
        self.unit = rule.unit
        self.rule = where

    def read(self, row: Row, unit: str | None = None) -> str | None:
        """The instant, ``None`` when the column is blank; ``unit`` overrides the rule's for a number."""
        value = row.get(self.column)
        if value is None or value == "":
            return None
        try:
            if isinstance(value, str):
                return _instant_text(value, self.zone)
            if isinstance(value, int | float) and not isinstance(value, bool):
                return iso_text(epoch_micros(value, unit or self.unit))
        except (ValueError, OverflowError) as error:
            raise RowRefused(self.rule, f"{self.column} {value!r} is not an instant: {error}") from None
        raise RowRefused(self.rule, f"{self.column} holds a JSON {type(value).__name__}, not an instant")


def epoch_micros(value: float, unit: str) -> int:
    if unit == "ns":
        return int(value) // 1000
    return int(value * _PER_UNIT[unit])


@lru_cache(maxsize=1 << 14)  # Speed: a feed's dates repeat (an export's effective dates, a day's updates)
def _instant_text(text: str, zone: str | None) -> str:
    stripped = text.strip()
    if len(stripped) == 10:
        day = date.fromisoformat(stripped)
        return iso_text(to_micros(datetime(day.year, day.month, day.day, tzinfo=UTC)))
    parsed = datetime.fromisoformat(stripped.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        if zone is None:
            raise ValueError("it has no time zone, and the rule names none (timezone: UTC)")
        parsed = parsed.replace(tzinfo=ZoneInfo(zone))
    return iso_text(to_micros(parsed))


def iso_text(micros: int) -> str:
    """An instant as ISO-8601 UTC text (``2026-04-01T00:00:00Z``)."""
    text = format_micros(micros)
    assert text is not None
    return text


def iso_of_millis(millis: int) -> str:
    """A Debezium ``ts_ms`` as ISO-8601 UTC text."""
    return iso_text(millis * 1000)
