"""`edgeledger generate`: a seeded organisation history whose feeds, adapted, are the contract events it
writes, which the ledger applies without a dead letter, and which holds what the issue lists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from streams.cli.main import app

ROOT = Path(__file__).resolve().parents[3]
SIZE = ["--services", "30", "--people", "40", "--days", "36"]


def generate(out: Path, seed: int = 5) -> dict[str, Any]:
    done = CliRunner().invoke(app, ["generate", *SIZE, "--seed", str(seed), "--out", str(out)])
    assert done.exit_code == 0, f"{done.output}\n{done.exception!r}"
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("generated") / "org"
    generate(out)
    return out


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_history_loads_with_every_event_applied(history: Path, tmp_path: Path) -> None:
    done = CliRunner().invoke(app, ["load", str(history / "history.jsonl"), "--state", str(tmp_path / "state"),
                                    "--simulated-clock", "--quiet"])
    summary = json.loads(done.stdout)
    assert summary["balanced"] and summary["dead_lettered"] == summary["queued_for_review"] == 0
    manifest = json.loads((history / "manifest.json").read_text())
    assert summary["events_read"] == 2 * manifest["history_events"]  # each after its clock event
    assert all(counts["balanced"] and counts["dead_lettered"] == 0 for counts in manifest["adapted"].values())


def test_the_feeds_adapted_again_are_the_events_it_wrote(history: Path) -> None:
    cmdb = CliRunner().invoke(app, ["adapt", "debezium", "--mapping", str(ROOT / "deploy/feeds/servicenow-cmdb.yaml"),
                                    "--tenant", "acme", *sorted(map(str, (history / "cmdb").iterdir()))])
    assert cmdb.stdout == (history / "events" / "cmdb.jsonl").read_text()
    exports = sorted((history / "hr").iterdir())
    adapted = ""
    for previous, current in zip([None, *exports], exports, strict=False):
        taken = current.stem.removeprefix("directory-") + "T08:00:00Z"
        before = ["--previous", str(previous)] if previous else []
        adapted += CliRunner().invoke(app, ["adapt", "csv", "--mapping", str(ROOT / "deploy/feeds/hr-directory.yaml"),
                                            "--tenant", "acme", "--exported-at", taken, *before, str(current)]).stdout
    assert adapted == (history / "events" / "hr.jsonl").read_text()


def test_the_same_seed_gives_the_same_history_and_another_seed_another(history: Path, tmp_path: Path) -> None:
    generate(tmp_path / "same", seed=5)
    generate(tmp_path / "other", seed=6)
    written = sorted(path.relative_to(history) for path in history.rglob("*") if path.is_file())
    assert written == sorted(path.relative_to(tmp_path / "same") for path in (tmp_path / "same").rglob("*")
                             if path.is_file())
    assert all((history / path).read_bytes() == (tmp_path / "same" / path).read_bytes() for path in written)
    assert (tmp_path / "other" / "history.jsonl").read_bytes() != (history / "history.jsonl").read_bytes()


def test_the_history_holds_what_an_organisation_does(history: Path) -> None:
    cmdb, hr = events(history / "events" / "cmdb.jsonl"), events(history / "events" / "hr.jsonl")
    changes = [event for event in cmdb + hr if event["kind"] == "change"]
    asserted = [(event, item) for event in changes for item in event["assert"]]
    rels = {item["rel"] for _, item in asserted}
    assert {"depends_on", "runs_on", "owned_by", "other", "member_of", "reports_to", "holds_role"} <= rels
    late = [item for event, item in asserted if item["rel"] == "owned_by" and event["mode"] == "delta"
            and item["valid_from"][:10] < event["detected_at"][:10]]
    assert late, "an ownership transfer recorded after it took effect"
    assert any(item["dst"].get("id") is None for _, item in asserted if item["rel"] == "owned_by"), \
        "a support group known by name alone"
    assert any(item["rel"] == "reports_to" for event in changes if event["source"]["system"] == "hr"
               for item in event["retract"]), "a manager change or a leaver"
    renamed = {item["src"]["id"]: set() for _, item in asserted}
    for _, item in asserted:
        renamed[item["src"]["id"]].add(item["src"].get("name"))
    assert any(len(names) > 1 for names in renamed.values()), "a name put right"
    assert {event["kind"] for event in events(history / "events" / "corrections.jsonl")} == {"revoke_source"}
    assert sum(event["kind"] == "heartbeat" for event in cmdb) == 36
    policy = events(history / "events" / "policy.jsonl")
    assert {item["rel"] for event in policy if event["kind"] == "change" for item in event["assert"]} == \
        {"requires", "governed_by"}


def test_generate_refuses_a_directory_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "kept.txt").write_text("mine")

    done = CliRunner().invoke(app, ["generate", *SIZE, "--out", str(tmp_path)])

    assert done.exit_code != 0 and "is not an empty directory" in str(done.exception)
    assert [path.name for path in tmp_path.iterdir()] == ["kept.txt"]
