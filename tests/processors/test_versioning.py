"""Versioning rules: snapshots, retractions, revocations, cardinality per authority, re-delivery."""

import pytest

from processors.query_requests import parse_edge_allowlist
from tests.support.harness import Ledger

S1, S2, S3 = "Service:cmdb:S1", "Service:cmdb:S2", "Service:cmdb:S3"
C1, D1 = "Component:cmdb:C1", "Document:wiki:D1"
ANA, PLAT, FIN = "Team:hr:T-ANA", "Team:hr:T-PLAT", "Team:hr:T-FIN"


def dependencies(ledger: Ledger, src: str, valid_at: str, known_at: str = "2100-01-01") -> set[str]:
    return {v.dst for v in ledger.versions(src, "depends_on") if v.visible(*_micros(valid_at, known_at))}


def _micros(*texts: str) -> tuple[int, ...]:
    from schemas.times import parse_micros

    return tuple(parse_micros(t) for t in texts)


def test_snapshot_retracts_what_the_record_stopped_saying(ledger: Ledger) -> None:
    ledger.at("2026-01-01T00:00:00Z").change("cmdb", "svc/S1", mode="snapshot").asserts(
        S1, "depends_on", S2, "2025-01-01").asserts(S1, "depends_on", S3, "2025-01-01").send()
    ledger.at("2026-03-01T00:00:00Z").change("cmdb", "svc/S1", mode="snapshot",
                                             detected_at="2026-02-15T00:00:00Z").asserts(
        S1, "depends_on", S2, "2025-01-01").send()
    assert dependencies(ledger, S1, "2026-02-01") == {S2, S3}
    assert dependencies(ledger, S1, "2026-02-20") == {S2}
    assert dependencies(ledger, S1, "2026-02-20", known_at="2026-02-01") == {S2, S3}
    assert ledger.counts.corrections == 1


def test_a_snapshot_withdraws_only_its_own_records_statements(ledger: Ledger) -> None:
    """ci/S1 states C1 -> S1 from 1 March too; ci/C1's later snapshot omits the edge from 1 February.
    What ci/C1 said until then holds, and from March ci/S1 still states it: only February ends."""
    ledger.at("2026-01-10T00:00:00Z").change("cmdb", "ci/C1", mode="snapshot", detected_at="2026-01-10T00:00:00Z"
                                             ).asserts(C1, "depends_on", S1, "2026-01-01").send()
    ledger.change("cmdb", "ci/S1", mode="snapshot", detected_at="2026-03-01T00:00:00Z").asserts(
        C1, "depends_on", S1, "2026-03-01").send()
    [piece] = ledger.believed(C1, "depends_on")
    ledger.at("2026-04-01T00:00:00Z").change("cmdb", "ci/C1", mode="snapshot", version="2",
                                             detected_at="2026-02-01T00:00:00Z").send()
    pieces = sorted((v.valid_from, v.valid_to, v.source_record, v.edge_id) for v in ledger.believed(C1, "depends_on"))
    jan, feb, mar = _micros("2026-01-01", "2026-02-01", "2026-03-01")
    assert [p[:3] for p in pieces] == [(jan, feb, "ci/C1"), (mar, None, "ci/C1")], "ci/C1 made the fact"
    assert {r.entity for r in ledger.query("dependents-of", S1, valid_at="2026-06-01").results} == {C1}
    assert dependencies(ledger, C1, "2026-02-15") == set()
    correction = list(ledger.store.corrections("acme"))[-1]
    assert correction.old_edge_ids == (piece.edge_id,) and correction.new_edge_ids == tuple(p[3] for p in pieces)


def test_a_delta_retraction_ends_the_edge_whichever_record_of_the_authority_said_it(ledger: Ledger) -> None:
    ledger.change("cmdb", "ci/C1").asserts(C1, "depends_on", S1, "2026-01-01").send()
    ledger.change("cmdb", "ci/S1").asserts(C1, "depends_on", S1, "2026-03-01").send()
    ledger.change("cmdb", "ci/C1").retracts(C1, "depends_on", S1, "2026-02-01").send()
    assert dependencies(ledger, C1, "2026-01-15") == {S1}
    assert dependencies(ledger, C1, "2026-06-01") == set(), "a retraction acts within the authority, any record"


DOCUMENTED, DEPRECATED = "is documented by", "is deprecated by"


def wordings(ledger: Ledger, src: str = S1, dst: str = D1, valid_at: str = "2026-06-01") -> set[str]:
    when = _micros(valid_at, "2100-01-01")
    return {v.phrase for v in ledger.versions(src, "other") if v.dst == dst and v.visible(*when)}


def test_other_edges_with_different_wordings_are_different_edges(ledger: Ledger) -> None:
    """An unmapped relationship is kept with the source's wording: a second wording does not replace the first."""
    ledger.change("wiki", "p/1").asserts(S1, "other", D1, "2026-01-01", phrase=DOCUMENTED).send()
    ledger.change("wiki", "p/2").asserts(S1, "other", D1, "2026-01-01", phrase=DEPRECATED).send()
    assert wordings(ledger) == {DOCUMENTED, DEPRECATED}
    assert ledger.counts.corrections == 0 and ledger.counts.versions_closed == 0
    result = ledger.query("traverse", S1, valid_at="2026-06-01", edges=parse_edge_allowlist("other:out"))
    assert {e.phrase for e in result.edges.values()} == {DOCUMENTED, DEPRECATED}
    ledger.change("wiki", "p/1").asserts(S1, "other", D1, "2026-01-01", phrase=DOCUMENTED).send()
    assert ledger.counts.versions_appended == 2, "restating one wording changes nothing"
    deprecated = [v for v in ledger.believed(S1, "other") if v.phrase == DEPRECATED]
    ledger.change("wiki", "p/1").asserts(S1, "other", D1, "2026-03-01", "2026-04-01", evidence="new",
                                         phrase=DOCUMENTED).send()
    pieces = sorted((v.valid_from, v.evidence) for v in ledger.believed(S1, "other") if v.phrase == DOCUMENTED)
    assert [evidence for _, evidence in pieces] == ["", "new", ""], "a new interval splits its own wording"
    assert [v for v in ledger.believed(S1, "other") if v.phrase == DEPRECATED] == deprecated, "and no other"


def test_a_snapshot_retracts_the_wording_it_omits_and_keeps_the_one_it_states(ledger: Ledger) -> None:
    ledger.change("wiki", "p/1", mode="snapshot").asserts(S1, "other", D1, phrase=DOCUMENTED).asserts(
        S1, "other", D1, phrase=DEPRECATED).send()
    documented = {v.edge_id for v in ledger.believed(S1, "other") if v.phrase == DOCUMENTED}
    ledger.change("wiki", "p/1", mode="snapshot", detected_at="2026-03-01T00:00:00Z").asserts(
        S1, "other", D1, phrase=DOCUMENTED).send()
    assert wordings(ledger, valid_at="2026-02-01") == {DOCUMENTED, DEPRECATED}
    assert wordings(ledger) == {DOCUMENTED}
    assert {v.edge_id for v in ledger.believed(S1, "other") if v.phrase == DOCUMENTED} == documented


def test_a_retraction_with_a_phrase_ends_that_wording_and_one_without_ends_every_wording(ledger: Ledger) -> None:
    ledger.change("wiki", "p/1").asserts(S1, "other", D1, phrase=DOCUMENTED).asserts(
        S1, "other", D1, phrase=DEPRECATED).asserts(S1, "other", S2, phrase=DEPRECATED).send()
    ledger.change("wiki", "p/1").retracts(S1, "other", D1, "2026-03-01", phrase=DEPRECATED).send()
    assert wordings(ledger, valid_at="2026-02-01") == {DOCUMENTED, DEPRECATED}
    assert wordings(ledger) == {DOCUMENTED}
    ledger.change("wiki", "p/2").retracts(S1, "other", D1, "2026-05-01").send()
    assert wordings(ledger, valid_at="2026-04-01") == {DOCUMENTED}
    assert wordings(ledger) == set()
    assert wordings(ledger, dst=S2) == {DEPRECATED}, "only the named edge's wordings end"


def test_restating_the_same_snapshot_changes_nothing(ledger: Ledger) -> None:
    for _ in range(3):
        ledger.change("cmdb", "svc/S1", mode="snapshot").asserts(S1, "depends_on", S2, "2025-01-01").send()
    assert len(ledger.versions(S1, "depends_on")) == 1
    assert ledger.counts.corrections == 0


def test_retraction_closes_valid_time_from_when_it_stopped(ledger: Ledger) -> None:
    ledger.at("2026-01-01T00:00:00Z").change("cmdb").asserts(S1, "depends_on", S2, "2025-01-01", evidence="e1").send()
    ledger.at("2026-02-01T00:00:00Z").change("cmdb").retracts(S1, "depends_on", S2, "2025-06-01").send()
    assert dependencies(ledger, S1, "2025-05-31") == {S2}
    assert dependencies(ledger, S1, "2025-06-01") == set()
    (remainder,) = ledger.believed(S1, "depends_on")
    assert remainder.evidence == "e1"


def test_a_source_cannot_retract_what_another_source_asserted(ledger: Ledger) -> None:
    ledger.change("cmdb").asserts(S1, "depends_on", S2).send()
    ledger.change("wiki").retracts(S1, "depends_on", S2, None).send()
    assert dependencies(ledger, S1, "2026-01-01") == {S2}


def test_assertion_inside_a_known_interval_splits_it_and_provenance_follows_each_piece(ledger: Ledger) -> None:
    ledger.change("cmdb", "r1", version="1").asserts(S1, "depends_on", S2, "2025-01-01", evidence="old").send()
    ledger.change("cmdb", "r1", version="2").asserts(S1, "depends_on", S2, "2025-03-01", "2025-04-01",
                                                    evidence="new").send()
    pieces = sorted(ledger.believed(S1, "depends_on"), key=lambda v: v.valid_from)
    assert [(v.evidence, v.source_version) for v in pieces] == [("old", "1"), ("new", "2"), ("old", "1")]
    assert pieces[0].valid_to == pieces[1].valid_from and pieces[1].valid_to == pieces[2].valid_from


def test_single_valued_relationship_closes_only_the_same_authoritys_value(ledger: Ledger) -> None:
    ledger.change("cmdb").asserts(S1, "owned_by", ANA, None).send()
    ledger.change("finance").asserts(S1, "owned_by", FIN, "2026-01-01").send()
    ledger.change("cmdb").asserts(S1, "owned_by", PLAT, "2026-04-01").send()
    assert ledger.owners(S1, valid_at="2025-06-01") == {ANA}
    assert ledger.owners(S1, valid_at="2026-02-01") == {ANA, FIN}
    assert ledger.owners(S1, valid_at="2026-05-01") == {PLAT, FIN}
    conflicts = [i for i in ledger.store.review_items("acme") if i.category == "cardinality_conflict"]
    assert len(conflicts) == 2, "each competing assertion from another source is flagged, never resolved"
    assert ledger.store.review_count("acme") == len(list(ledger.store.review_items("acme")))


@pytest.mark.parametrize(("fin_from", "plat_from", "flagged_values"), [
    ("2026-01-01", "2026-03-01", [FIN, PLAT]),  # PLAT cuts FIN's value to Jan-Mar: both still compete
    ("2026-03-01", "2026-01-01", [PLAT]),  # PLAT covers FIN's value whole: nothing of it competes
])
def test_a_conflict_names_what_its_event_left_of_the_value(ledger: Ledger, fin_from: str, plat_from: str,
                                                            flagged_values: list[str]) -> None:
    ledger.change("cmdb").asserts(S1, "owned_by", ANA).send()
    ledger.change("hr").asserts(S1, "owned_by", FIN, fin_from).asserts(S1, "owned_by", PLAT, plat_from).send()
    believed = {v.edge_id: v for v in ledger.believed(S1, "owned_by")}
    conflicts = [i for i in ledger.store.review_items("acme") if i.category == "cardinality_conflict"]
    named_values = [believed[i].dst if (i := item.details["new_edge_id"]) in believed else f"{i}, not stored"
                    for item in conflicts]
    assert sorted(named_values) == sorted(flagged_values), "review items come in review-id order"
    named = [[believed[edge_id] for edge_id in item.details["new_edge_ids"]] for item in conflicts]
    assert [versions[0].edge_id for versions in named] == [item.details["new_edge_id"] for item in conflicts]
    assert all(v.authority == "hr" for versions in named for v in versions)
    assert ledger.counts.conflicts_flagged == len(flagged_values)


def test_revoke_closes_the_fact_and_every_remainder_of_it(ledger: Ledger) -> None:
    ledger.change("cmdb").asserts(S1, "depends_on", S2, "2025-01-01").send()
    ledger.change("cmdb").asserts(S1, "depends_on", S2, "2025-03-01", "2025-04-01", evidence="x").send()
    first = next(v for v in ledger.versions(S1, "depends_on") if v.tx_to is not None)
    ledger.send({"kind": "revoke", "event_id": "rv-1", "tenant": "acme", "edge_id": first.edge_id,
                 "reason": "bad extraction"})
    believed = ledger.believed(S1, "depends_on")
    assert [v.evidence for v in believed] == ["x"], "only the later, independent assertion survives"
    correction = list(ledger.store.corrections("acme"))[-1]
    assert correction.cause == "revoke" and correction.new_edge_ids == ()


def test_revoke_source_closes_every_edge_of_that_record_version(ledger: Ledger) -> None:
    ledger.change("cmdb", "svc/S1", version="7").asserts(S1, "depends_on", S2).asserts(S1, "depends_on", S3).send()
    ledger.change("cmdb", "svc/S9", version="7").asserts(S2, "depends_on", S3).send()
    ledger.send({"kind": "revoke_source", "event_id": "rs-1", "tenant": "acme",
                 "source": {"system": "cmdb", "record": "svc/S1", "version": "7"}, "reason": "wrong record"})
    assert ledger.believed(S1, "depends_on") == []
    assert len(ledger.believed(S2, "depends_on")) == 1


def test_redelivery_is_a_no_op(ledger: Ledger) -> None:
    event = ledger.change("cmdb", event_id="dup-1").asserts(S1, "depends_on", S2).send()
    before = list(ledger.kv.scan(b""))
    ledger.send(event, event)
    assert ledger.counts.duplicates == 2
    assert [k for k, _ in ledger.kv.scan(b"")] == [k for k, _ in before]


def test_transaction_time_strictly_increases_even_if_the_clock_goes_back(ledger: Ledger) -> None:
    ledger.at("2026-05-01T00:00:00Z").change("cmdb").asserts(S1, "depends_on", S2).send()
    ledger.at("2026-01-01T00:00:00Z").change("cmdb").asserts(S1, "depends_on", S3).send()
    first, second = sorted(ledger.versions(S1, "depends_on"), key=lambda v: v.dst)
    assert second.tx_from > first.tx_from


def test_tenants_are_isolated() -> None:
    ledger = Ledger()
    ledger.change("cmdb").asserts(S1, "owned_by", ANA).send()
    other = Ledger(kv=ledger.kv, tenant="globex")
    other.change("cmdb").asserts(S1, "owned_by", PLAT).send()
    assert ledger.owners(S1) == {ANA}
    assert other.owners(S1) == {PLAT}


def test_ids_from_the_hashed_once_event_digest_are_derive_ids() -> None:
    """``Versioner`` hashes the event's part of its ids once; the ids must stay ``derive_id``'s, so that
    replaying the same events yields the same ids as every earlier version of the ledger."""
    from processors.pending import PendingLedger
    from processors.versioning import Versioner, derive_id
    from processors.vocabulary import Vocabulary
    from schemas.ontology import default_ontology
    from state.kv import MemoryKV
    from state.store import LedgerStore

    vocabulary = Vocabulary(default_ontology())
    versioner = Versioner(PendingLedger(LedgerStore(MemoryKV())), vocabulary, "acme", "ev-\x00ü-7", 1)
    made = [versioner._next_id(prefix) for prefix in ("e", "e", "c", "r", "e")]
    assert made == [derive_id(prefix, "acme", "ev-\x00ü-7", str(n)) for n, prefix in enumerate("eecre", 1)]


def test_a_restatement_within_what_is_believed_changes_nothing(ledger: Ledger) -> None:
    """The same record states the same dependency again from a later start, then over a bounded stretch:
    it is already believed over all of it, so no version is closed or appended and no correction is
    emitted (before, each restatement split the piece and named new edge ids, which sent agents'
    answers to replay for nothing)."""
    ledger.change("cmdb", "svc/S1", version="1").asserts(S1, "depends_on", S2, "2025-01-01", evidence="calls").send()
    (believed,) = ledger.believed(S1, "depends_on")
    ledger.change("cmdb", "svc/S1", version="2").asserts(S1, "depends_on", S2, "2025-06-01", evidence="calls").send()
    ledger.change("cmdb", "svc/S1", version="3").asserts(
        S1, "depends_on", S2, "2025-07-01", "2025-08-01", evidence="calls").send()
    assert ledger.believed(S1, "depends_on") == [believed]
    assert ledger.counts.versions_appended == 1 and ledger.counts.versions_closed == 0
    assert ledger.counts.corrections == 0


def test_a_restatement_reaching_past_what_is_believed_adds_only_what_is_new(ledger: Ledger) -> None:
    """The believed stretch keeps its version; the stretches on either side are appended as one fact
    (one origin), with the restatement's provenance. Nothing believed is closed, so no correction."""
    ledger.change("cmdb", "svc/S1", version="1").asserts(
        S1, "depends_on", S2, "2025-06-01", "2025-09-01", evidence="calls").send()
    (first,) = ledger.believed(S1, "depends_on")
    ledger.change("cmdb", "svc/S1", version="2").asserts(
        S1, "depends_on", S2, "2025-01-01", "2025-10-01", evidence="calls").send()
    pieces = sorted(ledger.believed(S1, "depends_on"), key=lambda v: v.valid_from)
    assert [(v.valid_from, v.valid_to) for v in pieces] == [
        _micros("2025-01-01", "2025-06-01"), _micros("2025-06-01", "2025-09-01"), _micros("2025-09-01", "2025-10-01")]
    assert pieces[1] == first
    assert [v.source_version for v in pieces] == ["2", "1", "2"] and pieces[0].origin == pieces[2].origin
    assert ledger.counts.versions_closed == 0 and ledger.counts.corrections == 0
    ledger.send({"kind": "revoke", "event_id": "rv-1", "tenant": "acme", "edge_id": pieces[2].edge_id,
                 "reason": "the restatement was wrong"})
    assert ledger.believed(S1, "depends_on") == [first], "a revoke ends both pieces of the restatement"


def test_other_evidence_from_the_record_supersedes_and_another_record_joins(ledger: Ledger) -> None:
    ledger.change("cmdb", "svc/S1").asserts(S1, "depends_on", S2, "2025-01-01", "2025-09-01", evidence="calls").send()
    ledger.change("cmdb", "svc/S1").asserts(S1, "depends_on", S2, "2025-07-01", "2025-08-01", evidence="new").send()
    ledger.change("cmdb", "svc/S2").asserts(S1, "depends_on", S2, "2025-02-01", "2025-10-01", evidence="other").send()
    pieces = sorted((v.valid_from, v.evidence, v.source_record) for v in ledger.believed(S1, "depends_on"))
    assert [(evidence, record) for _, evidence, record in pieces] == [
        ("calls", "svc/S1"), ("new", "svc/S1"), ("calls", "svc/S1"), ("other", "svc/S2")], \
        "svc/S2 joins what svc/S1 states and adds only September"
    assert ledger.counts.corrections == 1


def test_an_unknown_start_covers_a_known_one_and_not_the_other_way_round(ledger: Ledger) -> None:
    ledger.change("cmdb", "svc/S1").asserts(S1, "depends_on", S2, None).send()
    ledger.change("cmdb", "svc/S1").asserts(S1, "depends_on", S2, "2025-01-01").send()
    assert ledger.counts.versions_appended == 1, "believed at every valid time already"
    ledger.change("cmdb", "svc/S3").asserts(S1, "depends_on", S3, "2025-01-01").send()
    ledger.change("cmdb", "svc/S3").asserts(S1, "depends_on", S3, None).send()
    assert sorted((v.valid_from or 0, v.valid_to or 0) for v in ledger.believed(S1, "depends_on") if v.dst == S3) == [
        (0, _micros("2025-01-01")[0]), (_micros("2025-01-01")[0], 0)]
    assert ledger.counts.corrections == 0


@pytest.mark.parametrize("cut_to", ["2025-02-01", "2025-01-15"])
def test_a_fact_cut_where_its_origin_was_by_the_same_event_keeps_one_stored_origin(ledger: Ledger, cut_to: str) -> None:
    """One event restates a dependency over more than is believed (two new pieces, one fact), then says
    something else over the start: the first piece, the fact's origin, is replaced whole or cut. The
    fact's surviving pieces still share one origin, and it is one of them, so a revoke ends them all."""
    ledger.change("cmdb", "r1").asserts(S1, "depends_on", S2, "2025-02-01", "2025-03-01", evidence="calls").send()
    (first,) = ledger.believed(S1, "depends_on")
    ledger.change("cmdb", "r1").asserts(S1, "depends_on", S2, "2025-01-01", "2025-04-01", evidence="calls").asserts(
        S1, "depends_on", S2, "2025-01-01", cut_to, evidence="other").send()
    believed = ledger.believed(S1, "depends_on")
    stored = {v.edge_id for v in believed}
    restated = [v for v in believed if v.evidence == "calls" and v != first]
    assert len(restated) == (1 if cut_to == "2025-02-01" else 2)
    assert {v.origin for v in restated} <= stored and len({v.origin for v in restated}) == 1
    assert sum(v.origin == v.edge_id for v in restated) == 1, "one piece is the origin: its lag is measured once"
    ledger.send({"kind": "revoke", "event_id": "rv-1", "tenant": "acme", "edge_id": restated[-1].edge_id,
                 "reason": "wrong"})
    assert {v.evidence for v in ledger.believed(S1, "depends_on")} == {"calls", "other"}
    assert [v for v in ledger.believed(S1, "depends_on") if v.evidence == "calls"] == [first]
