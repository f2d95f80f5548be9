"""The architecture's worked example: ownership moves on 1 April, the catalogue learns it on 3 May."""

from tests.support.harness import Ledger
from tests.support.scenarios import ANALYTICS, CONNECTOR, PLATFORM, late_correction


def test_three_questions_give_three_answers(ledger: Ledger) -> None:
    late_correction(ledger)
    assert ledger.owners(CONNECTOR) == {PLATFORM}
    assert ledger.owners(CONNECTOR, valid_at="2026-04-22", known_at="2026-12-01") == {PLATFORM}
    assert ledger.owners(CONNECTOR, valid_at="2026-04-22", known_at="2026-04-22") == {ANALYTICS}
    assert ledger.owners(CONNECTOR, valid_at="2026-03-15", known_at="2026-12-01") == {ANALYTICS}


def test_the_closed_version_is_kept_and_the_correction_names_old_and_new(ledger: Ledger) -> None:
    late_correction(ledger)
    versions = {v.edge_id: v for v in ledger.versions(CONNECTOR, "owned_by")}
    assert len(versions) == 3
    (a0,) = [v for v in versions.values() if v.tx_to is not None]
    assert a0.dst == ANALYTICS and a0.valid_from is None and a0.valid_to is None
    believed = sorted((v for v in versions.values() if v.tx_to is None), key=lambda v: v.dst)
    a1, p1 = believed
    assert (a1.dst, a1.valid_from, a1.valid_to) == (ANALYTICS, None, p1.valid_from)
    assert p1.dst == PLATFORM and p1.valid_to is None
    assert a1.tx_from == p1.tx_from == a0.tx_to
    assert a1.evidence == "owner: Analytics", "the remainder keeps the provenance of the fact it came from"
    assert a1.origin == a0.origin
    (correction,) = ledger.store.corrections("acme")
    assert correction.event_id == "cmdb-7781"
    assert correction.old_edge_ids == (a0.edge_id,)
    assert set(correction.new_edge_ids) == {a1.edge_id, p1.edge_id}


def test_unknown_start_is_never_replaced_by_ingestion_time(ledger: Ledger) -> None:
    late_correction(ledger)
    assert ledger.owners(CONNECTOR, valid_at="1999-01-01", known_at="2026-12-01") == {ANALYTICS}


def test_result_edges_carry_both_intervals(ledger: Ledger) -> None:
    late_correction(ledger)
    result = ledger.query("owners-of", CONNECTOR, valid_at="2026-04-22", known_at="2026-04-22")
    (edge,) = result.edges.values()
    assert edge.tx_to is None, "as known on 22 April the version was still believed"
    assert edge.valid_from is None
    assert result.disposition == "answer"
