"""What a committed batch tells the metrics: the lag of each newly asserted fact (once per fact),
and the one-pass summary the metrics observer exports, against a plain recount of the batch."""

from __future__ import annotations

import json
from collections import Counter

from processors.batch import BatchRunner
from processors.commit_summary import lag_micros, summarise_commit
from processors.pending import PendingLedger
from schemas.times import parse_micros
from tests.support.harness import Ledger


def at(text: str) -> int:
    return parse_micros(text)


def test_lag_is_measured_once_per_fact_never_on_the_remainders_a_correction_appends() -> None:
    ledger = Ledger()
    ledger.at("2026-03-01T09:00:00Z").change("cmdb", "ci/CI1", detected_at="2026-03-01T08:59:30Z").asserts(
        "Component:cmdb:CI1", "owned_by", "Team:hr:T-ANA").send()
    ledger.at("2026-05-03T09:00:00Z").change("cmdb", "ci/CI1", detected_at="2026-05-03T08:00:00Z").asserts(
        "Component:cmdb:CI1", "owned_by", "Team:hr:T-PLAT", valid_from="2026-04-01").send()

    versions = ledger.versions("Component:cmdb:CI1", "owned_by")
    remainders = [v for v in versions if v.origin != v.edge_id]
    assert len(versions) == 3 and len(remainders) == 1
    assert remainders[0].detected_at == at("2026-03-01T08:59:30Z")  # provenance follows the fact
    assert [lag_micros(v) for v in remainders] == [None]
    measured = sorted(lag_micros(v) for v in versions if v.origin == v.edge_id)
    assert measured == [30_000_000, 3_600_000_000]


def test_a_detected_at_ahead_of_our_clock_counts_as_no_lag() -> None:
    ledger = Ledger()
    ledger.at("2026-03-01T09:00:00Z").change("cmdb", "ci/CI1", detected_at="2026-03-01T09:00:05Z").asserts(
        "Component:cmdb:CI1", "owned_by", "Team:hr:T-ANA").send()
    [version] = ledger.versions("Component:cmdb:CI1", "owned_by")
    assert lag_micros(version) == 0


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
    new_facts = [pending.versions[key] for key in pending.appended if pending.versions[key].origin == key[1]]
    assert {s: sorted(v) for s, v in summary.lag_seconds.items()} == {
        s: sorted((v.tx_from - v.detected_at) / 1e6 for v in new_facts if v.authority == s) for s in ("cmdb", "hr")}
    assert summary.corrections == {"cmdb": 1}  # the ownership correction; the hr fact is new
