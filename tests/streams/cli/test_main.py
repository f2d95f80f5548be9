"""The command line as a user runs it: load, query, history, corrections; one-line errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schemas.times import parse_micros
from streams.cli.demo import DEMO_EVENTS
from streams.cli.load import load_into
from streams.cli.main import app
from tests.support.cli import edgeledger


def edgeledger_process(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``edgeledger ARGS`` as a user runs it: a process of its own, as ``python -m streams.cli.main``."""
    done = subprocess.run([sys.executable, "-m", "streams.cli.main", *args], capture_output=True, text=True,
                          timeout=60)
    if check and done.returncode != 0:
        raise AssertionError(done.stderr)
    return done


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "state"
    summary = json.loads(edgeledger_process("load", str(DEMO_EVENTS), "--state", str(path),
                                            "--simulated-clock").stdout)
    assert summary["balanced"] and summary["events_read"] == 18
    # The two bad CMDB rows are dead-lettered; the demo's merge applies (see the identity test below).
    assert summary["dead_lettered"] == 2 and summary["queued_for_review"] == 0
    return path


def test_query_json_has_the_contract_shape(state: Path) -> None:
    out = edgeledger("query", "owners-of", "--state", str(state), "--tenant", "acme", "--entity",
                     "settlement connector", "--valid-at", "2026-04-22", "--known-at", "2026-04-22", "--json")
    result = json.loads(out.stdout)
    assert set(result) >= {"query", "valid_at", "known_at", "anchor", "disposition", "results", "paths", "edges",
                           "counts", "truncated", "limits_hit", "frontier", "coverage"}
    assert [r["entity"] for r in result["results"]] == ["Team:hr:T-ANA"]
    assert result["anchor"] == {"input": "settlement connector", "entity": "Component:cmdb:CI0042",
                                "resolution": "alias", "candidates": []}


def test_the_demo_merge_joins_the_sheets_team_to_hrs_as_of_when_it_was_made(state: Path) -> None:
    def owners(known_at: str) -> list[str]:
        out = edgeledger("query", "owners-of", "--state", str(state), "--tenant", "acme", "--entity", "Nightly ETL",
                         "--valid-at", "2026-05-03", "--known-at", known_at, "--json")
        return sorted(r["entity"] for r in json.loads(out.stdout)["results"])

    # The finance sheet named a team only by name; HR knows it as FinOps, and alice merged the two.
    assert owners("2026-05-02") == ["Team:hr:T-PLAT", "Team:~finance operations"]
    assert owners("2026-05-04") == ["Team:hr:T-FINOPS", "Team:hr:T-PLAT"]
    history = json.loads(edgeledger("identity", "history", "--state", str(state), "--tenant", "acme", "--entity",
                                    "Team:hr:T-FINOPS", "--json").stdout)
    assert [(edit["kind"], edit["actor"]) for edit in history if edit["kind"] == "merge"] == [("merge", "alice")]


def test_history_and_corrections(state: Path) -> None:
    history = json.loads(edgeledger("history", "--state", str(state), "--tenant", "acme", "--entity",
                                    "Component:cmdb:CI0042", "--rel", "owned_by", "--json").stdout)
    assert len(history["versions"]) == 3
    corrections = json.loads(edgeledger("corrections", "--state", str(state), "--tenant", "acme", "--json").stdout)
    assert [c["event_id"] for c in corrections] == ["cmdb-7781", "cmdb-7782"]
    text = edgeledger("query", "approvals-required-for", "--state", str(state), "--tenant", "acme",
                      "--entity", "settlement connector").stdout
    assert "ApprovalRole:role:change-manager" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["query", "owners-of", "--entity", "x"], "--tenant"),
        (["query", "owners-of", "--tenant", "acme", "--entity", "x", "--state", "/nonexistent/x"], "no ledger"),
        (["query", "owners-of", "--tenant", "acme", "--entity", "x", "--valid-at", "yesterday"], "--valid-at"),
        (["query", "best-friends", "--tenant", "acme", "--entity", "x"], "unknown query"),
        (["load", "/nonexistent.jsonl"], "no such file"),
        (["replica", "--bootstrap", ""], "--bootstrap is empty"),
    ],
)
def test_errors_are_one_line_without_traceback(state: Path, args: list[str], message: str) -> None:
    if "--state" not in args:
        args = [*args, "--state", str(state)]
    done = edgeledger(*args, check=False)
    assert done.returncode != 0
    assert message in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_produce_refuses_an_empty_bootstrap_in_one_line(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text("")
    done = edgeledger("produce", str(events), "--bootstrap", " ", check=False)
    assert done.returncode == 2
    assert done.stderr == "edgeledger: error: --bootstrap is empty: give host:port[,host:port...]\n"


@pytest.mark.parametrize("command", [["query", "owners-of", "--entity", "x"], ["history", "--entity", "x"],
                                     ["corrections"], ["review", "list"], ["traces", "affected"], ["dead-letters"],
                                     ["freshness"]])
def test_every_read_refuses_an_empty_tenant(state: Path, command: list[str]) -> None:
    done = edgeledger(*command, "--state", str(state), "--tenant", "", check=False)
    assert done.returncode == 2
    assert done.stderr.strip() == ("edgeledger: error: Invalid value for '--tenant': empty; there is no default "
                                   "tenant (see --help)")


@pytest.mark.parametrize("command", [["run", "--state", "st"], ["produce", "events.jsonl"],
                                     ["replica", "--state", "st"]])
def test_a_topic_prefix_kafka_refuses_is_refused_before_anything_starts(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "events.jsonl").write_text("")
    done = subprocess.run([sys.executable, "-m", "streams.cli.main", *command, "--bootstrap", "127.0.0.1:1",
                           "--topic-prefix", "bad prefix!"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "edgeledger: error: 'bad prefix!source-changes' is not a legal Kafka topic name: use letters, digits, '.', "
        "'_' and '-', at most 249 characters (check the topic prefix)"]


def test_help_is_there_for_a_newcomer() -> None:
    out = edgeledger_process("--help").stdout
    for command in ("load", "query", "history", "corrections", "demo"):
        assert command in out


def test_a_command_is_one_process(state: Path) -> None:
    """What the in-process calls cannot show: a process's whole standard error (an interpreter or import
    warning would add lines) is empty on success and one line on an error, and its exit status."""
    done = edgeledger_process("query", "owners-of", "--state", str(state), "--tenant", "acme", "--entity",
                              "settlement connector", "--json")
    assert [r["entity"] for r in json.loads(done.stdout)["results"]] == ["Team:hr:T-PLAT"] and done.stderr == ""
    refused = edgeledger_process("query", "owners-of", "--state", str(state), "--tenant", "acme", "--entity", "x",
                                 "--valid-at", "yesterday", check=False)
    assert refused.returncode == 2 and refused.stderr.startswith("edgeledger: error: ")
    assert "--valid-at" in refused.stderr and len(refused.stderr.splitlines()) == 1
    same = edgeledger("query", "owners-of", "--state", str(state), "--tenant", "acme", "--entity", "x",
                      "--valid-at", "yesterday", check=False)
    assert (same.returncode, same.stdout, same.stderr) == (refused.returncode, refused.stdout, refused.stderr), (
        "in this process, the same")


def test_traces_affected_re_derives_omitted_edge_ids_and_lists_what_it_cannot(tmp_path: Path) -> None:
    events = []
    for line in DEMO_EVENTS.read_text().splitlines():
        event = json.loads(line)
        if event["kind"] == "trace":
            recorded = {**event, "event_id": "tr-copy", "trace_id": "copy", "action": "none"}
            unknown = {**event, "event_id": "tr-bad", "trace_id": "bad", "query": {"name": "who-knows", "entity": "x"}}
            del event["edge_ids"], unknown["edge_ids"]
            events += [recorded, unknown]
        events.append(event)
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(event) + "\n" for event in events))
    state = tmp_path / "state"
    edgeledger("load", str(path), "--state", str(state), "--simulated-clock")
    found = json.loads(edgeledger("traces", "affected", "--state", str(state), "--tenant", "acme", "--json").stdout)
    assert [(t["trace_id"], t["edge_ids_source"]) for t in found] == [
        ("agent-run-0422", "re-derived"), ("bad", "unknown"), ("copy", "recorded")]
    assert found[0]["edge_ids"] == found[2]["edge_ids"] == ["e581374abda4fabaa"]
    assert found[0]["corrected_edges"] == found[2]["corrected_edges"]
    assert found[1]["status"].startswith("edge_ids unknown: unknown query 'who-knows'")
    text = edgeledger("traces", "affected", "--state", str(state), "--tenant", "acme").stdout.splitlines()
    assert text[0].startswith("agent-run-0422  [approval_routing]") and text[0].endswith("(edge ids re-derived)")
    assert "edge_ids unknown: unknown query 'who-knows'" in text[1]
    assert text[2].endswith("(edge ids recorded)")


@pytest.mark.parametrize(
    ("files", "args", "says"),
    [
        ({"empty.json": "{}"}, ["ontology", "--ontology", "{empty.json}"],
         "{empty.json} is not a valid ontology: entity_types: Field required"),
        ({"bad.json": '{"entity_types": ["A"], "relationships": {"r": {"domain": ["B"], "range": ["A"], '
                      '"cardinality": "two"}}}'}, ["ontology", "--ontology", "{bad.json}"],
         "{bad.json} is not a valid ontology: relationships.r.cardinality: Input should be 'one' or 'many'"),
        ({"empty.json": "{}"}, ["query", "owners-of", "--tenant", "acme", "--entity", "x", "--slo", "{empty.json}"],
         "{empty.json} is not a valid SLO file: sources: Field required"),
        ({"slo.json": '{"sources": {"hr": {"max_silence_seconds": "9"}}}'},
         ["query", "owners-of", "--tenant", "acme", "--entity", "x", "--slo", "{slo.json}"],
         "sources.hr.max_silence_seconds: Input should be a valid number; sources.hr.max_p99_lag_seconds: "
         "Field required"),
        ({"bad.jsonl": '{"sources": {}}\n{"x": 1}\n'},
         ["query", "owners-of", "--tenant", "acme", "--entity", "x", "--slo", "{bad.jsonl}"],
         "{bad.jsonl} is not a valid SLO file: not JSON (Extra data: line 2 column 1"),
        ({}, ["ontology", "--ontology", "{missing.json}"], "{missing.json}: cannot read the ontology"),
        ({"bad.jsonl": "{}\n"}, ["load", str(DEMO_EVENTS), "--state", "{bad.jsonl}"],
         "{bad.jsonl} is a file, not a ledger state directory"),
        ({"bad.jsonl": "{}\n"}, ["query", "owners-of", "--tenant", "acme", "--entity", "x", "--state", "{bad.jsonl}"],
         "{bad.jsonl} is a file, not a ledger state directory"),
    ],
)
def test_bad_files_are_named_in_one_line(state: Path, tmp_path: Path, files: dict[str, str], args: list[str],
                                         says: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    names = {"{" + name + "}": str(tmp_path / name) for name in [*files, "missing.json"]}

    def fill(text: str) -> str:
        for placeholder, path in names.items():
            text = text.replace(placeholder, path)
        return text

    args = [fill(arg) for arg in args]
    if args[0] == "query" and "--state" not in args:
        args += ["--state", str(state)]
    done = edgeledger(*args, check=False)
    assert done.returncode != 0
    assert done.stderr.startswith("edgeledger: error: ") and fill(says) in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


HOSTS_EVENTS = [
    {"kind": "clock", "now": "2026-05-01T00:00:00Z"},
    {"kind": "change", "event_id": "cmdb-h1", "tenant": "acme", "source": {"system": "cmdb", "record": "h/1"},
     "detected_at": "2026-05-01T00:00:00Z", "mode": "delta",
     "assert": [{"src": {"type": "Host", "id": "cmdb:H1"}, "rel": "hosts", "dst": {"type": "Service", "id": "cmdb:S1"},
                 "valid_from": "2026-04-01"}]},
]


@pytest.fixture(scope="module")
def hosts_state(tmp_path_factory) -> tuple[Path, Path]:
    """A state loaded with an ontology that adds `hosts` (Host -> Service), and that ontology's file."""
    from schemas.ontology import default_ontology

    folder = tmp_path_factory.mktemp("hosts")
    document = default_ontology().model_dump(mode="json")
    document["relationships"]["hosts"] = {"domain": ["Host"], "range": ["Service"], "sources": ["cmdb"]}
    ontology = folder / "ontology.json"
    ontology.write_text(json.dumps(document))
    events = folder / "hosts.jsonl"
    events.write_text("".join(json.dumps(event) + "\n" for event in HOSTS_EVENTS))
    summary = json.loads(edgeledger_process("load", str(events), "--state", str(folder / "state"),
                                            "--simulated-clock", "--ontology", str(ontology), "--quiet").stdout)
    assert summary["applied"] == 2 and summary["dead_lettered"] == 0
    return folder / "state", ontology


def test_reads_take_the_ontology_the_state_was_loaded_with(hosts_state: tuple[Path, Path]) -> None:
    state, ontology = hosts_state
    common = ["--state", str(state), "--tenant", "acme", "--entity", "Host:cmdb:H1"]
    result = json.loads(edgeledger("query", "traverse", *common, "--edges", "hosts:out", "--ontology", str(ontology),
                                   "--json").stdout)
    assert [r["entity"] for r in result["results"]] == ["Service:cmdb:S1"]
    history = json.loads(edgeledger("history", *common, "--rel", "hosts", "--ontology", str(ontology),
                                    "--json").stdout)
    assert [v["rel"] for v in history["versions"]] == ["hosts"]
    # Without it the bundled vocabulary applies, and the refusal says where to look.
    for args in (["query", "traverse", *common, "--edges", "hosts:out"], ["history", *common, "--rel", "hosts"]):
        done = edgeledger(*args, check=False)
        assert done.returncode != 0 and "unknown relationship" in done.stderr and "--ontology FILE" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


def test_serve_passes_its_ontology_to_the_api(hosts_state: tuple[Path, Path], monkeypatch) -> None:
    from typer.testing import CliRunner

    import streams.api.http
    from streams.cli.main import app

    seen = {}
    monkeypatch.setattr(streams.api.http, "serve", lambda state_dir, **options: seen.update(options))
    state, ontology = hosts_state
    done = CliRunner().invoke(app, ["serve", "--state", str(state), "--ontology", str(ontology)])
    assert done.exit_code == 0, done.output
    assert "hosts" in seen["ontology"].relationships


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["history", "--entity", "Component:cmdb:CI0042", "--rel", "likes"], "--rel: unknown relationship 'likes'"),
        (["history", "--entity", "Component:cmdb:CI0042", "--rel", ""], "--rel: unknown relationship ''"),
        (["query", "changed-between", "--entity", "Component:cmdb:CI0042", "--from", "2026-05-01", "--to",
          "2026-04-01"], "--from must be before --to"),
        (["query", "changed-between", "--entity", "Component:cmdb:CI0042", "--from", "2026-05-01", "--to",
          "2026-05-01"], "--from must be before --to"),
        (["query", "changed-between", "--entity", "Component:cmdb:CI0042"], "--from: Field required"),
        (["query", "changed-between", "--entity", "Component:cmdb:CI0042", "--from", "2026-06-01", "--known-at",
          "2026-05-01"], "--from must be before --known-at: with no --to, the window is [--from, --known-at)"),
        (["query", "changed-between", "--entity", "Component:cmdb:CI0042", "--from", "2026-06-01", "--to",
          "2026-07-01", "--known-at", "2026-05-01", "--axis", "tx"],
         "--from must be before --known-at: on the tx axis nothing recorded after --known-at is read"),
        (["query", "changed-between", "--entity", "Component:cmdb:CI0042", "--from", "2999-01-01"],
         "--from must be before now (the default --known-at)"),
        (["query", "owners-of", "--entity", "Component:cmdb:CI0042", "--types", "Team,Gadget"],
         "--types: unknown entity type(s) Gadget"),
        (["query", "owners-of", "--entity", "Component:cmdb:CI0042", "--edges", "depends_on:in"],
         "--edges: owners-of takes no such parameter"),
        (["query", "owners-of", "--entity", "Component:cmdb:CI0042", "--depth", "2"],
         "--depth: owners-of takes no such parameter"),
        (["query", "traverse", "--entity", "Component:cmdb:CI0042", "--edges", "likes:out"],
         "--edges: unknown relationship(s) likes"),
        (["query", "dependents-of", "--entity", "Component:cmdb:CI0042", "--max-depth", "0"],
         "--max-depth: Input should be greater than or equal to 1"),
        (["query", "dependents-of", "--entity", "Component:cmdb:CI0042", "--depth", "11"],
         "--depth: Input should be less than or equal to 10"),
    ],
)
def test_meaningless_read_options_are_refused(state: Path, args: list[str], says: str) -> None:
    done = edgeledger(*args, "--state", str(state), "--tenant", "acme", check=False)
    assert done.returncode != 0 and says in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_listings_take_the_transaction_clock(state: Path) -> None:
    """--known-at lists what the ledger had recorded by then; the demo's late correction lands at 2026-05-03T09:00Z."""
    def listed(*args: str) -> list[dict]:
        return json.loads(edgeledger(*args, "--state", str(state), "--tenant", "acme", "--json").stdout)

    assert [c["event_id"] for c in listed("corrections", "--known-at", "2026-05-03T09:00:00Z")] == ["cmdb-7781"]
    assert listed("corrections", "--known-at", "2026-05-03") == []
    assert sorted(i["category"] for i in listed("review", "list")) == ["cardinality_conflict"]
    assert [i["category"] for i in listed("review", "list", "--known-at", "2026-05-01")] == ["cardinality_conflict"]
    # The trace was recorded at 2026-04-22T10:15Z; the edge it used was closed at 2026-05-03T09:00Z.
    assert [t["trace_id"] for t in listed("traces", "affected")] == ["agent-run-0422"]
    assert listed("traces", "affected", "--known-at", "2026-05-02") == []
    assert listed("traces", "affected", "--known-at", "2026-04-22T10:14:30Z") == []
    assert [d["event_id"] for d in listed("dead-letters")] == ["cmdb-bad-1", "cmdb-bad-2"]
    by_then = listed("dead-letters", "--known-at", "2026-05-03T09:00:00.000002Z")
    assert [d["event_id"] for d in by_then] == ["cmdb-bad-1"]
    done = edgeledger("corrections", "--state", str(state), "--tenant", "acme", "--known-at", "soon", check=False)
    assert done.returncode != 0 and done.stderr.startswith("edgeledger: error: --known-at:")


def test_dead_letters_are_read_per_tenant_or_as_untenanted(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text(
        "not json at all\n"
        '{"kind": "heartbeat", "event_id": "hb-1", "source": {"system": "hr"}, "detected_at": "2026-05-01"}\n'
        '{"kind": "heartbeat", "event_id": "hb-2", "tenant": "globex", "source": {"system": "hr"}, "detected_at": '
        '"2026-05-01", "colour": "blue"}\n'
        '{"kind": "heartbeat", "event_id": "hb-3", "tenant": "acme", "source": {"system": "hr"}, "detected_at": '
        '"2026-05-01", "colour": "red"}\n'
    )
    state = tmp_path / "state"
    assert json.loads(edgeledger("load", str(events), "--state", str(state), "--quiet").stdout)["dead_lettered"] == 4

    def letters(*args: str) -> list[str]:
        return [d["original"][:16] for d in json.loads(edgeledger("dead-letters", "--state", str(state), *args,
                                                                  "--json").stdout)]

    assert letters("--tenant", "acme") == ['{"kind": "heartb'] and "red" in edgeledger(
        "dead-letters", "--state", str(state), "--tenant", "acme").stdout
    assert len(letters("--tenant", "globex")) == 1 and letters("--tenant", "initech") == []
    assert letters("--untenanted") == ["not json at all", '{"kind": "heartb']
    for args in ([], ["--tenant", "acme", "--untenanted"]):
        done = edgeledger("dead-letters", "--state", str(state), *args, check=False)
        assert done.returncode != 0 and "--tenant" in done.stderr and "--untenanted" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


def cli_json(*args: str) -> dict:
    """One read command in-process (a subprocess costs a second of start-up), its JSON."""
    done = CliRunner().invoke(app, [*args, "--json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.output)


@pytest.mark.parametrize(
    ("lines", "instant", "expected"),
    [
        # The reported case: cmdb was last heard on 2 March, so as of 22 April it is stale whatever it
        # said on 3 May; before, the full state judged 22 April on cmdb's 3 May heartbeat: "none".
        (11, "2026-04-22T12:00:00Z", ("unknown", ["cmdb"])),
        # Just after the first events, inside the one batch a load of the whole file commits.
        (8, "2026-03-02T09:05:00Z", ("none", [])),
    ],
)
def test_a_past_answer_and_its_coverage_do_not_depend_on_what_was_loaded_later(
        state: Path, tmp_path: Path, lines: int, instant: str, expected: tuple[str, list[str]]) -> None:
    prefix = tmp_path / "prefix.jsonl"
    prefix.write_text("".join(DEMO_EVENTS.read_text().splitlines(keepends=True)[:lines]))
    partial = tmp_path / "partial"
    load_into(partial, [prefix], simulated_clock=True, ontology_path=None)
    answers, reports = [], []
    for path in (partial, state):
        result = cli_json("query", "dependents-of", "--state", str(path), "--tenant", "acme", "--entity",
                          "Service:cmdb:S3", "--valid-at", instant, "--known-at", instant)
        answers.append((result["disposition"], result["coverage"], result["results"]))
        reports.append(cli_json("freshness", "--state", str(path), "--tenant", "acme", "--now", instant)["staleness"])
    assert answers[0] == answers[1]
    assert (answers[1][0], answers[1][1]["stale_sources"]) == expected
    assert reports[0] == reports[1], "freshness --now is as of that instant"
    for source in reports[1]:
        if source["last_heard_at"] is not None:
            assert parse_micros(source["last_heard_at"]) <= parse_micros(instant) and source["silence_seconds"] >= 0


def test_history_lists_every_version_of_the_record_that_stated_an_edge(tmp_path: Path) -> None:
    """v1 and v2 of svc/a state A -> B; v1 is revoked: the edge stands, and history says who states it."""
    def change(event_id: str, version: str) -> dict:
        return {"kind": "change", "event_id": event_id, "tenant": "acme", "mode": "snapshot",
                "source": {"system": "cmdb", "record": "svc/a", "version": version},
                "detected_at": "2026-01-01T00:00:00Z",
                "assert": [{"src": {"type": "Service", "id": "cmdb:A"}, "rel": "depends_on",
                            "dst": {"type": "Service", "id": "cmdb:B"}}]}

    revoke = {"kind": "revoke_source", "event_id": "r-1", "tenant": "acme", "reason": "v1 was corrupt",
              "source": {"system": "cmdb", "record": "svc/a", "version": "v1"}}
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(json.dumps(e) for e in (change("c-1", "v1"), change("c-2", "v2"), revoke)) + "\n")
    state = tmp_path / "state"
    edgeledger("load", str(events), "--state", str(state))
    args = ("history", "--state", str(state), "--tenant", "acme", "--entity", "Service:cmdb:A")
    [version] = json.loads(edgeledger(*args, "--json").stdout)["versions"]
    assert version["tx_to"] is None and version["source"]["version"] == "v1"
    stated = [(s["version"], s["event_id"], s["withdrawn_at"] is not None) for s in version["stated_by"]]
    assert stated == [("v1", "c-1", True), ("v2", "c-2", False)]
    assert "stated by svc/a 'v1' (revoked " in edgeledger(*args).stdout
