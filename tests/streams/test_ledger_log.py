"""The log's version records carry exactly the contract's edge shape."""

from processors.queries import edge_out
from streams.ledger_log import decode_version, version_json
from tests.harness import Ledger


def test_log_records_match_the_contract_edge_and_round_trip(ledger: Ledger) -> None:
    ledger.at("2026-03-01T00:00:00Z").change("cmdb", "r1", version="7").asserts(
        "Service:cmdb:S1", "depends_on", "Service:cmdb:S2", "2025-01-01", evidence="calls it").send()
    (version,) = ledger.versions("Service:cmdb:S1", "depends_on")
    record = version_json(version)
    assert {k: v for k, v in record.items() if k != "detected_at_us"} == edge_out(version).model_dump(
        mode="json", exclude={"evidence_omitted", "corroborated_by"})
    assert decode_version(record) == version


def test_a_correction_too_large_for_one_record_is_sent_in_parts() -> None:
    """Revoking a whole source closes every version it asserted; the correction must still reach
    edge-corrections, in records the producer accepts, naming every id once."""
    import orjson

    from processors.model import Correction
    from streams.kafka_config import MAX_RECORD_BYTES
    from streams.ledger_log import CORRECTION_IDS_PER_RECORD, correction_records

    old = tuple(f"e{n:016x}" for n in range(CORRECTION_IDS_PER_RECORD * 2 + 5))
    new = tuple(f"e{n:016x}" for n in range(10**6, 10**6 + 7))
    correction = Correction("c1", "acme", "ev-9", 1_700_000_000_000_000, "revoke_source", old, new)

    parts = correction_records(correction)

    assert [(p["part"], p["parts"]) for p in parts] == [(1, 3), (2, 3), (3, 3)]
    assert len({p["record_id"] for p in parts}) == 3 and {p["correction_id"] for p in parts} == {"c1"}
    assert [e for p in parts for e in p["old_edge_ids"]] == list(old)
    assert [e for p in parts for e in p["new_edge_ids"]] == list(new)
    assert all(len(orjson.dumps(p)) < MAX_RECORD_BYTES / 4 for p in parts)
    [single] = correction_records(Correction("c2", "acme", "ev-1", 1, "assert", ("e1",), ("e2", "e3")))
    assert single["record_id"] == "c2" and "part" not in single
    assert (single["old_edge_ids"], single["new_edge_ids"]) == (("e1",), ("e2", "e3"))
