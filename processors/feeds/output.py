"""What an adapter writes: contract events, dead letters and heartbeats, as JSON-ready dicts, and the
counts that prove every row was accounted for.

Event ids are digests of what the row said (its table, key and both images, with the feed's own
position or time), so the same change read twice, from a file or a topic, re-delivered or
re-emitted by its connector, has the same id, and the ledger applies it once
(``(tenant, event_id)``). A row that changed back and forth still gets a new id each time, because
its position or change time differs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from hashlib import blake2b
from typing import Literal, NamedTuple

import orjson

from processors.feeds.statements import Edge
from schemas.bounds import MAX_TEXT

Output = tuple[Literal["event", "dead_letter"], dict[str, object]]
"""One record an adapter writes: a contract event, or a dead letter."""


class Origin(NamedTuple):
    """Where a row was read: (file, None, line) or (topic, partition, offset)."""

    name: str
    partition: int | None
    position: int

    def as_json(self) -> dict[str, object]:
        if self.partition is None:
            return {"file": self.name, "line": self.position}
        return {"topic": self.name, "partition": self.partition, "offset": self.position}


@dataclass
class FeedCounts:
    """Rows in, and how each ended. ``balanced`` holds when none is unaccounted for."""

    rows: int = 0
    events: int = 0
    """Rows that became a change event."""
    unchanged: int = 0
    """Rows that change nothing: an update of columns no rule reads, a tombstone, a lookup row."""
    dead_lettered: int = 0
    held: int = 0
    """Rows waiting for a row they refer to (a streaming adapter's, until it arrives)."""
    heartbeats: int = 0

    def balanced(self) -> bool:
        return self.rows == self.events + self.unchanged + self.dead_lettered + self.held

    def summary(self) -> dict[str, int | bool]:
        return {**asdict(self), "balanced": self.balanced()}


def digest(*parts: object) -> str:
    """24 hex digits naming ``parts`` (JSON values)."""
    return blake2b(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS), digest_size=12).hexdigest()


class EventWriter:
    """Builds one source's events for one tenant."""

    def __init__(self, tenant: str, system: str) -> None:
        self.tenant = tenant
        self.system = system

    def change(self, event_id: str, record: str, version: str | None, detected_at: str,
               asserted: list[Edge], valid_from: str | None, retracted: list[Edge], retracted_from: str | None,
               snapshot_from: str | None = None) -> dict[str, object]:
        """A ``change`` event; with ``snapshot_from``, a snapshot of the record whose omissions end then."""
        source: dict[str, object] = {"system": self.system, "record": record}
        if version is not None:
            source["version"] = version
        event: dict[str, object] = {"kind": "change", "event_id": event_id, "tenant": self.tenant,
                                    "source": source, "detected_at": detected_at}
        if snapshot_from is not None:
            event["mode"] = "snapshot"
            event["effective_at"] = snapshot_from
        else:
            event["mode"] = "delta"
        event["assert"] = [_assertion(edge, valid_from) for edge in asserted]
        event["retract"] = [_retraction(edge, retracted_from) for edge in retracted]
        return event

    def heartbeat(self, detected_micros: int, detected_at: str) -> dict[str, object]:
        return {"kind": "heartbeat", "event_id": f"{self.system}-heartbeat-{detected_micros}", "tenant": self.tenant,
                "source": {"system": self.system}, "detected_at": detected_at}

    def dead_letter(self, origin: Origin, table: str | None, rule: str, reason: str, row: object = None,
                    original: str | None = None) -> dict[str, object]:
        """A row the adapter could not map: the row (or its text, when it is not JSON), the rule and the reason."""
        letter: dict[str, object] = {
            "kind": "adapter_dead_letter", "record_id": digest(list(origin), rule, reason), "tenant": self.tenant,
            "system": self.system, "table": table, "rule": rule, "reason": reason[:MAX_TEXT],
            "input": origin.as_json()}
        if original is not None:
            letter["original"] = original[:MAX_TEXT]
        else:
            letter["row"] = row
        return letter


def _assertion(edge: Edge, valid_from: str | None) -> dict[str, object]:
    item: dict[str, object] = {"src": edge.src, "rel": edge.rel, "dst": edge.dst, "valid_from": valid_from,
                               "evidence": edge.evidence}
    if edge.phrase is not None:
        item["phrase"] = edge.phrase
    return item


def _retraction(edge: Edge, valid_from: str | None) -> dict[str, object]:
    item: dict[str, object] = {"src": edge.src, "rel": edge.rel, "dst": edge.dst, "valid_from": valid_from}
    if edge.phrase is not None:
        item["phrase"] = edge.phrase
    return item
