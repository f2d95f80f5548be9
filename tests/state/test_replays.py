"""Replaying recorded answers after a late ownership correction and a late new dependency: exactly the
traces whose read set the changes touched are listed, with the right verdicts, action-bearing first."""

from typing import Any

import pytest

from processors.trace_replay import Answer, run_trace, verdict_of
from schemas.times import parse_micros
from state.kv import MemoryKV
from state.replays import replays_since
from state.trace_index import TraceIndex, trace_of
from tests.support.harness import Ledger

C, D = "Component:cmdb:CI0042", "Component:cmdb:CI0099"
S1, S5, S9 = "Service:cmdb:S1", "Service:cmdb:S5", "Service:cmdb:S9"
ANA, PLAT = "Team:hr:T-ANA", "Team:hr:T-PLAT"
POL_A, POL_P = "Policy:grc:POL-A", "Policy:grc:POL-P"
ROLE_A, ROLE_P = "ApprovalRole:grc:R-A", "ApprovalRole:grc:R-P"
NOW = "2026-06-01T00:00:00Z"


def trace(trace_id: str, name: str, entity: str, action: str, known_at: str, valid_at: str | None = None,
          **query: Any) -> dict[str, Any]:
    return {"kind": "trace", "event_id": f"tr-{trace_id}", "tenant": "acme", "trace_id": trace_id,
            "query": {"name": name, "entity": entity, **query}, "valid_at": valid_at or known_at,
            "known_at": known_at, "action": action}


TRACES = [
    trace("own-c-ext", "owners-of", C, "external_change", "2026-04-22T10:00:00Z"),
    trace("own-c-none", "owners-of", C, "none", "2026-04-20T10:00:00Z"),
    trace("own-c-march", "owners-of", C, "approval_routing", "2026-04-22T10:00:00Z", "2026-03-15T00:00:00Z"),
    trace("own-c-tight", "owners-of", C, "permission_change", "2026-04-22T11:00:00Z",
          limits={"max_expansions": 1}),
    trace("dep-c-ext", "dependents-of", C, "external_change", "2026-04-21T10:00:00Z"),
    trace("dep-c-march", "dependents-of", C, "none", "2026-04-22T10:00:00Z", "2026-03-15T00:00:00Z"),
    trace("appr-c", "approvals-required-for", C, "approval_routing", "2026-04-22T09:00:00Z"),
    trace("own-s5", "owners-of", S5, "permission_change", "2026-04-22T10:00:00Z"),
    trace("dep-d", "dependents-of", D, "none", "2026-04-22T10:00:00Z"),
    trace("appr-d", "approvals-required-for", D, "external_change", "2026-04-22T10:00:00Z"),
    trace("own-s1", "owners-of", S1, "none", "2026-04-22T10:00:00Z"),
]
UNTOUCHED = {"own-s5", "dep-d", "appr-d", "own-s1", "dep-c-march"}


def organisation(ledger: Ledger) -> None:
    """Analytics owns the connector C and S1 (which depends on C); Platform owns S5 (which depends on D).
    Each team is governed by a policy that requires an approval role."""
    ledger.at("2026-03-01T00:00:00Z")
    ledger.change("cmdb").asserts(C, "owned_by", ANA).send()
    ledger.change("cmdb").asserts(S1, "depends_on", C).asserts(S1, "owned_by", ANA).send()
    ledger.change("cmdb").asserts(S5, "depends_on", D).asserts(S5, "owned_by", PLAT).asserts(D, "owned_by", ANA).send()
    ledger.change("grc").asserts(ANA, "governed_by", POL_A).asserts(POL_A, "requires", ROLE_A).send()
    ledger.change("grc").asserts(PLAT, "governed_by", POL_P).asserts(POL_P, "requires", ROLE_P).send()


def late_changes(ledger: Ledger) -> None:
    """On 3 May the catalogue learns Platform has owned C since 1 April, and that S9 (Platform's) has
    depended on C since 10 April."""
    ledger.at("2026-05-03T00:00:00Z")
    ledger.change("cmdb", event_id="own-fix").asserts(C, "owned_by", PLAT, "2026-04-01").send()
    ledger.change("cmdb", event_id="new-dep").asserts(S9, "depends_on", C, "2026-04-10").asserts(
        S9, "owned_by", PLAT).send()


@pytest.fixture
def scenario() -> tuple[Ledger, TraceIndex]:
    ledger = Ledger()
    organisation(ledger)
    ledger.at("2026-04-23T00:00:00Z").send(*TRACES)
    late_changes(ledger)
    return ledger, TraceIndex(MemoryKV())


def replays(ledger: Ledger, index: TraceIndex, since: str | None = None, known_at: str = NOW) -> list[dict]:
    found = replays_since(ledger.store, index, ledger.engine, "acme", parse_micros(since) if since else None,
                          parse_micros(known_at))
    return [r.as_json() for r in found]


def test_exactly_the_touched_traces_are_listed_action_bearing_first_with_their_verdicts(scenario) -> None:
    ledger, index = scenario
    listed = replays(ledger, index)
    assert [(r["trace_id"], r["verdict"]) for r in listed] == [
        ("dep-c-ext", "changed"),      # action-bearing, changed, oldest known_at first
        ("appr-c", "changed"),
        ("own-c-ext", "changed"),
        ("own-c-tight", "now_unknown"),
        ("own-c-march", "same"),       # touched (its versions were closed and appended), answer unchanged
        ("own-c-none", "changed"),     # no action: after every action-bearing trace
    ]
    assert not UNTOUCHED & {r["trace_id"] for r in listed}


def test_each_replay_says_what_was_added_and_removed_and_which_changes_did_it(scenario) -> None:
    ledger, index = scenario
    by_id = {r["trace_id"]: r for r in replays(ledger, index)}
    own = by_id["own-c-ext"]
    assert own["before"]["results"] == [ANA] and own["after"]["results"] == [PLAT]
    assert (own["added"], own["removed"]) == ([PLAT], [ANA])
    (fix,) = own["changes"]
    assert fix["event_id"] == "own-fix" and len(fix["old_edge_ids"]) == 1 and len(fix["new_edge_ids"]) == 2
    dep = by_id["dep-c-ext"]
    assert (dep["added"], dep["removed"]) == ([S9], [])
    assert [c["event_id"] for c in dep["changes"]] == ["new-dep"]
    assert by_id["appr-c"]["added"] == [ROLE_P] and by_id["appr-c"]["removed"] == []
    assert by_id["own-c-tight"]["before"]["disposition"] == "answer"
    assert by_id["own-c-tight"]["after"]["disposition"] == "unknown"
    march = by_id["own-c-march"]
    assert march["before"] == march["after"] and march["before"]["results"] == [ANA]


def test_a_window_before_the_changes_lists_nothing_and_a_window_over_them_lists_them(scenario) -> None:
    ledger, index = scenario
    assert replays(ledger, index, known_at="2026-05-01T00:00:00Z") == []
    assert replays(ledger, index, since="2026-05-04T00:00:00Z") == []
    assert len(replays(ledger, index, since="2026-05-02T00:00:00Z")) == 6


def test_a_late_addition_alone_flags_the_dependents_answer_it_adds_to() -> None:
    ledger = Ledger()
    organisation(ledger)
    ledger.at("2026-04-23T00:00:00Z").send(TRACES[4])
    ledger.at("2026-05-03T00:00:00Z").change("cmdb").asserts(S9, "depends_on", C, "2026-04-10").send()
    (replay,) = replays(ledger, TraceIndex(MemoryKV()))
    assert replay["trace_id"] == "dep-c-ext" and replay["added"] == [S9]
    (change,) = replay["changes"]
    assert change["old_edge_ids"] == [] and change["cause"] == "addition" and len(change["new_edge_ids"]) == 1


def test_re_running_an_unaffected_trace_reproduces_its_recorded_answer_exactly(scenario) -> None:
    ledger, _ = scenario
    for event in TRACES:
        if event["trace_id"] not in UNTOUCHED:
            continue
        recorded = trace_of(ledger.store, "acme", event["trace_id"])
        assert recorded is not None
        then, _ = run_trace(ledger.engine, recorded, recorded.known_at)
        now, _ = run_trace(ledger.engine, recorded, parse_micros(NOW))
        direct = ledger.query(event["query"]["name"], event["query"]["entity"], event["valid_at"], event["known_at"])
        assert then == now
        assert then.paths == tuple(sorted({tuple(p.nodes) for p in direct.paths}))
        assert then.results and then.disposition == "answer"


def test_the_index_catches_up_once_and_records_why_a_read_set_is_unknown(scenario) -> None:
    ledger, index = scenario
    ledger.send(trace("bad", "no-such-query", C, "none", "2026-04-22T10:00:00Z"))
    replays(ledger, index)
    assert str(index.read_set("acme", "bad")["unknown"]).startswith("unknown query 'no-such-query'")
    assert index.read_set("acme", "own-c-ext") == {"read_set": [[C, "owned_by", "out"]], "named": [C, ANA]}
    assert index.catch_up(ledger.store, "acme", lambda t: frozenset()) == 0  # nothing new since


@pytest.mark.parametrize(("before", "after", "verdict"), [
    (Answer("answer", ("a",), ()), Answer("answer", ("a",), ()), "same"),
    (Answer("answer", ("a",), ()), Answer("answer", ("b",), ()), "changed"),
    (Answer("none", (), ()), Answer("answer", ("b",), ()), "changed"),
    (Answer("none", (), ()), Answer("unknown", (), ()), "now_unknown"),
    (Answer("answer", ("a",), ()), Answer("ambiguous", (), ()), "now_unknown"),
    (Answer("unknown", (), ()), Answer("none", (), ()), "now_known"),
    (Answer("unknown", (), ()), Answer("unknown", (), ()), "same"),
])
def test_verdicts(before: Answer, after: Answer, verdict: str) -> None:
    assert verdict_of(before, after) == verdict


def test_the_traces_recording_order_rows_leave_the_workers_bookkeeping_alone() -> None:
    """A worker keeps its input offsets in the ledger's own KV: the trace rows must not read as offsets."""
    from state.pipeline_store import PipelineStore

    ledger = Ledger()
    organisation(ledger)
    ledger.send(*TRACES)
    assert PipelineStore(ledger.kv).input_offsets() == {}


def test_a_merge_touches_the_traces_that_read_or_named_either_entity_and_its_split_again() -> None:
    """S5 turns out to be S1 recorded twice: the answers that read S1 or S5, or named them, are replayed;
    the rest are not. The split touches them again, and their answer is as before the merge."""
    ledger = Ledger()
    organisation(ledger)
    ledger.at("2026-04-23T00:00:00Z").send(*TRACES)
    ledger.at("2026-05-03T00:00:00Z")
    merge_id = ledger.merge(S1, S5)
    index = TraceIndex(MemoryKV())
    listed = {r["trace_id"]: r for r in replays(ledger, index, known_at="2026-05-04T00:00:00Z")}
    assert set(listed) == {"own-s1", "own-s5", "dep-c-ext", "dep-c-march", "dep-d", "appr-c", "appr-d"}
    assert listed["own-s1"]["added"] == [PLAT] and listed["own-s1"]["verdict"] == "changed"
    assert listed["dep-d"]["added"] == [S1] and listed["dep-d"]["removed"] == [S5]
    (change,) = listed["own-s5"]["changes"]
    assert change["event_id"] == merge_id and change["cause"] == "merge" and change["entities"] == [S1, S5]
    ledger.at("2026-05-10T00:00:00Z").split(merge_id)
    after = {r["trace_id"]: r for r in replays(ledger, index, since="2026-05-05T00:00:00Z")}
    assert set(after) == set(listed)
    assert all(r["before"] == r["after"] for r in after.values()), "after the split, the answers are as recorded"
