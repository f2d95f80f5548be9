"""Debezium records through the shipped ServiceNow mapping: what each op states, rows that wait for
the rows they refer to, bad rows dead-lettered with rule and reason, and counts that balance."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from processors.feeds.debezium import DebeziumAdapter
from processors.feeds.envelope import decode
from processors.feeds.output import Origin
from processors.feeds.rules import RowRefused
from schemas.events import ChangeEvent, validate_event
from schemas.feed_mapping import FeedMapping, load_mapping
from schemas.ontology import default_ontology

ROOT = Path(__file__).resolve().parents[3]
CMDB = load_mapping(ROOT / "deploy/feeds/servicenow-cmdb.yaml", default_ontology())
MAY_3 = 1_777_795_200_000  # 2026-05-03T08:00:00Z in milliseconds
positions = iter(range(10**6))


def record(table: str, op: str, before: dict | None, after: dict | None, ts_ms: int = MAY_3,
           wrapped: bool = False, lsn: int | None = None) -> bytes:
    source = {"connector": "postgresql", "table": table, "lsn": lsn if lsn is not None else next(positions)}
    payload = {"before": before, "after": after, "source": source, "op": op, "ts_ms": ts_ms}
    return orjson.dumps({"schema": {"type": "struct", "fields": []}, "payload": payload} if wrapped else payload)


def ci(sys_id: str, cls: str = "cmdb_ci_service", group: str | None = "G-ANA",
       updated: str | int | None = "2026-04-01 00:00:00", name: str = "svc") -> dict[str, Any]:
    return {"sys_id": sys_id, "name": name, "sys_class_name": cls, "support_group": group, "sys_updated_on": updated}


def group(sys_id: str, team: str | None, name: str = "Analytics") -> dict[str, Any]:
    return {"sys_id": sys_id, "name": name, "u_hr_team_id": team}


def link(sys_id: str, parent: str, child: str, kind: str = "Depends on::Used by") -> dict[str, Any]:
    return {"sys_id": sys_id, "parent": parent, "child": child, "type": kind}


class Feed:
    """An adapter with the lines it took and everything it wrote."""

    def __init__(self, mapping: FeedMapping = CMDB) -> None:
        self.adapter = DebeziumAdapter(mapping, "acme", default_ontology())
        self.events: list[dict[str, Any]] = []
        self.dead: list[dict[str, Any]] = []
        self.line = 0

    def take(self, *raws: bytes) -> Feed:
        for raw in raws:
            self.line += 1
            self._keep(self.adapter.take(raw, Origin("feed.jsonl", None, self.line)))
        return self

    def finish(self) -> Feed:
        self._keep(self.adapter.finish())
        return self

    def _keep(self, outputs: list) -> None:
        for kind, document in outputs:
            if kind == "event":
                validate_event(orjson.loads(orjson.dumps(document)))  # every event fits the contract
                self.events.append(document)
            else:
                self.dead.append(document)


def edges(items: list[dict[str, Any]]) -> list[tuple[str, str, str, str | None]]:
    return [(item["src"]["id"], item["rel"], item["dst"].get("id") or item["dst"]["name"], item["valid_from"])
            for item in items]


def with_groups() -> Feed:
    return Feed().take(record("sys_user_group", "r", None, group("G-ANA", "T-ANA")),
                       record("sys_user_group", "r", None, group("G-PLAT", "T-PLAT", "Platform")))


def test_an_update_of_the_owner_column_retracts_the_old_owner_and_asserts_the_new_from_the_effective_date() -> None:
    before = ci("CI1", updated="2026-01-10 09:00:00")
    after = {**before, "support_group": "G-PLAT", "sys_updated_on": "2026-04-01 00:00:00"}

    feed = with_groups().take(record("cmdb_ci", "u", before, after, ts_ms=MAY_3, lsn=77))

    [event] = feed.events
    assert (event["mode"], event["detected_at"]) == ("delta", "2026-05-03T08:00:00Z")
    assert event["source"] == {"system": "cmdb", "record": "cmdb_ci/CI1", "version": "77"}
    assert edges(event["assert"]) == [("cmdb:CI1", "owned_by", "hr:T-PLAT", "2026-04-01T00:00:00Z")]
    assert edges(event["retract"]) == [("cmdb:CI1", "owned_by", "hr:T-ANA", "2026-04-01T00:00:00Z")]
    assert event["assert"][0]["src"] == {"type": "Service", "id": "cmdb:CI1", "name": "svc"}


def test_an_update_of_columns_no_rule_reads_changes_nothing_and_is_counted_so() -> None:
    row = ci("CI1")
    feed = with_groups().take(record("cmdb_ci", "u", row, {**row, "sys_updated_on": "2026-04-02 00:00:00"}))

    assert feed.events == [] and feed.adapter.counts.unchanged == 3  # the two group rows, and this one
    assert feed.adapter.counts.balanced()


def test_an_update_without_before_is_a_snapshot_of_the_record() -> None:
    feed = with_groups().take(record("cmdb_ci", "u", None, ci("CI1")))

    [event] = feed.events
    assert (event["mode"], event["effective_at"]) == ("snapshot", "2026-04-01T00:00:00Z")
    assert edges(event["assert"]) == [("cmdb:CI1", "owned_by", "hr:T-ANA", "2026-04-01T00:00:00Z")]


def test_a_deleted_link_row_is_a_snapshot_stating_nothing_from_the_deletion() -> None:
    feed = with_groups().take(record("cmdb_ci", "r", None, ci("A")), record("cmdb_ci", "r", None, ci("B")),
                              record("cmdb_rel_ci", "d", link("R1", "A", "B"), None, ts_ms=MAY_3))

    deleted = feed.events[-1]
    assert deleted["source"]["record"] == "cmdb_rel_ci/R1"
    assert (deleted["mode"], deleted["effective_at"], deleted["assert"]) == ("snapshot", "2026-05-03T08:00:00Z", [])


def test_a_link_that_arrives_before_the_rows_it_links_waits_for_them_and_then_resolves() -> None:
    feed = with_groups().take(record("cmdb_rel_ci", "c", None, link("R1", "APP", "HOST", "Runs on::Runs")),
                              record("cmdb_rel_ci", "d", link("R1", "APP", "HOST", "Runs on::Runs"), None))
    assert feed.events == [] and feed.adapter.counts.held == 2  # the delete waits behind its record's create

    feed.take(record("cmdb_ci", "r", None, ci("APP", "cmdb_ci_appl", group=None)))
    assert feed.events[-1]["source"]["record"] == "cmdb_ci/APP" and feed.adapter.counts.held == 2

    feed.take(record("cmdb_ci", "r", None, ci("HOST", "cmdb_ci_linux_server", group=None)))
    created, deleted = feed.events[-2:]
    assert edges(created["assert"]) == [("cmdb:APP", "runs_on", "cmdb:HOST", "2026-05-03T08:00:00Z")]
    assert created["assert"][0]["src"]["type"] == "Application" and created["assert"][0]["dst"]["type"] == "Host"
    assert deleted["mode"] == "snapshot" and deleted["source"]["record"] == "cmdb_rel_ci/R1"
    assert feed.adapter.counts.held == 0 and feed.adapter.counts.balanced()


def test_a_reference_the_feed_never_gives_is_dead_lettered_when_the_input_ends() -> None:
    feed = with_groups().take(record("cmdb_rel_ci", "c", None, link("R1", "GHOST", "GHOST2"))).finish()

    [letter] = feed.dead
    assert letter["rule"] == "ref" and "cmdb_ci row 'GHOST'" in letter["reason"]
    assert letter["row"]["after"]["sys_id"] == "R1" and letter["input"] == {"file": "feed.jsonl", "line": 3}
    assert feed.adapter.counts.dead_lettered == 1 and feed.adapter.counts.balanced()


def test_a_group_without_an_hr_team_is_a_team_named_as_the_group() -> None:
    feed = Feed().take(record("sys_user_group", "r", None, group("G-OPS", None, "Ops Guild")),
                       record("cmdb_ci", "c", None, ci("CI1", group="G-OPS")))

    assert feed.events[0]["assert"][0]["dst"] == {"type": "Team", "name": "Ops Guild"}


def test_an_unmapped_link_type_is_kept_as_other_with_the_source_wording() -> None:
    feed = with_groups().take(record("cmdb_ci", "r", None, ci("A")), record("cmdb_ci", "r", None, ci("B")),
                              record("cmdb_rel_ci", "c", None, link("R1", "A", "B", "Feeds::Fed by")))

    [item] = feed.events[-1]["assert"]
    assert (item["rel"], item["phrase"]) == ("other", "Feeds::Fed by")


@pytest.mark.parametrize(("cls", "expected"), [
    ("cmdb_ci_service", "Service"), ("cmdb_ci_service_discovered", "Service"), ("cmdb_ci_appl", "Application"),
    ("cmdb_ci_server", "Host"), ("cmdb_ci_linux_server", "Host"), ("cmdb_ci_vm_instance", "Host"),
    ("cmdb_ci_database", "Component"), (None, "Component"),
])
def test_the_entity_type_comes_from_the_class_through_the_map(cls: str | None, expected: str) -> None:
    feed = with_groups().take(record("cmdb_ci", "c", None, ci("X", cls, group=None)),
                              record("cmdb_ci", "c", None, ci("Y", "cmdb_ci_appl", group=None)),
                              record("cmdb_rel_ci", "c", None, link("R", "Y", "X", "Uses::Used by")))

    assert feed.events[-1]["assert"][0]["dst"]["type"] == expected


STRICT = FeedMapping.model_validate(yaml.safe_load("""
system: cmdb
tables:
  cmdb_ci:
    key: sys_id
    effective: sys_updated_on
    entity:
      type: {column: sys_class_name, map: {cmdb_ci_service: Service}}
      id: "cmdb:{sys_id}"
    edges: [{rel: owned_by, dst: {type: Team, id: "hr:{support_group}"}}]
"""))


@pytest.mark.parametrize(("raw", "rule", "says"), [
    (b"{not json", "debezium envelope", "not JSON"),
    (b"[1, 2]", "debezium envelope", "a JSON object, not a list"),
    (b'"text"', "debezium envelope", "not a string"),
    (record("cmdb_ci", "x", None, ci("A")), "debezium envelope", "op 'x'"),
    (record("cmdb_ci", "t", None, None), "debezium envelope", "truncate"),
    (record("cmdb_ci", "c", None, None), "debezium envelope", "without 'after'"),
    (record("nope", "c", None, {"sys_id": "A"}), "tables", "'nope' is not in the mapping"),
    (record("cmdb_ci", "c", None, ci("")), "tables.cmdb_ci.key", "sys_id is empty"),
    (record("cmdb_ci", "c", None, ci("A", "cmdb_ci_appl", updated="2026-04-01")), "tables.cmdb_ci.entity.type",
     "'cmdb_ci_appl' has no entity type in the map, and the rule has no default"),
    (record("cmdb_ci", "c", None, ci("A", updated="first of April")), "tables.cmdb_ci.effective",
     "'first of April' is not an instant"),
    (record("cmdb_ci", "c", None, ci("A", updated="2026-04-01 10:00:00")), "tables.cmdb_ci.effective",
     "has no time zone"),
    (record("cmdb_ci", "c", None, {**ci("A", updated="2026-04-01"), "support_group": {"link": "x"}}),
     "tables.cmdb_ci.edges[0].dst.id",
     "holds a JSON dict"),
])
def test_a_bad_row_is_dead_lettered_with_its_rule_and_reason_and_the_feed_flows_on(raw: bytes, rule: str,
                                                                                    says: str) -> None:
    good = record("cmdb_ci", "c", None, ci("OK", updated="2026-04-01"))

    feed = Feed(STRICT).take(good, raw, good.replace(b'"OK"', b'"OK2"'))

    [letter] = feed.dead
    assert (letter["rule"], letter["input"]) == (rule, {"file": "feed.jsonl", "line": 2})
    assert says in letter["reason"], letter["reason"]
    assert ("original" in letter) == raw.startswith(b"{not")
    assert [event["source"]["record"] for event in feed.events] == ["cmdb_ci/OK", "cmdb_ci/OK2"]
    counts = feed.adapter.counts
    assert (counts.rows, counts.events, counts.dead_lettered) == (3, 2, 1) and counts.balanced()


def test_an_edge_outside_the_ontology_is_dead_lettered_by_the_adapter() -> None:
    feed = with_groups().take(record("cmdb_ci", "r", None, ci("A", "cmdb_ci_database")),
                              record("cmdb_ci", "r", None, ci("B")),
                              record("cmdb_rel_ci", "c", None, link("R1", "A", "B", "Runs on::Runs")))

    [letter] = feed.dead
    assert letter["rule"] == "tables.cmdb_rel_ci.edges[0]"
    assert "'runs_on' cannot start at a Component" in letter["reason"]


def test_the_schema_wrapper_gives_the_same_events_and_names_the_unit_of_a_numeric_date() -> None:
    micros_row = ci("CI1", updated=1_775_001_600_000_000)  # 2026-04-01T00:00:00Z in microseconds
    schema = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [
        {"field": "sys_updated_on", "type": "int64", "name": "io.debezium.time.MicroTimestamp"}]}]}
    plain = record("cmdb_ci", "c", None, micros_row, lsn=5)
    wrapped = orjson.dumps({"schema": schema, "payload": orjson.loads(plain)})

    [from_plain] = with_groups().take(plain.replace(b"1775001600000000", b"1775001600000")).events
    [from_wrapped] = with_groups().take(wrapped).events

    assert from_wrapped["assert"][0]["valid_from"] == "2026-04-01T00:00:00Z"
    assert from_wrapped == from_plain | {"event_id": from_wrapped["event_id"]}


def test_the_same_change_read_twice_has_the_same_event_id_and_a_change_back_another() -> None:
    before, after = ci("CI1"), {**ci("CI1"), "support_group": "G-PLAT"}
    there = record("cmdb_ci", "u", before, after, lsn=10)
    back = record("cmdb_ci", "u", after, before, lsn=11)
    again = record("cmdb_ci", "u", before, after, lsn=12)

    feed = with_groups().take(there, there, back, again)

    ids = [event["event_id"] for event in feed.events]
    assert ids[0] == ids[1] and len(set(ids)) == 3


def test_tombstones_and_messages_change_nothing() -> None:
    message = orjson.dumps({"op": "m", "ts_ms": MAY_3, "source": {"table": "cmdb_ci"}})

    feed = Feed().take(b"null", orjson.dumps({"schema": {}, "payload": None}), message)

    assert feed.events == feed.dead == [] and feed.adapter.counts.unchanged == 3


def test_decode_refuses_a_delete_without_before() -> None:
    with pytest.raises(RowRefused, match="names no row"):
        decode(orjson.loads(record("cmdb_ci", "d", None, None)))


def test_a_changed_name_restates_the_edges_with_the_new_name() -> None:
    row = ci("CI1", name="gateway")
    feed = with_groups().take(record("cmdb_ci", "u", row, {**row, "name": "Payments Gateway"}))

    [event] = feed.events
    assert event["retract"] == [] and event["assert"][0]["src"]["name"] == "Payments Gateway"
    assert ChangeEvent.model_validate(event).assert_[0].evidence == "cmdb_ci CI1: support_group=G-ANA"


@pytest.mark.parametrize("layout", ["schema first, compact", "schema first, spaced", "payload first",
                                    "a schema naming a payload key"])
def test_a_wrapped_record_reads_the_same_however_its_wrapper_is_laid_out(layout: str) -> None:
    payload = orjson.loads(record("cmdb_ci", "c", None, ci("CI1", updated=1_775_001_600_000), lsn=9))
    schema: dict[str, Any] = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [
        {"field": "sys_updated_on", "type": "int64", "name": "io.debezium.time.Timestamp"}]}]}
    if layout == "a schema naming a payload key":
        schema["parameters"] = {"payload": "x"}
    line = {
        "schema first, compact": orjson.dumps({"schema": schema, "payload": payload}),
        "schema first, spaced": json.dumps({"schema": schema, "payload": payload}).encode(),
        "payload first": orjson.dumps({"payload": payload, "schema": schema}),
        "a schema naming a payload key": orjson.dumps({"schema": schema, "payload": payload}),
    }[layout]

    [event] = with_groups().take(line).events

    assert edges(event["assert"]) == [("cmdb:CI1", "owned_by", "hr:T-ANA", "2026-04-01T00:00:00Z")]
