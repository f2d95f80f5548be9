"""What the feed adapters keep up with: Debezium rows and CSV rows diffed per second of CPU, on one core.

    python -m tests.benchmarks.bench_feeds [--rows N] [--people N] [--rounds R]

Debezium: ``--rows`` change records of a ServiceNow-shaped CMDB through the shipped mapping
(``deploy/feeds/servicenow-cmdb.yaml``), read from memory as the files route reads them: a
snapshot of the groups, CIs (with the unmapped columns a real row carries) and their links, then
updates, four in five of which touch only columns no rule reads (the common CMDB update), the rest
moving a CI's support group; a few links deleted. Timed: parse, map, and serialise each event and
dead letter to its JSON line, without and with the JSON converter's schema wrapper.

CSV: two HR exports of ``--people`` rows through ``deploy/feeds/hr-directory.yaml``, the second with
2 % of the people changed (a new manager or team), 0.5 % gone and 0.5 % new. Timed: reading the
text of both exports with the csv module, diffing them, and serialising the events.

CPU time of this process (``time.process_time``), best of ``--rounds``. Targets (issue 36):
50,000 Debezium rows/s and 100,000 CSV rows/s diffed.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import random
import subprocess
import time
from pathlib import Path

import orjson

from processors.feeds.debezium import DebeziumAdapter
from processors.feeds.output import FeedCounts, Origin
from processors.feeds.snapshots import Export, SnapshotAdapter
from processors.native import describe
from schemas.feed_mapping import load_mapping
from schemas.ontology import default_ontology
from schemas.times import parse_micros

ROOT = Path(__file__).resolve().parents[2]
CLASSES = ("cmdb_ci_service", "cmdb_ci_service_discovered", "cmdb_ci_appl", "cmdb_ci_appl", "cmdb_ci_linux_server",
           "cmdb_ci_win_server", "cmdb_ci_vm_instance", "cmdb_ci_database")
HOSTS = ("cmdb_ci_linux_server", "cmdb_ci_win_server", "cmdb_ci_vm_instance")
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z in milliseconds


def debezium_records(rows: int, seed: int = 36) -> list[bytes]:
    """``rows`` Debezium records of a CMDB, as JSON lines (without the schema wrapper)."""
    rng = random.Random(seed)
    groups = max(10, rows // 500)
    cis_count = rows * 3 // 10
    lines: list[bytes] = []
    lsn = 0

    def record(table: str, op: str, before: dict | None, after: dict | None, at: int) -> bytes:
        nonlocal lsn
        lsn += 1
        return orjson.dumps({"before": before, "after": after, "op": op, "ts_ms": at, "transaction": None,
                             "source": {"version": "2.7.0.Final", "connector": "postgresql", "name": "cmdb",
                                        "ts_ms": at - 20, "snapshot": "false", "db": "cmdb", "schema": "public",
                                        "table": table, "txId": lsn // 4, "lsn": 24_000_000 + lsn}})

    for g in range(groups):
        lines.append(record("sys_user_group", "r", None, {"sys_id": f"G{g:05d}", "name": f"group {g}",
                            "u_hr_team_id": f"T{g:05d}" if g % 4 else None}, T0))
    cis = []
    for i in range(cis_count):
        row = {"sys_id": f"{i:032x}", "name": f"ci {i}", "sys_class_name": CLASSES[i % len(CLASSES)],
               "support_group": f"G{rng.randrange(groups):05d}" if CLASSES[i % len(CLASSES)] not in HOSTS else None,
               "sys_updated_on": f"2025-{1 + i % 12:02d}-{1 + i % 28:02d} 10:00:00", "operational_status": 1,
               "install_status": 1, "short_description": f"configuration item {i} of the estate",
               "sys_created_on": "2024-01-01 00:00:00", "sys_mod_count": rng.randrange(50)}
        cis.append(row)
        lines.append(record("cmdb_ci", "r", None, row, T0))
    apps = [row for row in cis if row["sys_class_name"] not in HOSTS and row["sys_class_name"] != "cmdb_ci_database"]
    hosts = [row for row in cis if row["sys_class_name"] in HOSTS]
    links = []
    for r in range(rows * 3 // 10):
        if r % 3:
            link = {"sys_id": f"r{r:031x}", "parent": apps[rng.randrange(len(apps))]["sys_id"],
                    "child": apps[min(int(rng.paretovariate(1.2)) - 1, len(apps) - 1)]["sys_id"],
                    "type": "Depends on::Used by"}
        else:
            link = {"sys_id": f"r{r:031x}", "parent": apps[rng.randrange(len(apps))]["sys_id"],
                    "child": hosts[rng.randrange(len(hosts))]["sys_id"], "type": "Runs on::Runs"}
        links.append(link)
        lines.append(record("cmdb_rel_ci", "r", None, link, T0))
    at = T0
    while len(lines) < rows:
        at += rng.randrange(1, 2000)
        roll = rng.random()
        if roll < 0.05 and links:
            link = links.pop(rng.randrange(len(links)))
            lines.append(record("cmdb_rel_ci", "d", link, None, at))
            continue
        index = rng.randrange(len(cis))
        before = cis[index]
        after = {**before, "sys_updated_on": "2026-02-01 00:00:00", "sys_mod_count": before["sys_mod_count"] + 1}
        if roll < 0.25 and before["support_group"] is not None:
            after["support_group"] = f"G{rng.randrange(groups):05d}"
        cis[index] = after
        lines.append(record("cmdb_ci", "u", before, after, at))
    return lines[:rows]


def with_schema(lines: list[bytes]) -> list[bytes]:
    """The records as the JSON converter writes them with schemas on: each carries its envelope's schema."""
    def fields(row: dict | None) -> list[dict]:
        return [{"type": "int64" if isinstance(v, int) else "string", "optional": True, "field": k}
                for k, v in (row or {}).items()]
    wrapped = []
    for line in lines:
        payload = orjson.loads(line)
        row = payload["after"] or payload["before"]
        schema = {"type": "struct", "optional": False, "name": f"cmdb.public.{payload['source']['table']}.Envelope",
                  "fields": [{"type": "struct", "fields": fields(row), "optional": True, "field": "before"},
                             {"type": "struct", "fields": fields(row), "optional": True, "field": "after"},
                             {"type": "struct", "fields": fields(payload["source"]), "optional": False,
                              "field": "source"},
                             {"type": "string", "optional": False, "field": "op"},
                             {"type": "int64", "optional": True, "field": "ts_ms"}]}
        wrapped.append(orjson.dumps({"schema": schema, "payload": payload}))
    return wrapped


def hr_exports(people: int, seed: int = 36) -> tuple[str, str]:
    """Two consecutive HR exports as CSV text."""
    rng = random.Random(seed)
    header = ["employee_id", "full_name", "email", "manager_id", "team_id", "team_name", "role", "effective_date"]
    teams = max(10, people // 40)

    def person(n: int) -> list[str]:
        team = rng.randrange(teams)
        return [f"E{n:07d}", f"Person {n}", f"person.{n}@acme.test", f"E{rng.randrange(max(1, n)):07d}" if n else "",
                f"T{team:05d}", f"Team {team}", "change-approver" if n % 50 == 0 else "", "2025-01-01"]

    first = [person(n) for n in range(people)]
    second = []
    for row in first:
        roll = rng.random()
        if roll < 0.005:
            continue  # left
        if roll < 0.025:
            row = [*row[:3], f"E{rng.randrange(people):07d}", *row[4:7], "2026-04-15"]
        second.append(row)
    second += [person(people + n) for n in range(people // 200)]

    def text(rows: list[list[str]]) -> str:
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(header)
        writer.writerows(rows)
        return out.getvalue()

    return text(first), text(second)


def time_debezium(lines: list[bytes]) -> tuple[float, FeedCounts, int]:
    """(CPU seconds, counts, bytes written) for the files route over ``lines``."""
    mapping = load_mapping(ROOT / "deploy/feeds/servicenow-cmdb.yaml", default_ontology())
    adapter = DebeziumAdapter(mapping, "acme", default_ontology())
    written = 0
    started = time.process_time()
    for number, line in enumerate(lines, 1):
        written += _serialise(adapter.take(line, Origin("cmdb.jsonl", None, number)))
    written += _serialise(adapter.finish())
    return time.process_time() - started, adapter.counts, written


def time_csv(previous: str, current: str) -> tuple[float, FeedCounts, int]:
    mapping = load_mapping(ROOT / "deploy/feeds/hr-directory.yaml", default_ontology())
    adapter = SnapshotAdapter(mapping, "directory", "acme", default_ontology())
    started = time.process_time()
    exports = []
    for name, text in (("old.csv", previous), ("new.csv", current)):
        reader = csv.reader(io.StringIO(text))
        header = tuple(next(reader))
        exports.append(Export(name, header, ((reader.line_num, values) for values in reader if values),
                              parse_micros("2026-05-01T06:00:00Z")))
    written = _serialise(adapter.diff(exports[0], exports[1]))
    return time.process_time() - started, adapter.counts, written


def _serialise(outputs: object) -> int:
    return sum(len(orjson.dumps(document)) + 1 for _, document in outputs)  # type: ignore[attr-defined]


def best(measure, rounds: int) -> tuple[float, FeedCounts, int]:  # type: ignore[no-untyped-def]
    results = [measure() for _ in range(rounds)]
    return min(results, key=lambda result: result[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="Debezium records")
    parser.add_argument("--people", type=int, default=300_000, help="rows of each HR export")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    print(f"{describe()}; commit {commit.stdout.strip()}; load average {os.getloadavg()[0]:.2f}")
    plain = debezium_records(args.rows)
    for name, lines in (("Debezium", plain), ("Debezium, schema wrapper", with_schema(plain))):
        seconds, counts, written = best(lambda lines=lines: time_debezium(lines), args.rounds)
        print(f"{name:26s} {counts.rows / seconds:10,.0f} rows/s  ({counts.rows:,} rows in {seconds:.2f} s CPU: "
              f"{counts.events:,} events, {counts.unchanged:,} unchanged, {counts.dead_lettered:,} dead letters; "
              f"{written / counts.rows:.0f} bytes out a row)", flush=True)
    previous, current = hr_exports(args.people)
    seconds, counts, written = best(lambda: time_csv(previous, current), args.rounds)
    print(f"{'CSV exports diffed':26s} {counts.rows / seconds:10,.0f} rows/s  ({counts.rows:,} rows in {seconds:.2f} s "
          f"CPU: {counts.events:,} events, {counts.unchanged:,} unchanged)")
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
