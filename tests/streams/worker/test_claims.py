"""The last claim of each partition wins, and only the group's own claims count."""

from __future__ import annotations

from streams.worker.claims import claim_record, last_claims


def test_the_last_claim_of_each_partition_of_the_group_wins() -> None:
    records = [
        claim_record("ledger", 0, "state-a", "w1"),
        claim_record("ledger", 1, "state-a", "w1"),
        claim_record("other-group", 0, "state-x", "w9"),
        claim_record("ledger", 0, "state-b", "w2"),
    ]
    assert last_claims(records, "ledger") == {0: "state-b", 1: "state-a"}
    assert last_claims(records, "other-group") == {0: "state-x"}
    assert last_claims([], "ledger") == {}
