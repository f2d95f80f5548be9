"""The ``O`` rows: what events filed about source records' statements, beside every other table."""

from processors.freshness import SourceSilence, SourceStatusTransition
from processors.model import Filing
from processors.pending import PendingLedger
from state.freshness_store import FreshnessStore
from state.kv import MemoryKV
from state.store import LedgerStore


def test_filings_and_freshness_statuses_share_a_store_without_reading_each_other() -> None:
    kv = MemoryKV()
    store = LedgerStore(kv)
    pending = PendingLedger(store)
    pending.add_filing(Filing("acme", "cmdb", "svc/a", 5, "v2", "ev-2", (("e1", None, None),)))
    pending.add_filing(Filing("acme", "cmdb", "svc/a", 7, "v1", "ev-3", revoked=True))
    store.commit(pending)
    freshness = FreshnessStore(kv)
    freshness.record([SourceStatusTransition("acme", None, 6, SourceSilence("cmdb", None, None, 60_000_000))])
    assert freshness.statuses("acme") == {"cmdb": "stale"}
    assert [(f.tx, f.version, f.revoked) for f in store.record_filings("acme", "cmdb", "svc/a")] == [
        (5, "v2", False), (7, "v1", True)]


def test_a_revoked_version_is_known_after_a_commit_and_to_a_store_opened_afresh() -> None:
    kv = MemoryKV()
    store = LedgerStore(kv)
    assert not store.version_revoked("acme", "cmdb", "svc/a", "v1")  # read, and cached, before the commit
    pending = PendingLedger(store)
    pending.add_filing(Filing("acme", "cmdb", "svc/a", 7, "v1", "ev-3", revoked=True))
    assert pending.version_revoked("acme", "cmdb", "svc/a", "v1"), "the batch sees its own revocation"
    store.commit(pending)
    for reader in (store, LedgerStore(kv)):
        assert reader.version_revoked("acme", "cmdb", "svc/a", "v1")
        assert not reader.version_revoked("acme", "cmdb", "svc/a", "v2")
        assert not reader.version_revoked("acme", "cmdb", "svc/b", "v1")
