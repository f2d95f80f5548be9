"""`edgeledger adapt` on the sample feeds in tests/data/feeds, piped into `edgeledger load -`, checked
through the ledger's own reads: the late-effective ownership transfer, the deleted relationship and
the manager change land as the two clocks say; an export fed twice adds nothing; bad rows are
dead-lettered with their reasons while the rest flows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from streams.cli.main import app

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "feeds"
CMDB = str(ROOT / "deploy" / "feeds" / "servicenow-cmdb.yaml")
HR = str(ROOT / "deploy" / "feeds" / "hr-directory.yaml")


def invoke(*args: str, stdin: str | None = None) -> Any:
    done = CliRunner().invoke(app, list(args), input=stdin)
    assert done.exit_code == 0, f"{done.output}\n{done.stderr}\n{done.exception!r}"
    return done


def adapt(*args: str) -> tuple[str, dict[str, Any]]:
    """The events `adapt` writes, and its count summary (the last line on standard error)."""
    done = invoke("adapt", *args)
    return done.stdout, json.loads(done.stderr.strip().splitlines()[-1])


def as_history(events: str) -> str:
    """The events, each after a ``clock`` event at its ``detected_at``: loaded with the simulated clock,
    the ledger learns each change when the source saw it, so both clocks can be read as the story tells."""
    lines = []
    for line in events.splitlines():
        lines += [json.dumps({"kind": "clock", "now": json.loads(line)["detected_at"]}), line]
    return "\n".join(lines) + "\n"


def load(state: Path, events: str) -> dict[str, Any]:
    summary = json.loads(invoke("load", "-", "--state", str(state), "--simulated-clock", "--quiet",
                                stdin=as_history(events)).stdout)
    assert summary["balanced"] and summary["dead_lettered"] == 0, summary
    return summary


def answers(state: Path, query: str, entity: str, valid_at: str, known_at: str = "2100-01-01",
            *options: str) -> set[str]:
    result = json.loads(invoke("query", query, "--state", str(state), "--tenant", "acme", "--entity", entity,
                               "--valid-at", valid_at, "--known-at", known_at, "--json", *options).stdout)
    return {item["entity"] for item in result["results"]}


@pytest.fixture(scope="module")
def cmdb_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    events, summary = adapt("debezium", "--mapping", CMDB, "--tenant", "acme", str(DATA / "cmdb-debezium.jsonl"),
                            str(DATA / "cmdb-debezium-schema.jsonl"))
    assert summary == {"rows": 18, "events": 13, "unchanged": 5, "dead_lettered": 0, "held": 0, "heartbeats": 2,
                       "balanced": True}
    state = tmp_path_factory.mktemp("cmdb") / "state"
    load(state, events)
    return state


def test_a_late_ownership_transfer_answers_as_the_two_clocks_say(cmdb_state: Path) -> None:
    connector = "settlement connector"  # the CI's name, resolved through the alias the adapter gave it
    assert answers(cmdb_state, "owners-of", connector, "2026-04-22", known_at="2026-04-22") == {"Team:hr:T-ANA"}
    assert answers(cmdb_state, "owners-of", connector, "2026-04-22") == {"Team:hr:T-PLAT"}
    assert answers(cmdb_state, "owners-of", connector, "2026-03-15") == {"Team:hr:T-ANA"}


def test_a_deleted_link_row_ends_the_dependency_when_it_was_deleted(cmdb_state: Path) -> None:
    assert answers(cmdb_state, "dependents-of", "Service:cmdb:CI0042", "2026-05-09") == {"Service:cmdb:CI0101"}
    assert answers(cmdb_state, "dependents-of", "Service:cmdb:CI0042", "2026-05-11") == set()
    history = json.loads(invoke("history", "--state", str(cmdb_state), "--tenant", "acme", "--entity",
                                "Service:cmdb:CI0101", "--rel", "depends_on", "--json").stdout)
    believed = [v for v in history["versions"] if v["tx_to"] is None]
    assert [(v["valid_from"], v["valid_to"]) for v in believed] == [("2026-03-01T08:00:00Z", "2026-05-10T12:00:00Z")]


def test_links_types_and_groups_resolve_through_the_rows_they_name(cmdb_state: Path) -> None:
    assert answers(cmdb_state, "traverse", "Application:cmdb:CI0077", "2026-03-10", "2100-01-01",
                   "--edges", "runs_on:out") == {"Host:cmdb:HOST01"}
    assert answers(cmdb_state, "traverse", "Service:cmdb:CI0042", "2026-03-10", "2100-01-01",
                   "--edges", "depends_on:out") == {"Application:cmdb:CI0077"}
    assert answers(cmdb_state, "owners-of", "ledger app", "2026-03-10") == {"Team:~ops guild"}
    # the schema-wrapped file: an epoch-millisecond effective date, and the rename it carried
    assert answers(cmdb_state, "owners-of", "Ledger Application", "2026-05-20") == {"Team:hr:T-PLAT"}
    assert answers(cmdb_state, "owners-of", "Ledger Application", "2026-05-19") == {"Team:~ops guild"}


def test_the_same_debezium_files_loaded_again_add_nothing(cmdb_state: Path) -> None:
    events, _ = adapt("debezium", "--mapping", CMDB, "--tenant", "acme", str(DATA / "cmdb-debezium.jsonl"),
                      str(DATA / "cmdb-debezium-schema.jsonl"))

    again = load(cmdb_state, events)

    assert again["versions_appended"] == again["versions_closed"] == 0
    assert again["duplicates"] == 15  # every change and heartbeat: same ids


@pytest.fixture(scope="module")
def hr_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    first, _ = adapt("csv", "--mapping", HR, "--tenant", "acme", "--exported-at", "2026-04-01T06:00:00Z",
                     str(DATA / "hr-2026-04-01.csv"))
    second, summary = adapt("csv", "--mapping", HR, "--tenant", "acme", "--exported-at", "2026-05-01T06:00:00Z",
                            "--previous", str(DATA / "hr-2026-04-01.csv"), str(DATA / "hr-2026-05-01.csv"))
    assert summary == {"rows": 5, "events": 4, "unchanged": 1, "dead_lettered": 0, "held": 0, "heartbeats": 1,
                       "balanced": True}
    state = tmp_path_factory.mktemp("hr") / "state"
    load(state, first + second)
    return state


def reports_to(state: Path, person: str, valid_at: str, known_at: str = "2100-01-01") -> set[str]:
    return answers(state, "traverse", person, valid_at, known_at, "--edges", "reports_to:out", "--max-depth", "1")


def test_a_manager_change_is_a_new_reports_to_from_its_effective_date(hr_state: Path) -> None:
    edsger = "Person:hr:E4"
    assert reports_to(hr_state, edsger, "2026-04-10") == {"Person:hr:E3"}
    assert reports_to(hr_state, edsger, "2026-04-20") == {"Person:hr:E2"}
    assert reports_to(hr_state, edsger, "2026-04-20", known_at="2026-04-30") == {"Person:hr:E3"}


def test_a_person_who_left_the_export_has_their_edges_end_at_the_export(hr_state: Path) -> None:
    history = json.loads(invoke("history", "--state", str(hr_state), "--tenant", "acme", "--entity",
                                "alan@acme.test", "--json").stdout)
    believed = {(v["rel"], v["valid_to"]) for v in history["versions"]
                if v["tx_to"] is None and v["src"] == "Person:hr:E3"}
    assert believed == {("member_of", "2026-05-01T06:00:00Z"), ("reports_to", "2026-05-01T06:00:00Z")}


def test_the_same_export_twice_adds_nothing(hr_state: Path) -> None:
    diffed, summary = adapt("csv", "--mapping", HR, "--tenant", "acme", "--exported-at", "2026-05-02T06:00:00Z",
                            "--previous", str(DATA / "hr-2026-05-01.csv"), str(DATA / "hr-2026-05-01.csv"))
    assert summary["events"] == 0 and [json.loads(line)["kind"] for line in diffed.splitlines()] == ["heartbeat"]

    whole, _ = adapt("csv", "--mapping", HR, "--tenant", "acme", "--exported-at", "2026-05-02T06:00:00Z",
                     str(DATA / "hr-2026-05-01.csv"))
    again = load(hr_state, whole)
    assert again["versions_appended"] == again["versions_closed"] == again["corrections"] == 0


def test_bad_rows_are_dead_lettered_with_their_reasons_and_the_rest_flows(tmp_path: Path) -> None:
    letters = tmp_path / "dead.jsonl"
    events, summary = adapt("debezium", "--mapping", CMDB, "--tenant", "acme", "--dead-letters", str(letters),
                            str(DATA / "cmdb-malformed.jsonl"))
    found = [json.loads(line) for line in letters.read_text().splitlines()]
    assert [(letter["input"]["line"], letter["rule"]) for letter in found] == [
        (2, "debezium envelope"), (3, "debezium envelope"), (4, "tables.cmdb_ci.key"),
        (5, "tables.cmdb_ci.effective"), (7, "ref")]
    assert all(letter["reason"] for letter in found)
    assert summary == {"rows": 8, "events": 2, "unchanged": 1, "dead_lettered": 5, "held": 0, "heartbeats": 1,
                       "balanced": True}
    assert [json.loads(line)["source"]["record"] for line in events.splitlines()[:2]] == \
        ["cmdb_ci/GOOD1", "cmdb_ci/GOOD2"]

    hr_letters = tmp_path / "hr-dead.jsonl"
    _, hr_summary = adapt("csv", "--mapping", HR, "--tenant", "acme", "--exported-at", "2026-05-01",
                          "--dead-letters", str(hr_letters), "--previous", str(DATA / "hr-2026-04-01.csv"),
                          str(DATA / "hr-malformed.csv"))
    reasons = [json.loads(line)["reason"] for line in hr_letters.read_text().splitlines()]
    assert len(reasons) == 4 and hr_summary["dead_lettered"] == 4 and hr_summary["balanced"]
    assert any("is not an instant" in reason for reason in reasons)


@pytest.mark.parametrize(("args", "says"), [
    (["debezium", "--mapping", CMDB, "--tenant", "no tenant"], "a tenant is 1 to 128"),
    (["debezium", "--mapping", CMDB, "--tenant", "acme"], "give the Debezium files"),
    (["debezium", "--mapping", CMDB, "--tenant", "acme", "--bootstrap", "b:9092"], "at least one --topic"),
    (["debezium", "--mapping", CMDB, "--tenant", "acme", "--bootstrap", "b:9092", "--topic", "t", "f.jsonl"],
     "files or --bootstrap, not both"),
    (["csv", "--mapping", HR, "--tenant", "acme", "--table", "people", str(DATA / "hr-2026-04-01.csv")],
     "'people' is not a table of the mapping"),
    (["csv", "--mapping", CMDB, "--tenant", "acme", str(DATA / "hr-2026-04-01.csv")], "name one"),
    (["csv", "--mapping", str(DATA / "hr-2026-04-01.csv"), "--tenant", "acme", str(DATA / "hr-2026-04-01.csv")],
     "is not a valid feed mapping"),
])
def test_adapt_refuses_what_cannot_work_in_one_line(args: list[str], says: str) -> None:
    done = CliRunner().invoke(app, ["adapt", *args])

    assert done.exit_code != 0
    assert says in done.output + str(done.exception)
