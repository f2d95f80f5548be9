"""Every version of a record that states a fact: revoking one version leaves what the others state."""

from typing import Any

from state.keys import pack
from tests.support.harness import Ledger

A, B, C = "Service:cmdb:A", "Service:cmdb:B", "Service:cmdb:C"


def revoke_source(ledger: Ledger, record: str | None, version: str | None, event_id: str) -> dict[str, Any]:
    source = {"system": "cmdb"} | ({"record": record} if record else {}) | ({"version": version} if version else {})
    return {"kind": "revoke_source", "event_id": event_id, "tenant": "acme", "source": source, "reason": "corrupt"}


def stated(ledger: Ledger, src: str = A) -> list[tuple[str, int | None, int | None]]:
    return sorted((v.dst, v.valid_from, v.valid_to) for v in ledger.believed(src, "depends_on"))


def two_versions(ledger: Ledger, mode: str = "snapshot") -> None:
    """svc/a v1 states A -> B; v2 of the same record states it again, unchanged."""
    ledger.change("cmdb", "svc/a", mode=mode, version="v1").asserts(A, "depends_on", B, "2025-01-01").send()
    ledger.change("cmdb", "svc/a", mode=mode, version="v2").asserts(A, "depends_on", B, "2025-01-01").send()


def test_revoking_the_first_version_keeps_what_the_second_still_states(ledger: Ledger) -> None:
    two_versions(ledger)
    before = ledger.believed(A, "depends_on")
    ledger.send(revoke_source(ledger, "svc/a", "v1", "rs-1"))
    assert ledger.believed(A, "depends_on") == before, "still stated by v2: no version closed or appended"
    assert ledger.counts.corrections == 0


def test_revoking_the_second_version_keeps_what_the_first_states(ledger: Ledger) -> None:
    two_versions(ledger)
    ledger.send(revoke_source(ledger, "svc/a", "v2", "rs-1"))
    assert [dst for dst, _, _ in stated(ledger)] == [B]
    assert ledger.counts.corrections == 0


def test_revoking_both_versions_ends_the_fact_with_one_correction(ledger: Ledger) -> None:
    two_versions(ledger)
    [piece] = ledger.believed(A, "depends_on")
    ledger.send(revoke_source(ledger, "svc/a", "v1", "rs-1"), revoke_source(ledger, "svc/a", "v2", "rs-2"))
    assert ledger.believed(A, "depends_on") == []
    [correction] = ledger.store.corrections("acme")
    assert (correction.event_id, correction.cause) == ("rs-2", "revoke_source")
    assert correction.old_edge_ids == (piece.edge_id,) and correction.new_edge_ids == ()


def test_a_delta_restating_a_fact_is_a_statement_too(ledger: Ledger) -> None:
    two_versions(ledger, mode="delta")
    ledger.send(revoke_source(ledger, "svc/a", "v1", "rs-1"))
    assert [dst for dst, _, _ in stated(ledger)] == [B]
    ledger.send(revoke_source(ledger, "svc/a", "v2", "rs-2"))
    assert stated(ledger) == []


def test_a_version_that_states_part_of_a_fact_keeps_that_part(ledger: Ledger) -> None:
    """v2 states A -> B only from June: once v1 is revoked, the fact holds from June only."""
    ledger.change("cmdb", "svc/a", version="v1").asserts(A, "depends_on", B, "2025-01-01").send()
    ledger.change("cmdb", "svc/a", version="v2").asserts(A, "depends_on", B, "2025-06-01").send()
    [piece] = ledger.believed(A, "depends_on")
    ledger.send(revoke_source(ledger, "svc/a", "v1", "rs-1"))
    [left] = ledger.believed(A, "depends_on")
    assert (left.valid_from, left.valid_to) == (ledger_micros("2025-06-01"), None)
    assert (left.source_record, left.source_version, left.origin) == ("svc/a", "v1", piece.origin)
    [correction] = ledger.store.corrections("acme")
    assert correction.old_edge_ids == (piece.edge_id,) and correction.new_edge_ids == (left.edge_id,)


def test_a_remainder_keeps_the_statements_of_the_fact_it_comes_from(ledger: Ledger) -> None:
    """v2 restates the fact; v3 says March otherwise, which cuts it; the remainders are v2's too."""
    two_versions(ledger)
    ledger.change("cmdb", "svc/a", version="v3").asserts(A, "depends_on", B, "2025-03-01", "2025-04-01",
                                                         evidence="other").send()
    ledger.send(revoke_source(ledger, "svc/a", "v1", "rs-1"))
    march, april = ledger_micros("2025-03-01"), ledger_micros("2025-04-01")
    assert stated(ledger) == [(B, ledger_micros("2025-01-01"), march), (B, march, april), (B, april, None)]


def test_a_version_revoked_before_it_states_a_fact_again_states_it_anew(ledger: Ledger) -> None:
    two_versions(ledger)
    ledger.send(revoke_source(ledger, "svc/a", "v2", "rs-1"))
    ledger.change("cmdb", "svc/a", mode="snapshot", version="v2").asserts(A, "depends_on", B, "2025-01-01").send()
    ledger.send(revoke_source(ledger, "svc/a", "v1", "rs-2"))
    assert [dst for dst, _, _ in stated(ledger)] == [B], "v2's statement after its revocation holds"


def test_a_version_named_without_its_record_is_revoked_in_every_record(ledger: Ledger) -> None:
    two_versions(ledger)
    ledger.change("cmdb", "svc/c", version="v1").asserts(A, "depends_on", C, "2025-01-01").send()
    ledger.send(revoke_source(ledger, None, "v1", "rs-1"))
    assert [dst for dst, _, _ in stated(ledger)] == [B], "svc/a's v2 still states A -> B; nothing states A -> C"


def test_revoking_a_whole_record_ends_every_version_of_it(ledger: Ledger) -> None:
    two_versions(ledger)
    ledger.send(revoke_source(ledger, "svc/a", None, "rs-1"))
    assert stated(ledger) == []


def test_the_same_events_in_one_batch_do_the_same(ledger: Ledger) -> None:
    events = [
        ledger_change(ledger, "v1"), ledger_change(ledger, "v2"), revoke_source(ledger, "svc/a", "v1", "rs-1"),
    ]
    ledger.send(*events)
    assert [dst for dst, _, _ in stated(ledger)] == [B]
    other = Ledger()
    for event in events:
        other.send(event)
    assert stated(other) == stated(ledger)


def ledger_change(ledger: Ledger, version: str) -> dict[str, Any]:
    builder = ledger.change("cmdb", "svc/a", mode="snapshot", version=version)
    return builder.asserts(A, "depends_on", B, "2025-01-01").event


def ledger_micros(text: str) -> int:
    from schemas.times import parse_micros

    return parse_micros(text)


def test_a_version_saying_a_fact_again_after_its_revocation_makes_a_statement_of_its_own(ledger: Ledger) -> None:
    """v1 made the fact and is revoked (v2 keeps it); v1 then says it again: revoking v2 leaves v1's new word."""
    two_versions(ledger)
    ledger.send(revoke_source(ledger, "svc/a", "v1", "rs-1"))
    ledger.change("cmdb", "svc/a", mode="snapshot", version="v1").asserts(A, "depends_on", B, "2025-01-01").send()
    ledger.send(revoke_source(ledger, "svc/a", "v2", "rs-2"))
    assert [dst for dst, _, _ in stated(ledger)] == [B]
    ledger.send(revoke_source(ledger, "svc/a", "v1", "rs-3"))
    assert stated(ledger) == []


def test_a_closed_versions_statements_are_those_filed_while_it_was_believed() -> None:
    from processors.model import EdgeVersion, Filing
    from processors.statements import RecordStatements

    piece = EdgeVersion("e1", "acme", A, "depends_on", B, None, None, 10, 20, "cmdb", "svc/a", "v1", "", 1.0, "e1",
                        (), "ev-1", None)
    filings = [Filing("acme", "cmdb", "svc/a", 15, "v2", "ev-2", (("e1", None, None),)),
               Filing("acme", "cmdb", "svc/a", 25, "v3", "ev-3", (("e1", None, None),)),
               Filing("acme", "cmdb", "svc/a", 30, "v1", "ev-4", revoked=True)]
    statements = RecordStatements("svc/a", filings)
    assert [(s.version, s.withdrawn_at) for s in statements.of(piece, 10)] == [("v1", 30), ("v2", None), ("v3", None)]
    assert [(s.version, s.withdrawn_at) for s in statements.of(piece, 10, until=20)] == [("v1", None), ("v2", None)]


def both_records(ledger: Ledger) -> None:
    """Records rel/x and rel/y of one source both state A -> C in their snapshots."""
    for record in ("rel/x", "rel/y"):
        ledger.change("cmdb", record, mode="snapshot", version="1").asserts(A, "depends_on", C, "2025-01-01").send()


def test_another_records_statement_of_a_fact_joins_it(ledger: Ledger) -> None:
    both_records(ledger)
    [piece] = ledger.believed(A, "depends_on")
    assert piece.source_record == "rel/x", "the record that made it"
    assert ledger.counts.corrections == 0, "the second statement closed and appended nothing"


def test_one_records_omission_leaves_the_edge_the_other_still_states(ledger: Ledger) -> None:
    both_records(ledger)
    [piece] = ledger.believed(A, "depends_on")
    ledger.change("cmdb", "rel/y", mode="snapshot", version="2").send()
    assert ledger.believed(A, "depends_on") == [piece]
    ledger.change("cmdb", "rel/x", mode="snapshot", version="2", detected_at="2026-02-01T00:00:00Z").send()
    [left] = ledger.believed(A, "depends_on")
    assert (left.valid_from, left.valid_to) == (ledger_micros("2025-01-01"), ledger_micros("2026-02-01"))
    [correction] = ledger.store.corrections("acme")
    assert correction.old_edge_ids == (piece.edge_id,) and correction.new_edge_ids == (left.edge_id,)


def test_the_first_records_omission_leaves_the_edge_to_the_record_that_joined_it(ledger: Ledger) -> None:
    both_records(ledger)
    [piece] = ledger.believed(A, "depends_on")
    ledger.change("cmdb", "rel/x", mode="snapshot", version="2").send()
    assert ledger.believed(A, "depends_on") == [piece], "rel/y still states it"
    ledger.send(revoke_source(ledger, "rel/y", None, "rs-1"))
    assert [(v.valid_from, v.valid_to) for v in ledger.believed(A, "depends_on")] == [
        (ledger_micros("2025-01-01"), ledger_micros("2026-01-01"))], "rel/x said it until its omission"


def test_records_resending_a_shared_edge_change_nothing(ledger: Ledger) -> None:
    both_records(ledger)
    [piece] = ledger.believed(A, "depends_on")
    for version in ("2", "3"):
        for record in ("rel/x", "rel/y"):
            ledger.change("cmdb", record, mode="snapshot", version=version).asserts(
                A, "depends_on", C, "2025-01-01").send()
    assert ledger.believed(A, "depends_on") == [piece] and ledger.counts.corrections == 0


def test_revoking_one_record_keeps_what_the_other_states_and_both_ends_it(ledger: Ledger) -> None:
    both_records(ledger)
    [piece] = ledger.believed(A, "depends_on")
    ledger.send(revoke_source(ledger, "rel/x", None, "rs-1"))
    assert ledger.believed(A, "depends_on") == [piece]
    ledger.send(revoke_source(ledger, "rel/y", "1", "rs-2"))
    assert ledger.believed(A, "depends_on") == []
    [correction] = ledger.store.corrections("acme")
    assert correction.event_id == "rs-2" and correction.old_edge_ids == (piece.edge_id,)


def test_history_lists_every_records_statements(ledger: Ledger) -> None:
    from schemas.times import parse_micros

    ledger.change("cmdb", "rel/x", mode="snapshot", version="1").asserts(A, "depends_on", C, "2025-01-01",
                                                                        evidence="x calls C").send()
    ledger.change("cmdb", "rel/y", mode="snapshot", version="1").asserts(A, "depends_on", C, "2025-01-01",
                                                                        evidence="y calls C").send()
    ledger.change("cmdb", "rel/y", mode="snapshot", version="2").send()
    history = ledger.engine.history("acme", A, parse_micros("2100-01-01"), None, "depends_on", ledger.store)
    [version] = history.versions
    assert [(s.record, s.version, s.evidence, s.valid_to) for s in version.stated_by or []] == [
        ("rel/x", "1", "x calls C", None), ("rel/y", "1", "y calls C", "2026-01-01T00:00:00Z")], \
        "rel/y said it, in its own words, until its snapshot omitted it"


def test_revoking_an_edge_id_withdraws_its_records_word_and_leaves_another_records(ledger: Ledger) -> None:
    both_records(ledger)
    [piece] = ledger.believed(A, "depends_on")
    ledger.send({"kind": "revoke", "event_id": "rv-1", "tenant": "acme", "edge_id": piece.edge_id, "reason": "bad"})
    assert ledger.believed(A, "depends_on") == [piece], "rel/y states it too"
    ledger.send(revoke_source(ledger, "rel/y", None, "rs-1"))
    assert ledger.believed(A, "depends_on") == []


def test_the_record_that_made_a_fact_states_it_again_after_its_omission(ledger: Ledger) -> None:
    """rel/x omits the edge (rel/y keeps it), then says it again at the same version: when rel/y then
    omits it too, rel/x's new word holds it."""
    both_records(ledger)
    ledger.change("cmdb", "rel/x", mode="snapshot", version="1", detected_at="2026-02-01T00:00:00Z").send()
    ledger.change("cmdb", "rel/x", mode="snapshot", version="1").asserts(A, "depends_on", C, "2025-01-01").send()
    ledger.change("cmdb", "rel/y", mode="snapshot", version="1", detected_at="2026-03-01T00:00:00Z").send()
    assert [(v.valid_from, v.valid_to) for v in ledger.believed(A, "depends_on")] == [
        (ledger_micros("2025-01-01"), None)]


def test_a_record_joins_a_fact_once_however_often_it_resends_it(ledger: Ledger) -> None:
    both_records(ledger)
    for version in ("2", "3"):
        ledger.change("cmdb", "rel/y", mode="snapshot", version=version).asserts(
            A, "depends_on", C, "2025-01-01").send()
    assert len(list(ledger.kv.scan(b"O" + pack("acme", "l")))) == 1


def test_a_record_wording_its_fact_otherwise_keeps_the_other_records_statements(ledger: Ledger) -> None:
    """rel/y joined rel/x's A -> C; rel/x then gives other evidence (a new version of the fact) and later
    omits it: rel/y still states it, so it stays."""
    both_records(ledger)
    ledger.change("cmdb", "rel/x", mode="snapshot", version="2").asserts(A, "depends_on", C, "2025-01-01",
                                                                        evidence="reworded").send()
    [reworded] = ledger.believed(A, "depends_on")
    assert reworded.evidence == "reworded" and ledger.counts.corrections == 1
    ledger.change("cmdb", "rel/x", mode="snapshot", version="3").send()
    assert ledger.believed(A, "depends_on") == [reworded], "rel/y's statement carried over to the new fact"
    ledger.send(revoke_source(ledger, "rel/y", None, "rs-1"))
    assert [(v.valid_from, v.valid_to) for v in ledger.believed(A, "depends_on")] == [
        (ledger_micros("2025-01-01"), ledger_micros("2026-01-01"))]
