"""The cache store (bounded, indexed by read set, LRU in front) and the change feed a replica follows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from processors.cache_keys import CacheEntry, ValidWindow, entry_key
from state.cache_store import CacheStore
from state.changes import LedgerFollower, versions_changed_since
from state.keys import pack
from state.kv import MemoryKV, OrderedKV, RocksKV
from state.open import open_reader, open_writer
from state.store import LedgerStore
from tests.support.harness import Ledger

CONNECTOR, REPORTS, ANA = "Component:cmdb:CI0042", "Service:cmdb:S1", "Team:hr:T-ANA"


def entry(base: str, window: ValidWindow = ValidWindow(), read: tuple[tuple[str, str, str, str], ...] = (),
          current: bool = True, body: str = "{}") -> CacheEntry:
    return CacheEntry(entry_key(base, window), base, "acme", current, window, frozenset(read), body.encode())


def rows(kv: OrderedKV, prefix: bytes) -> list[bytes]:
    return [key for key, _ in kv.scan(prefix)]


@pytest.fixture(params=["memory", "rocksdb"])
def kv(request: pytest.FixtureRequest, tmp_path: Path) -> OrderedKV:
    return MemoryKV() if request.param == "memory" else RocksKV(tmp_path / "cache")


def test_find_by_window_and_round_trip(kv: OrderedKV) -> None:
    store = CacheStore(kv)
    early = entry("owners-of:a", ValidWindow(None, 100), (("acme", CONNECTOR, "owned_by", "out"),), body='{"x":1}')
    late = entry("owners-of:a", ValidWindow(100, None), body='{"x":2}')
    store.put(early)
    store.put(late)
    assert store.find("owners-of:a", 99) == early and store.find("owners-of:a", 100) == late
    assert store.find("owners-of:b", 5) is None
    assert CacheStore(kv, memory_entries=0).find("owners-of:a", 5) == early, "read back from the KV"
    assert len(store) == 2


def test_a_fresh_entry_is_found_without_reading_the_kv_and_its_siblings_still_are() -> None:
    kv = MemoryKV()
    CacheStore(kv).put(entry("owners-of:a", ValidWindow(None, 100), body='{"x":1}'))
    store = CacheStore(kv)
    late = entry("owners-of:a", ValidWindow(100, None), body='{"x":2}')
    store.put(late)
    reads: list[bytes] = []
    scan = kv.scan
    kv.scan = lambda prefix: reads.append(prefix) or scan(prefix)  # type: ignore[method-assign]
    assert store.find("owners-of:a", 150) is late and reads == [], "the entry just put is kept decoded"
    assert store.find("owners-of:a", 50).result_json == b'{"x":1}', "an entry put earlier is read from the KV"


def test_removal_takes_the_index_rows_with_it(kv: OrderedKV) -> None:
    store = CacheStore(kv)
    read = (("acme", CONNECTOR, "owned_by", "out"), ("acme", CONNECTOR, "depends_on", "in"))
    first = entry("dependents-of:a", read=read)
    store.put(first)
    assert store.keys_reading(read[1]) == [first.key]
    assert store.keys_reading_node("acme", CONNECTOR) == [first.key]
    assert store.remove([first.key, first.key, "nope:x:-:-"]) == 1
    assert rows(kv, b"Q") == [] and rows(kv, b"C" + pack("e")) == [] and rows(kv, b"C" + pack("o")) == []
    assert len(store) == 0 and store.find("dependents-of:a", 0) is None


def test_replacing_an_entry_drops_its_old_read_set(kv: OrderedKV) -> None:
    store = CacheStore(kv)
    store.put(entry("owners-of:a", read=(("acme", CONNECTOR, "owned_by", "out"),)))
    store.put(entry("owners-of:a", read=(("acme", REPORTS, "owned_by", "out"),), body='{"v":2}'))
    assert store.keys_reading(("acme", CONNECTOR, "owned_by", "out")) == []
    assert len(store) == 1 and store.find("owners-of:a", 0).result_json == b'{"v":2}'


def test_an_entry_that_read_nothing_has_no_index_rows(kv: OrderedKV) -> None:
    store = CacheStore(kv)
    store.put(entry("owners-of:p", current=False))
    assert rows(kv, b"Q") == [] and store.find("owners-of:p", 0) is not None


def test_bounded_by_entry_count_evicting_the_oldest(kv: OrderedKV) -> None:
    store = CacheStore(kv, max_entries=3, memory_entries=2)
    evicted = [store.put(entry(f"owners-of:{i}", read=(("acme", f"n{i}", "owned_by", "out"),))) for i in range(5)]
    assert evicted == [0, 0, 0, 1, 1] and len(store) == 3
    assert [store.find(f"owners-of:{i}", 0) is not None for i in range(5)] == [False, False, True, True, True]
    assert store.keys_reading(("acme", "n0", "owned_by", "out")) == []
    assert len(rows(kv, b"C" + pack("o"))) == 3


def test_the_memory_front_is_a_subset_of_the_kv(kv: OrderedKV) -> None:
    store = CacheStore(kv, memory_entries=1)
    for i in range(3):
        store.put(entry(f"owners-of:{i}"))
        assert store.find(f"owners-of:{i}", 0) is not None
    store.remove([entry("owners-of:2").key])
    assert store.find("owners-of:2", 0) is None, "removal reaches the memory front"
    assert store.find("owners-of:0", 0) is not None


def test_the_memory_front_is_bounded_by_bytes_and_keeps_no_large_answer(kv: OrderedKV) -> None:
    """Bounded by count alone, a few thousand large answers took gigabytes: the front also keeps at
    most ``memory_bytes`` of answers, none larger than a sixteenth of that; the store still has them."""
    store = CacheStore(kv, memory_entries=100, memory_bytes=1600)
    large = entry("owners-of:large", body="x" * 101)
    store.put(large)
    assert store._memory_used == 0 and not store._memory, "a large answer is not kept in memory"
    assert store.find("owners-of:large", 0) == large and not store._memory, "it is read from the store"
    for i in range(20):
        store.put(entry(f"owners-of:{i}", body="y" * 100))
    assert store._memory_used <= 1600 and store._in_memory == 16
    assert store._memory_used == sum(len(s.entry.result_json) for g in store._memory.values() for s in g.values())
    assert all(store.find(f"owners-of:{i}", 0) is not None for i in range(20)), "evicted from memory, not the store"
    store.put(entry("owners-of:19", body="z" * 101))
    assert "owners-of:19" not in store._memory, "a replacement too large leaves the front"
    assert store.find("owners-of:19", 0).result_json == b"z" * 101


def test_clear_and_reopen(tmp_path: Path) -> None:
    kv = RocksKV(tmp_path / "cache")
    store = CacheStore(kv)
    store.put(entry("owners-of:a", read=(("acme", CONNECTOR, "owned_by", "out"),)))
    store.put(entry("owners-of:b"))
    kv.close()
    reopened = CacheStore(RocksKV(tmp_path / "cache"))
    assert len(reopened) == 2 and reopened.find("owners-of:b", 0) is not None
    reopened.clear()
    assert len(reopened) == 0 and rows(reopened.kv, b"C") == [] and rows(reopened.kv, b"Q") == []
    reopened.close()


def test_entries_survive_json_and_odd_text(kv: OrderedKV) -> None:
    store = CacheStore(kv)
    body = json.dumps({"note": "line\nbreak ✓ \u0000"}).encode().decode()
    odd = entry("owners-of:ü", ValidWindow(-5, 7), (("acme", "Team:\u0000x", "owned_by", "in"),), body=body)
    store.put(odd)
    assert CacheStore(kv, memory_entries=0).find("owners-of:ü", 0) == odd


# -- the change feed ----------------------------------------------------------------------------------------
def test_versions_changed_since_reads_appends_and_closings_after_a_tx() -> None:
    ledger = Ledger()
    ledger.at("2026-03-01T00:00:00Z").change("cmdb").asserts(CONNECTOR, "owned_by", ANA).send()
    ledger.change("cmdb").asserts(REPORTS, "depends_on", CONNECTOR).send()
    middle = ledger.store.last_tx()
    ledger.change("cmdb").asserts(CONNECTOR, "owned_by", "Team:hr:T-PLAT").send()
    ledger.send({"kind": "change", "event_id": "other-tenant", "tenant": "globex", "source": {"system": "cmdb"},
                 "detected_at": "2026-01-01T00:00:00Z", "assert": [{
                     "src": {"type": "Service", "id": "cmdb:S1"}, "rel": "owned_by",
                     "dst": {"type": "Team", "id": "hr:T-ANA"}}]})
    changed = versions_changed_since(ledger.store, "acme", middle)
    closed = [v for v in changed if v.tx_to is not None]
    assert {(v.src, v.dst) for v in changed} == {(CONNECTOR, ANA), (CONNECTOR, "Team:hr:T-PLAT")}
    assert [v.dst for v in closed] == [ANA]
    every = {e for _, e, _ in ledger.store.versions_in_tx_order("acme")}
    assert {v.edge_id for v in versions_changed_since(ledger.store, "acme", -(1 << 62))} == every
    assert versions_changed_since(ledger.store, "acme", ledger.store.last_tx()) == []


def test_a_follower_sees_another_process_writes_after_refresh(tmp_path: Path) -> None:
    writer = open_writer(tmp_path / "ledger")
    ledger = Ledger(kv=writer.kv)
    ledger.at("2026-03-01T00:00:00Z").change("cmdb").asserts(CONNECTOR, "owned_by", ANA).send()
    clock = [0.0]
    follower = LedgerFollower(tmp_path / "ledger", min_interval_s=1.0, monotonic=lambda: clock[0])
    try:
        seen = follower.last_tx()
        assert [v.dst for v in follower.adjacent("acme", CONNECTOR, "owned_by", "out")] == [ANA]
        ledger.change("cmdb").asserts(REPORTS, "depends_on", CONNECTOR).send()
        assert not follower.refresh(), "throttled"
        clock[0] = 2.0
        assert follower.refresh() and follower.last_tx() > seen
        assert [v.src for v in follower.changes_since("acme", seen)] == [REPORTS]
        before = follower.source_activity("acme")["cmdb"].last_change_detected_at
        ledger.change("cmdb", detected_at="2026-02-01T00:00:00Z").asserts(REPORTS, "owned_by", ANA).send()
        assert follower.source_activity("acme")["cmdb"].last_change_detected_at == before, "one view, one reading"
        clock[0] = 3.0
        assert follower.refresh() and follower.source_activity("acme")["cmdb"].last_change_detected_at > before
        clock[0] = 4.0
        assert not follower.refresh(), "nothing written since"
    finally:
        follower.close()
        writer.close()


def test_a_followers_activity_as_of_a_past_instant_stays_what_was_heard_by_then(tmp_path: Path) -> None:
    writer = open_writer(tmp_path / "ledger")
    ledger = Ledger(kv=writer.kv)
    ledger.at("2026-03-01T00:00:00Z").change("cmdb", detected_at="2026-03-01T00:00:00Z").asserts(
        CONNECTOR, "owned_by", ANA).send()
    first = ledger.store.last_tx()
    clock = [0.0]
    follower = LedgerFollower(tmp_path / "ledger", min_interval_s=1.0, monotonic=lambda: clock[0])
    try:
        then = follower.source_activity("acme", first)
        assert then == follower.source_activity("acme") and then["cmdb"].last_change_tx == first
        ledger.at("2026-05-03T00:00:00Z").change("cmdb", detected_at="2026-05-03T00:00:00Z").asserts(
            REPORTS, "depends_on", CONNECTOR).send()
        clock[0] = 2.0
        assert follower.refresh() and follower.source_activity("acme")["cmdb"].last_change_tx > first
        assert follower.source_activity("acme", first) == then, "heard on 3 May: not as of 1 March"
        assert follower.source_activity("acme", first) is follower.source_activity("acme", first), "kept"
        assert follower.source_activity("acme", first - 1) == {}
        assert follower.source_activity("acme", ledger.store.last_tx()) is follower.source_activity("acme")
    finally:
        follower.close()
        writer.close()


def test_a_failed_reopen_keeps_the_previous_view(tmp_path: Path) -> None:
    writer = open_writer(tmp_path / "ledger")
    ledger = Ledger(kv=writer.kv)
    ledger.at("2026-03-01T00:00:00Z").change("cmdb").asserts(CONNECTOR, "owned_by", ANA).send()
    opened: list[Path] = []

    def opener(path: Path) -> LedgerStore:
        opened.append(path)
        if len(opened) == 2:
            raise OSError("primary busy")
        return open_reader(path)

    follower = LedgerFollower(tmp_path / "ledger", min_interval_s=0, opener=opener)
    try:
        seen = follower.last_tx()
        ledger.change("cmdb").asserts(REPORTS, "depends_on", CONNECTOR).send()
        assert not follower.refresh() and follower.last_tx() == seen
        assert follower.refresh() and follower.last_tx() > seen, "the next look tries again"
    finally:
        follower.close()
        writer.close()
