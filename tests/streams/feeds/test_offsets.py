"""Where the streaming adapter commits: after each round, but never past a row still waiting."""

from __future__ import annotations

from pathlib import Path

import orjson
from confluent_kafka import TopicPartition

from processors.feeds.debezium import DebeziumAdapter
from processors.feeds.output import Origin
from schemas.feed_mapping import load_mapping
from schemas.ontology import default_ontology
from streams.feeds.stream import _commit

MAPPING = Path(__file__).resolve().parents[3] / "deploy" / "feeds" / "servicenow-cmdb.yaml"


class Commits:
    """What a consumer was asked to commit (the adapter's only call on it here)."""

    def __init__(self) -> None:
        self.asked: list[list[tuple[str, int, int]]] = []

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        assert not asynchronous, "a round's offsets are committed before the next round is read"
        self.asked.append([(p.topic, p.partition, p.offset) for p in offsets])


def row(table: str, after: dict) -> bytes:
    return orjson.dumps({"op": "c", "before": None, "after": after, "ts_ms": 1, "source": {"table": table}})


def test_the_offset_stops_at_the_oldest_waiting_row_and_moves_on_once_it_is_settled() -> None:
    adapter = DebeziumAdapter(load_mapping(MAPPING, default_ontology()), "acme", default_ontology())
    consumer, committed, next_offsets = Commits(), {}, {}
    link = row("cmdb_rel_ci", {"sys_id": "R1", "parent": "A", "child": "B", "type": "Depends on::Used by"})
    adapter.take(link, Origin("rel", 0, 7))  # waits for A and B
    next_offsets[("rel", 0)] = 8
    adapter.take(row("cmdb_rel_ci", {"sys_id": "R0", "parent": "", "child": "", "type": "x"}), Origin("rel", 1, 3))
    next_offsets[("rel", 1)] = 4

    _commit(consumer, adapter, next_offsets, committed)  # type: ignore[arg-type]
    assert consumer.asked == [[("rel", 0, 7), ("rel", 1, 4)]]

    for key in ("A", "B"):
        adapter.take(row("cmdb_ci", {"sys_id": key, "name": key, "sys_class_name": "cmdb_ci_service"}),
                     Origin("ci", 0, ord(key)))
        next_offsets[("ci", 0)] = ord(key) + 1
    _commit(consumer, adapter, next_offsets, committed)  # type: ignore[arg-type]
    assert sorted(consumer.asked[-1]) == [("ci", 0, 67), ("rel", 0, 8)]
    _commit(consumer, adapter, next_offsets, committed)  # type: ignore[arg-type]
    assert len(consumer.asked) == 2, "nothing moved, nothing committed"
