"""Every origin of a fact: a fact stated by several records or versions survives the loss of one
(docs/semantics.md, "Origins"). The two cases users met, the authority rule beside them, and the
valid-time arithmetic of statements."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from processors.intervals import Interval
from processors.origins import covered, origins_of, uncovered
from schemas.times import parse_micros
from tests.support.harness import Ledger

A, B, C = "Service:cmdb:A", "Service:cmdb:B", "Service:cmdb:C"
FAR_FUTURE = "2100-01-01T00:00:00Z"


def revoke_source(ledger: Ledger, record: str, version: str, system: str = "cmdb") -> None:
    ledger.send({"kind": "revoke_source", "event_id": f"rs-{record}-{version}", "tenant": "acme", "reason": "corrupt",
                 "source": {"system": system, "record": record, "version": version}})


def stating(ledger: Ledger, src: str, dst: str) -> list[tuple[str, str | None, str | None]]:
    """(system, record, version) of each live statement of the believed versions of ``src`` depends_on ``dst``."""
    return [(v.authority, o.record, o.version) for v in ledger.believed(src, "depends_on") if v.dst == dst
            for o in origins_of(v, ledger.origins(v)) if o.tx_to is None]


def test_a_fact_restated_by_a_later_version_survives_the_revocation_of_the_first() -> None:
    ledger = Ledger()
    ledger.at("2026-03-01T00:00:00Z").change("cmdb", "svc/a", version="1").asserts(A, "depends_on", B).send()
    (first,) = ledger.believed(A, "depends_on")
    ledger.change("cmdb", "svc/a", version="2").asserts(A, "depends_on", B).send()
    assert (ledger.counts.versions_appended, ledger.counts.versions_closed, ledger.counts.corrections) == (1, 0, 0), \
        "the restatement adds an origin, no version and no correction"
    assert stating(ledger, A, B) == [("cmdb", "svc/a", "1"), ("cmdb", "svc/a", "2")]

    revoke_source(ledger, "svc/a", "1")
    (believed,) = ledger.believed(A, "depends_on")
    assert believed.edge_id == first.edge_id, "v2 still states it: the same version, still believed"
    assert stating(ledger, A, B) == [("cmdb", "svc/a", "2")]
    assert ledger.counts.corrections == 0
    assert {r.entity for r in ledger.query("dependents-of", B).results} == {A}

    revoke_source(ledger, "svc/a", "2")
    assert ledger.believed(A, "depends_on") == [], "its last origin gone, the fact ends"
    correction = list(ledger.store.corrections("acme"))[-1]
    assert (correction.cause, correction.old_edge_ids, correction.new_edge_ids) == (
        "revoke_source", (first.edge_id,), ())


def test_a_fact_two_records_state_survives_one_records_snapshot_omitting_it() -> None:
    ledger = Ledger()
    ledger.at("2026-03-01T00:00:00Z")
    for record in ("rel/x", "rel/y"):
        ledger.change("cmdb", record, mode="snapshot").asserts(A, "depends_on", C, evidence=f"{record} says so").send()
    (shared,) = ledger.believed(A, "depends_on")
    for _ in range(3):  # both records resend unchanged snapshots
        for record in ("rel/x", "rel/y"):
            ledger.change("cmdb", record, mode="snapshot").asserts(A, "depends_on", C, evidence=f"{record} says so"
                                                                    ).send()
    assert ledger.believed(A, "depends_on") == [shared], "resending changes nothing"
    assert (ledger.counts.versions_appended, ledger.counts.versions_closed, ledger.counts.corrections) == (1, 0, 0)

    ledger.at("2026-04-01T00:00:00Z").change("cmdb", "rel/y", mode="snapshot", version="2",
                                             detected_at="2026-04-01T00:00:00Z").send()
    (believed,) = ledger.believed(A, "depends_on")
    assert believed.edge_id == shared.edge_id, "rel/x still states it: no change of belief"
    assert ledger.counts.corrections == 0
    april = parse_micros("2026-04-01T00:00:00Z")
    assert [(o.record, o.valid_to, o.tx_to is None) for o in ledger.origins(believed)] == [
        ("rel/x", None, True), ("rel/y", None, False), ("rel/y", april, True)], \
        "rel/y's statement ends from 1 April: the change of origins is kept"

    ledger.at("2026-05-01T00:00:00Z").change("cmdb", "rel/x", mode="snapshot", version="2",
                                             detected_at="2026-05-01T00:00:00Z").send()
    (left,) = ledger.believed(A, "depends_on")
    assert (left.valid_from, left.valid_to) == (None, parse_micros("2026-05-01T00:00:00Z")), \
        "the last statement gone from 1 May, the fact ends there"
    assert ledger.counts.corrections == 1


def test_another_system_states_the_same_edge_in_a_version_of_its_own() -> None:
    ledger = Ledger()
    ledger.change("cmdb", "svc/a").asserts(A, "depends_on", B).send()
    ledger.change("discovery", "scan/1").asserts(A, "depends_on", B).send()
    assert sorted(stating(ledger, A, B)) == [("cmdb", "svc/a", "1"), ("discovery", "scan/1", "1")]
    assert len(ledger.believed(A, "depends_on")) == 2, "one version per authority"
    revoke_source(ledger, "svc/a", "1")
    assert stating(ledger, A, B) == [("discovery", "scan/1", "1")], "revoking one system leaves the other's"
    ledger.change("discovery", "scan/1").retracts(A, "depends_on", B, None).send()
    assert stating(ledger, A, B) == []


def test_a_past_known_at_sees_the_origins_of_its_time() -> None:
    ledger = Ledger()
    ledger.at("2026-03-01T00:00:00Z").change("cmdb", "svc/a", version="1").asserts(A, "depends_on", B).send()
    ledger.at("2026-03-02T00:00:00Z").change("cmdb", "svc/a", version="2").asserts(A, "depends_on", B).send()
    ledger.at("2026-03-03T00:00:00Z")
    revoke_source(ledger, "svc/a", "1")

    def origins(known_at: str) -> list[tuple[str | None, str | None]]:
        (version,) = ledger.engine.history("acme", A, parse_micros(known_at), None, "depends_on",
                                           ledger.store.adjacent_any).versions
        return [(o.source.version, o.tx_to) for o in version.origins]

    assert origins("2026-03-01T12:00:00Z") == [("1", None)]
    assert origins("2026-03-02T12:00:00Z") == [("1", None), ("2", None)]
    assert origins(FAR_FUTURE) == [("1", "2026-03-03T00:00:00Z"), ("2", None)]


BOUNDS = st.none() | st.integers(-5, 5)


def _interval(a: int | None, b: int | None) -> Interval:
    if a is not None and b is not None and a >= b:
        return (b, a + 1) if a != b else (a, a + 1)
    return (a, b)


intervals = st.builds(_interval, BOUNDS, BOUNDS)


@given(whole=intervals, parts=st.lists(intervals, max_size=4))
def test_what_statements_cover_and_leave_uncovered_partition_the_piece(whole: Interval, parts: list[Interval]) -> None:
    def holds(interval: Interval, at: int) -> bool:
        return (interval[0] is None or interval[0] <= at) and (interval[1] is None or at < interval[1])

    inside, gaps = covered(whole, parts), uncovered(whole, parts)
    for at in range(-7, 8):
        expected = holds(whole, at) and any(holds(part, at) for part in parts)
        assert any(holds(i, at) for i in inside) == expected
        assert any(holds(g, at) for g in gaps) == (holds(whole, at) and not expected)
    assert all(a[1] is not None and b[0] is not None and a[1] < b[0] for a, b in itertools.pairwise(inside)), \
        "maximal stretches, in order, apart"
