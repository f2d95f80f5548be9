"""HR exports diffed through the shipped mapping: changed records state their difference, vanished
records retract what they stated, an export fed twice says nothing, bad rows are dead-lettered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from processors.feeds.snapshots import Export, SnapshotAdapter
from schemas.events import validate_event
from schemas.feed_mapping import load_mapping
from schemas.ontology import default_ontology
from schemas.times import parse_micros

ROOT = Path(__file__).resolve().parents[3]
HR = load_mapping(ROOT / "deploy/feeds/hr-directory.yaml", default_ontology())
HEADER = ("employee_id", "full_name", "email", "manager_id", "team_id", "team_name", "role", "effective_date")
ADA = ["E1", "Ada Lovelace", "ada@acme.test", "", "T-PLAT", "Platform", "change-approver", "2025-01-01"]
GRACE = ["E2", "Grace Hopper", "grace@acme.test", "E1", "T-PLAT", "Platform", "", "2025-03-01"]
ALAN = ["E3", "Alan Turing", "alan@acme.test", "E1", "T-ANA", "Analytics", "", "2025-06-01"]


def export(*rows: list[str], header: tuple[str, ...] = HEADER, at: str = "2026-05-01T06:00:00Z") -> Export:
    return Export("hr.csv", header, list(enumerate(rows, 2)), parse_micros(at))


def run(previous: Export | None, current: Export) -> tuple[SnapshotAdapter, list[dict[str, Any]], list[dict[str, Any]]]:
    adapter = SnapshotAdapter(HR, "directory", "acme", default_ontology())
    events, dead = [], []
    for kind, document in adapter.diff(previous, current):
        if kind == "event":
            validate_event(orjson.loads(orjson.dumps(document)))
            events.append(document)
        else:
            dead.append(document)
    assert adapter.counts.balanced()
    return adapter, events, dead


def edges(items: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    return [(item["src"]["id"], item["rel"], item["dst"]["id"], item["valid_from"]) for item in items]


def test_a_changed_manager_is_a_new_reports_to_from_the_effective_date() -> None:
    moved = [*GRACE[:3], "E3", *GRACE[4:7], "2026-04-15"]

    adapter, [event], _ = run(export(ADA, GRACE, ALAN), export(ADA, moved, ALAN))

    assert (event["mode"], event["source"]["record"], event["detected_at"]) == \
        ("delta", "directory/E2", "2026-05-01T06:00:00Z")
    assert edges(event["assert"]) == [("hr:E2", "reports_to", "hr:E3", "2026-04-15T00:00:00Z")]
    assert edges(event["retract"]) == [("hr:E2", "reports_to", "hr:E1", "2026-04-15T00:00:00Z")]
    assert (adapter.counts.rows, adapter.counts.unchanged) == (3, 2)


def test_a_record_that_disappeared_retracts_what_it_stated_from_the_export_time() -> None:
    _, [event], _ = run(export(ADA, ALAN), export(ADA))

    assert event["source"]["record"] == "directory/E3" and event["assert"] == []
    assert edges(event["retract"]) == [("hr:E3", "member_of", "hr:T-ANA", "2026-05-01T06:00:00Z"),
                                       ("hr:E3", "reports_to", "hr:E1", "2026-05-01T06:00:00Z")]


def test_the_same_export_twice_says_nothing() -> None:
    adapter, events, dead = run(export(ADA, GRACE, ALAN), export(ADA, GRACE, ALAN))

    assert events == dead == [] and adapter.counts.unchanged == 3


def test_columns_no_rule_reads_and_their_order_change_nothing() -> None:
    reordered = ("phone", *reversed(HEADER))
    rows = [["555-01", *reversed(row)] for row in (ADA, GRACE)]

    _, events, _ = run(export(ADA, GRACE), export(*rows, header=reordered))

    assert events == []


def test_without_a_previous_export_every_record_is_a_snapshot_of_itself() -> None:
    _, events, _ = run(None, export(ADA, GRACE))

    assert [(event["mode"], event["effective_at"]) for event in events] == \
        [("snapshot", "2025-01-01T00:00:00Z"), ("snapshot", "2025-03-01T00:00:00Z")]
    assert edges(events[0]["assert"]) == [("hr:E1", "member_of", "hr:T-PLAT", "2025-01-01T00:00:00Z"),
                                          ("hr:E1", "holds_role", "role:change-approver", "2025-01-01T00:00:00Z")]
    assert events[0]["assert"][0]["src"] == {"type": "Person", "id": "hr:E1", "name": "Ada Lovelace",
                                             "aliases": ["ada@acme.test"]}


def test_a_manager_the_export_does_not_hold_is_still_a_mention_by_id() -> None:
    newcomer = ["E5", "Barbara Liskov", "b@acme.test", "E9", "T-ANA", "Analytics", "", "2026-04-25"]

    _, [event], _ = run(export(ADA), export(ADA, newcomer))

    assert ("hr:E5", "reports_to", "hr:E9", "2026-04-25T00:00:00Z") in edges(event["assert"])


@pytest.mark.parametrize(("row", "rule", "says"), [
    (["", "Nobody", "n@acme.test", "", "T-ANA", "Analytics", "", "2026-01-01"], "tables.directory.key",
     "employee_id is empty"),
    ([*ALAN[:7], "15/04/2026"], "tables.directory.effective", "'15/04/2026' is not an instant"),
    (ALAN[:5], "header", "the line has 5 fields, the header 8"),
    ([*ADA[:1], "Ada Again", *ADA[2:]], "tables.directory.key", "'E1' is also on line 2"),
])
def test_a_bad_row_is_dead_lettered_and_the_rest_flows(row: list[str], rule: str, says: str) -> None:
    adapter, events, [letter] = run(export(GRACE), export(ADA, row, GRACE))

    assert (letter["rule"], letter["input"]) == (rule, {"file": "hr.csv", "line": 3})
    assert says in letter["reason"], letter["reason"]
    assert [event["source"]["record"] for event in events] == ["directory/E1"]
    assert (adapter.counts.rows, adapter.counts.dead_lettered) == (3, 1)


def test_a_refused_row_keeps_its_record_s_facts_rather_than_retracting_them() -> None:
    malformed = ALAN[:5]
    undated = [*ALAN[:7], "someday"]

    for bad in (malformed, undated):
        _, events, [_] = run(export(ADA, ALAN), export(ADA, bad))
        assert events == []


def test_a_header_without_a_column_the_mapping_reads_is_refused_before_any_row() -> None:
    adapter = SnapshotAdapter(HR, "directory", "acme", default_ontology())

    assert adapter.missing_columns(tuple(c for c in HEADER if c != "manager_id")) == ["manager_id"]
    with pytest.raises(ValueError, match="lacks the columns manager_id"):
        list(adapter.diff(None, export(header=tuple(c for c in HEADER if c != "manager_id"))))
