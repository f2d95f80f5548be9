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
