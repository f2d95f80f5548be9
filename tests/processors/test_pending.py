"""The pending overlay: an event sees the batch's earlier changes, and only those of the edge it asks about."""

from processors.model import EdgeVersion
from processors.pending import PendingLedger
from state.kv import MemoryKV
from state.store import LedgerStore


class _CountingVersions(dict):
    """The overlay's version table, counting the versions it looks up."""

    lookups = 0

    def __getitem__(self, key):
        self.lookups += 1
        return super().__getitem__(key)


def _version(edge_id: str, dst: str) -> EdgeVersion:
    return EdgeVersion(edge_id, "acme", "Policy:policy:SOC2", "applies_to", dst, None, None, 10, None, "policy",
                       "pol/SOC2", "1", "", 1.0, edge_id, (), "ev-1", None)


def test_believed_edge_sees_the_batchs_versions_of_that_edge_only() -> None:
    """A snapshot can assert thousands of edges from one source; each assertion must not walk the others
    (it made a 32,000-edge policy snapshot quadratic)."""
    pending = PendingLedger(LedgerStore(MemoryKV()), versions=_CountingVersions())
    for n in range(500):
        pending.append(_version(f"e{n}", f"Service:cmdb:S{n}"))
    closed_one = pending.close(pending.versions[("acme", "e7")], 11)
    pending.versions.lookups = 0

    believed = pending.believed_edge("acme", "Policy:policy:SOC2", "applies_to", "Service:cmdb:S3")
    assert [v.edge_id for v in believed] == ["e3"]
    assert pending.versions.lookups == 1
    assert pending.believed_edge("acme", "Policy:policy:SOC2", "applies_to", "Service:cmdb:S7") == []
    assert closed_one.tx_to == 11
    assert len(pending.believed_out("acme", "Policy:policy:SOC2", "applies_to")) == 499
