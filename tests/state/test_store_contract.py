"""The ledger store over both backends passes the same scenario, and survives a reopen."""

import pytest

from state.kv import MemoryKV, RocksKV
from tests.harness import Ledger
from tests.processors.test_late_correction import ANALYTICS, CONNECTOR, PLATFORM, late_correction


@pytest.fixture(params=["memory", "rocksdb"])
def backend(request, tmp_path):
    return (lambda: MemoryKV()) if request.param == "memory" else (lambda: RocksKV(tmp_path / "db"))


def test_same_answers_on_every_backend(backend) -> None:
    ledger = late_correction(Ledger(kv=backend()))
    assert ledger.owners(CONNECTOR, valid_at="2026-04-22", known_at="2026-04-22") == {ANALYTICS}
    assert ledger.owners(CONNECTOR, valid_at="2026-04-22") == {PLATFORM}
    assert [t[2] for t in ledger.store.versions_in_tx_order("acme")] == ["appended", "appended", "appended",
                                                                          "closed"]


def test_state_and_clock_survive_reopening(tmp_path) -> None:
    ledger = late_correction(Ledger(kv=RocksKV(tmp_path / "db")))
    last_tx = ledger.store.last_tx()
    ledger.store.close()
    reopened = Ledger(kv=RocksKV(tmp_path / "db"))
    assert reopened.store.last_tx() == last_tx
    assert reopened.owners(CONNECTOR) == {PLATFORM}
    reopened.send(*ledger.lines)
    assert reopened.counts.duplicates == 2, "event ids are remembered across restarts"


def test_state_does_not_depend_on_batch_boundaries() -> None:
    """Workers commit whatever a poll returned; the ledger must not care where batches split."""
    from processors.batch import BatchRunner
    from tests.benchmarks.generate import generate_events

    lines = list(generate_events(3000, 300, seed=3))
    states = []
    for batch_size in (1, 7, 500, 5000):
        ledger = Ledger()
        BatchRunner(ledger.processor, ledger.store, ledger.store.commit, batch_size).run(lines)
        states.append([v for k, v in ledger.kv.scan(b"V")])
    assert all(state == states[0] for state in states[1:])


@pytest.mark.parametrize("cache_entries", [2, 200_000])
def test_the_believed_edges_cache_agrees_with_a_cold_read(cache_entries: int) -> None:
    """Versioning reads believed out-edges through a write-through cache; after many commits (with
    constant eviction, or none), every entry equals what a freshly opened store reads from disk."""
    from processors.batch import BatchRunner
    from state.keys import unpack
    from state.store import LedgerStore
    from tests.benchmarks.generate import generate_events

    ledger = Ledger()
    warm = LedgerStore(ledger.kv, cache_entries=cache_entries)
    BatchRunner(ledger.processor, warm, warm.commit, batch_size=7).run(generate_events(3000, 300, seed=5))
    cold = LedgerStore(ledger.kv)
    out_edges = {unpack(key[1:])[:3] for key, _ in ledger.kv.scan(b"A") if unpack(key[1:])[3] == "o"}
    assert len(out_edges) > 100
    for tenant, src, rel in sorted(out_edges):
        assert sorted(v.edge_id for v in warm.believed_out(tenant, src, rel)) == sorted(
            v.edge_id for v in cold.believed_out(tenant, src, rel)), (src, rel)
    assert warm._believed_out and len(warm._believed_out) <= cache_entries


def test_state_in_an_older_layout_is_refused_with_a_clear_reason() -> None:
    from state.keys import pack
    from state.store import LedgerStore, StateFormatError

    ledger = late_correction(Ledger())
    assert LedgerStore(ledger.kv).last_tx() == ledger.store.last_tx(), "the current format opens"
    ledger.kv.write([], [b"M" + pack("format")])
    with pytest.raises(StateFormatError, match="format 1, this edgeledger reads format 2"):
        LedgerStore(ledger.kv)


def test_a_past_adjacency_read_is_exactly_what_was_recorded_by_then(backend) -> None:
    """Adjacency rows are in order of recording; a read as of known_at stops at the key alone."""
    from tests.benchmarks.generate import generate_events

    ledger = Ledger(kv=backend())
    ledger.send(*generate_events(600, 40, seed=9))
    hub = "Service:cmdb:S0"
    every = ledger.store.adjacent("acme", hub, "depends_on", "in")
    recorded = sorted({v.tx_from for v in every})
    assert len(recorded) > 3 and [v.tx_from for v in every] == sorted(v.tx_from for v in every)
    for known_at in (recorded[0] - 1, recorded[0], recorded[len(recorded) // 2], recorded[-1]):
        read = list(ledger.store.iter_adjacent("acme", hub, "depends_on", "in", known_at))
        assert read == [v for v in every if v.tx_from <= known_at], known_at
