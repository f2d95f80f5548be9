"""`edgeledger generate`: a realistic organisation's history, as feeds and as the contract events they make.

    OUT/cmdb/day-0001.jsonl ...        Debezium records of the CMDB, a file a day
    OUT/hr/directory-2026-01-01.csv ...  the HR directory, an export a week
    OUT/events/cmdb.jsonl, hr.jsonl    what `adapt` makes of them (the shipped mappings, deploy/feeds/)
    OUT/events/policy.jsonl            the policy tables' changes and heartbeats (no feed: contract events)
    OUT/events/corrections.jsonl       revocations of a faulty import
    OUT/history.jsonl                  all of it in the order the sources saw it, each event after a
                                       `clock` event: `edgeledger load OUT/history.jsonl --simulated-clock`
    OUT/manifest.json                  the parameters and what each file holds
"""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from processors.feeds.debezium import DebeziumAdapter
from processors.feeds.output import FeedCounts
from processors.feeds.snapshots import SnapshotAdapter
from schemas.feed_mapping import load_mapping
from schemas.ontology import default_ontology
from schemas.times import format_micros, parse_micros, to_micros
from streams.cli.options import CliError, emit
from streams.feeds.files import JsonLines, Sinks, adapt_csv_files, adapt_debezium_files
from streams.feeds.organisation import HR_COLUMNS, Organisation

MAPPINGS = Path(__file__).resolve().parents[2] / "deploy" / "feeds"


def generate(
    services: Annotated[int, typer.Option(
        "--services", min=1,
        help="Services in the CMDB (with half as many applications and databases, a third as many hosts).")],
    people: Annotated[int, typer.Option("--people", min=1, help="People in the HR directory.")],
    days: Annotated[int, typer.Option("--days", min=1, help="Days of history.")],
    out: Annotated[Path, typer.Option("--out", help="Directory to write (absent or empty).")],
    seed: Annotated[int, typer.Option("--seed", help="The same seed gives the same history.")] = 7,
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant of the events.")] = "acme",
) -> None:
    """Write a realistic organisation's history: Debezium files, CSV exports and the equivalent contract events."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CliError(f"--out {out} is not an empty directory: generate writes a history of its own")
    organisation = Organisation(services, people, days, seed, tenant).simulate()
    cmdb_files = _write_cmdb(organisation, out / "cmdb")
    exports = _write_exports(organisation, out / "hr")
    events = out / "events"
    events.mkdir()
    counts = {"cmdb": _adapt_cmdb(cmdb_files, tenant, events), "hr": _adapt_hr(exports, tenant, events)}
    _write_lines(events / "policy.jsonl", organisation.policy_events)
    _write_lines(events / "corrections.jsonl", [event for _, event in organisation.corrections])
    written = _write_history(out / "history.jsonl", events, organisation)
    manifest = {
        "parameters": {"services": services, "people": people, "days": days, "seed": seed, "tenant": tenant},
        "mappings": {"cmdb": str(MAPPINGS / "servicenow-cmdb.yaml"), "hr": str(MAPPINGS / "hr-directory.yaml")},
        "cmdb_files": len(cmdb_files), "hr_exports": len(exports),
        "adapted": {source: found.summary() for source, found in counts.items()},
        "policy_events": len(organisation.policy_events), "corrections": len(organisation.corrections),
        "history_events": written}
    (out / "manifest.json").write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2) + b"\n")
    emit(manifest)


def _write_cmdb(organisation: Organisation, folder: Path) -> list[Path]:
    folder.mkdir(parents=True)
    paths = []
    for day, records in enumerate(organisation.cmdb_days, 1):
        path = folder / f"day-{day:04d}.jsonl"
        path.write_bytes(b"".join(record + b"\n" for record in records))
        paths.append(path)
    return paths


def _write_exports(organisation: Organisation, folder: Path) -> list[tuple[Path, datetime]]:
    folder.mkdir(parents=True)
    written = []
    for taken, rows in organisation.exports:
        path = folder / f"directory-{taken:%Y-%m-%d}.csv"
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(HR_COLUMNS)
            writer.writerows(rows)
        written.append((path, taken))
    return written


def _adapt_cmdb(paths: list[Path], tenant: str, events: Path) -> FeedCounts:
    adapter = DebeziumAdapter(load_mapping(MAPPINGS / "servicenow-cmdb.yaml", default_ontology()), tenant,
                              default_ontology())
    with (events / "cmdb.jsonl").open("wb") as out, (events / "cmdb-dead-letters.jsonl").open("wb") as dead:
        return adapt_debezium_files(adapter, paths, Sinks(JsonLines(out), JsonLines(dead)))


def _adapt_hr(exports: list[tuple[Path, datetime]], tenant: str, events: Path) -> FeedCounts:
    mapping = load_mapping(MAPPINGS / "hr-directory.yaml", default_ontology())
    total = FeedCounts()
    with (events / "hr.jsonl").open("wb") as out, (events / "hr-dead-letters.jsonl").open("wb") as dead:
        sinks = Sinks(JsonLines(out), JsonLines(dead))
        previous = None
        for path, taken in exports:
            adapter = SnapshotAdapter(mapping, "directory", tenant, default_ontology())
            found = adapt_csv_files(adapter, previous, path, to_micros(taken), sinks)
            for name, value in found.summary().items():
                if name != "balanced":
                    setattr(total, name, getattr(total, name) + value)
            previous = path
    return total


def _write_lines(path: Path, documents: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(document) + b"\n" for document in documents))


def _write_history(path: Path, events: Path, organisation: Organisation) -> int:
    """Every event in the order its source saw it, each after a ``clock`` event at that time. The
    revocations carry no time of their own; each goes at the time the organisation sent it."""
    timed: list[tuple[int, int, bytes]] = []
    for number, name in enumerate(("cmdb.jsonl", "hr.jsonl", "policy.jsonl")):
        for line in (events / name).read_bytes().splitlines():
            timed.append((parse_micros(orjson.loads(line)["detected_at"]), number, line))
    for when, event in organisation.corrections:
        timed.append((to_micros(when), 3, orjson.dumps(event)))
    timed.sort(key=lambda item: (item[0], item[1]))  # stable: a source's own order within an instant
    with path.open("wb") as out:
        for when, _, line in timed:
            out.write(orjson.dumps({"kind": "clock", "now": format_micros(when)}) + b"\n" + line + b"\n")
    if not timed:
        raise CliError("the organisation produced no events")
    return len(timed)
