"""What a committed batch tells the metrics: the lag of each newly asserted fact (once per fact),
and the one-pass summary the metrics observer exports, against a plain recount of the batch."""

from __future__ import annotations

import json
from collections import Counter

from processors.batch import BatchRunner
from processors.commit_summary import lag_micros, new_facts, summarise_commit
from processors.pending import PendingLedger
from schemas.times import parse_micros
from tests.support.harness import Ledger


def at(text: str) -> int:
    return parse_micros(text)


def test_lag_is_measured_once_per_fact_never_on_the_remainders_a_correction_appends() -> None:
    ledger = Ledger()
    first = _committed_batch(ledger, [_clock("2026-03-01T09:00:00Z"), json.dumps(ledger.change(
        "cmdb", "ci/CI1", detected_at="2026-03-01T08:59:30Z").asserts(
        "Component:cmdb:CI1", "owned_by", "Team:hr:T-ANA").event)])
    second = _committed_batch(ledger, [_clock("2026-05-03T09:00:00Z"), json.dumps(ledger.change(
        "cmdb", "ci/CI1", detected_at="2026-05-03T08:00:00Z").asserts(
        "Component:cmdb:CI1", "owned_by", "Team:hr:T-PLAT", valid_from="2026-04-01").event)])

    facts = [new_facts([batch.versions[key] for key in batch.appended], batch.corrections) for batch in (first, second)]
    appended = [second.versions[key] for key in second.appended]
    remainders = [v for v in appended if v not in facts[1]]
    assert len(appended) == 2 and len(remainders) == 1
    assert remainders[0].detected_at == at("2026-03-01T08:59:30Z")  # provenance follows the fact
    assert [lag_micros(v) for v in facts[0] + facts[1]] == [30_000_000, 3_600_000_000]
    assert summarise_commit(second).lag_seconds == {"cmdb": [3600.0]}, "the remainder is not measured"


def test_a_restatement_that_only_adds_an_origin_is_not_measured() -> None:
    ledger = Ledger()
    ledger.at("2026-03-01T09:00:00Z").change("cmdb", "ci/CI1", version="1").asserts(
        "Component:cmdb:CI1", "owned_by", "Team:hr:T-ANA").send()
    restated = _committed_batch(ledger, [_clock("2026-05-03T09:00:00Z"), json.dumps(ledger.change(
        "cmdb", "ci/CI1", version="2").asserts("Component:cmdb:CI1", "owned_by", "Team:hr:T-ANA").event)])
    assert summarise_commit(restated).lag_seconds == {}
    assert [v.restated for v in restated.versions.values()] == [True] and restated.appended == [], "marked only"
    assert [len(o) for o in restated.stated.values()] == [2], "it added an origin"


def test_a_detected_at_ahead_of_our_clock_counts_as_no_lag() -> None:
    ledger = Ledger()
    ledger.at("2026-03-01T09:00:00Z").change("cmdb", "ci/CI1", detected_at="2026-03-01T09:00:05Z").asserts(
        "Component:cmdb:CI1", "owned_by", "Team:hr:T-ANA").send()
    [version] = ledger.versions("Component:cmdb:CI1", "owned_by")
    assert lag_micros(version) == 0


def _clock(now: str) -> str:
    return json.dumps({"kind": "clock", "now": now})


def _committed_batch(ledger: Ledger, lines: list[str]) -> PendingLedger:
    batches: list[PendingLedger] = []

    def commit(pending: PendingLedger) -> None:
        ledger.store.commit(pending)
        batches.append(pending)

    BatchRunner(ledger.processor, ledger.store, commit, batch_size=1000).run(lines)
    [pending] = batches
    return pending


def test_the_summary_counts_what_a_plain_recount_of_the_batch_finds() -> None:
    ledger = Ledger()
    ledger.at("2026-03-01T09:00:00Z").change("cmdb", "ci/CI1", detected_at="2026-03-01T08:00:00Z").asserts(
        "Component:cmdb:CI1", "owned_by", "Team:hr:T-ANA").send()
    change = ledger.change("cmdb", "ci/CI1", detected_at="2026-03-02T08:00:00Z").asserts(
        "Component:cmdb:CI1", "owned_by", "Team:hr:T-PLAT", valid_from="2026-02-01").event
    hr = ledger.change("hr", "team/T-PLAT", detected_at="2026-03-02T08:30:00Z").asserts(
        "Person:hr:P1", "member_of", "Team:hr:T-PLAT").event
    beat = {"kind": "heartbeat", "event_id": "hb-1", "tenant": "acme", "source": {"system": "hr"},
            "detected_at": "2026-03-02T08:45:00Z"}
    lines = [json.dumps({"kind": "clock", "now": "2026-03-02T09:00:00Z"}), json.dumps(change), json.dumps(hr),
             json.dumps(beat), json.dumps(change), "{not json", json.dumps({**beat, "kind": "nope"})]

    pending = _committed_batch(ledger, lines)
    summary = summarise_commit(pending)

    assert summary.outcomes == Counter((o.system, o.kind, o.outcome) for o in pending.outcomes)
    assert summary.outcomes[("cmdb", "change", "applied")] == 1
    assert summary.outcomes[("cmdb", "change", "duplicate")] == 1
    assert summary.outcomes[(None, None, "dead_lettered")] == 1
    applied = [o for o in pending.outcomes if o.outcome == "applied"]
    assert summary.newest_change_tx == {s: max(o.tx_at for o in applied if o.system == s and o.kind == "change")
                                        for s in ("cmdb", "hr")}
    assert summary.newest_heartbeat_tx == {"hr": next(o.tx_at for o in applied if o.kind == "heartbeat")}
    applied_here = {event_id for _, event_id in pending.seen}
    first_per_origin = {v.origin: v for v in reversed([pending.versions[key] for key in pending.appended])}
    new_facts = [v for v in first_per_origin.values() if v.event_id in applied_here]
    assert {s: sorted(v) for s, v in summary.lag_seconds.items()} == {
        s: sorted((v.tx_from - v.detected_at) / 1e6 for v in new_facts if v.authority == s) for s in ("cmdb", "hr")}
    assert summary.corrections == {"cmdb": 1}  # the ownership correction; the hr fact is new

