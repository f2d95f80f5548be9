"""The pending overlay: an event sees the batch's earlier changes, and only those of the edge it asks about."""

from processors.model import EdgeVersion, Filing
from processors.pending import PendingLedger
from state.kv import MemoryKV
from state.store import LedgerStore
from tests.support.harness import Ledger


class _CountingVersions(dict):
    """The overlay's version table, counting the versions it looks up."""

    lookups = 0

    def __getitem__(self, key):
        self.lookups += 1
        return super().__getitem__(key)


def _version(edge_id: str, dst: str, record: str | None = "pol/SOC2", source_version: str = "1") -> EdgeVersion:
    return EdgeVersion(edge_id, "acme", "Policy:policy:SOC2", "applies_to", dst, None, None, 10, None, "policy",
                       record, source_version, "", 1.0, edge_id, (), "ev-1", None)


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


def test_what_a_record_says_now_reads_that_records_versions_only() -> None:
    """Every snapshot event asks what its record says now; a batch of them must not walk each other's versions."""
    pending = PendingLedger(LedgerStore(MemoryKV()), versions=_CountingVersions())
    for n in range(500):
        pending.append(_version(f"e{n}", f"Service:cmdb:S{n}", record=f"pol/P{n}"))
    pending.versions.lookups = 0

    says = pending.believed_from_record("acme", "policy", "pol/P42")
    assert [v.edge_id for v in says] == ["e42"]
    assert pending.versions.lookups == 1


def test_believed_by_source_sees_the_batch_by_system_and_record() -> None:
    pending = PendingLedger(LedgerStore(MemoryKV()))
    pending.append(_version("a1", "Service:cmdb:S1", record="pol/A", source_version="1"))
    pending.append(_version("a2", "Service:cmdb:S2", record="pol/A", source_version="2"))
    pending.append(_version("b1", "Service:cmdb:S3", record="pol/B", source_version="1"))
    pending.append(_version("n1", "Service:cmdb:S4", record=None, source_version="1"))
    pending.close(pending.versions[("acme", "b1")], 11)

    def ids(record: str | None) -> list[str]:
        return sorted(v.edge_id for v in pending.believed_by_source("acme", "policy", record))

    assert ids(None) == ["a1", "a2", "n1"]
    assert ids("pol/A") == ["a1", "a2"]
    assert pending.believed_by_source("acme", "hr", None) == []


def test_a_records_filings_are_the_stored_ones_then_the_batchs() -> None:
    store = LedgerStore(MemoryKV())
    first = PendingLedger(store)
    first.add_filing(Filing("acme", "cmdb", "svc/a", 5, "v2", "ev-2", (("e1", None, None),)))
    store.commit(first)
    pending = PendingLedger(store)
    pending.add_filing(Filing("acme", "cmdb", "svc/a", 9, "v2", "ev-3", revoked=True))
    pending.add_filing(Filing("acme", "cmdb", "svc/b", 9, "v1", "ev-3", revoked=True))
    assert [(f.tx, f.revoked) for f in pending.record_filings("acme", "cmdb", "svc/a")] == [(5, False), (9, True)]
    assert pending.record_filings("acme", "cmdb", "svc/c") == []


class _NoPointReads:
    """A store whose one-at-a-time re-delivery check fails the test: the batch must use what it recalled."""

    def __init__(self, store: LedgerStore) -> None:
        self.store = store

    def __getattr__(self, name: str):
        return getattr(self.store, name)

    def event_seen(self, tenant: str, event_id: str) -> bool:
        raise AssertionError(f"a point read for {tenant}/{event_id}")


def test_recalled_answers_serve_the_batchs_redelivery_checks() -> None:
    ledger = Ledger()
    ledger.change("cmdb", "svc/a", event_id="stored").asserts("Service:a", "depends_on", "Service:b").send()
    pending = PendingLedger(_NoPointReads(ledger.store))  # type: ignore[arg-type]
    pending.recall_seen([("acme", "stored"), ("acme", "new"), ("other", "stored")])

    assert pending.event_seen("acme", "stored")
    assert not pending.event_seen("acme", "new")
    assert not pending.event_seen("other", "stored"), "event ids are per tenant"
    pending.mark_seen("acme", "new", "applied")
    assert pending.event_seen("acme", "new"), "the batch's own events count too"
    assert pending.events_seen([("acme", "new"), ("acme", "stored"), ("acme", "never")]) == [True, True, False]


def test_an_event_not_recalled_is_read_from_the_store() -> None:
    ledger = Ledger()
    ledger.change("cmdb", "svc/a", event_id="stored").asserts("Service:a", "depends_on", "Service:b").send()
    pending = PendingLedger(ledger.store)
    pending.recall_seen([("acme", "other")])
    assert pending.event_seen("acme", "stored") and not pending.event_seen("acme", "other")
