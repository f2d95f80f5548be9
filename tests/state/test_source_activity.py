"""Source activity through transaction time (the ``P`` table): what the ledger had heard from each
source as of a past ``known_at`` is what a ledger that stopped there holds, whatever it applied later
and wherever its batches were cut."""

from __future__ import annotations

import json

import pytest

from processors.batch import BatchRunner
from processors.model import SourceActivity
from state.keys import pack, unpack
from state.kv import MemoryKV, RocksKV
from state.store import LedgerStore
from tests.support.harness import Ledger


def clock(now: str) -> str:
    return json.dumps({"kind": "clock", "now": now})


def change(event_id: str, system: str, detected_at: str, record: str = "r1") -> str:
    return json.dumps({"kind": "change", "event_id": event_id, "tenant": "acme",
                       "source": {"system": system, "record": record, "version": "1"}, "detected_at": detected_at,
                       "mode": "delta", "assert": [{"src": {"type": "Service", "id": f"{system}:{event_id}"},
                                                    "rel": "depends_on", "dst": {"type": "Service", "id": "cmdb:S0"}}]})


def heartbeat(event_id: str, system: str, detected_at: str) -> str:
    return json.dumps({"kind": "heartbeat", "event_id": event_id, "tenant": "acme", "source": {"system": system},
                       "detected_at": detected_at})


HISTORY = [
    clock("2026-03-01T09:00:00Z"),
    change("c1", "cmdb", "2026-03-01T08:59:00Z"),
    heartbeat("h1", "hr", "2026-03-01T09:00:00Z"),
    clock("2026-03-01T10:00:00Z"),
    change("c2", "cmdb", "2026-03-01T09:58:00Z"),
    heartbeat("h2", "cmdb", "2026-03-01T10:00:00Z"),
    clock("2026-03-02T09:00:00Z"),
    change("c3", "cmdb", "2026-02-01T00:00:00Z"),  # an old detected_at: heard all the same (a late fact)
    change("p1", "policy", "2026-03-02T08:00:00Z"),
    clock("2026-04-22T10:00:00Z"),
    heartbeat("h3", "hr", "2026-04-22T10:00:00Z"),
    change("c4", "cmdb", "2026-04-22T09:30:00Z"),
    clock("2026-05-03T09:00:00Z"),
    change("c5", "cmdb", "2026-05-03T08:00:00Z"),
    heartbeat("h4", "cmdb", "2026-05-03T09:00:00Z"),
    change("bad", "cmdb", "2026-05-03T09:00:00Z")[:-2],  # malformed: dead-lettered, not heard
]


def loaded(lines: list[str], batch_size: int = 1000, kv=None) -> LedgerStore:
    ledger = Ledger(kv=kv or MemoryKV())
    BatchRunner(ledger.processor, ledger.store, ledger.store.commit, batch_size).run(lines)
    return ledger.store


def prefixes() -> list[tuple[int, dict[str, SourceActivity]]]:
    """After each prefix of HISTORY: (last tx, the current source activity) of a ledger loaded with it."""
    found = []
    for end in range(1, len(HISTORY) + 1):
        store = loaded(HISTORY[:end])
        found.append((store.last_tx(), store.source_activity("acme")))
    return found


@pytest.mark.parametrize("batch_size", [1, 3, 1000])
def test_activity_as_of_a_past_known_at_is_what_a_ledger_stopped_there_holds(batch_size: int) -> None:
    full = loaded(HISTORY, batch_size)
    steps = prefixes()
    assert steps[-1][1] == full.source_activity("acme"), "without known_at: L, as before"
    for tx, then in steps:
        assert full.source_activity("acme", tx) == then, tx
        later = [other for other, _ in steps if other > tx]
        if later:
            assert full.source_activity("acme", min(later) - 1) == then, "between events: the earlier one's"
    first_tx = steps[1][0]
    assert full.source_activity("acme", first_tx - 1) == {}, "before anything was heard"


def test_a_batch_writes_one_history_row_per_source_it_heard() -> None:
    store = loaded(HISTORY[:6])  # one batch: c1, h1, c2, h2 (cmdb and hr)
    rows = [(unpack(key[1:]), json.loads(value)) for key, value in store.kv.scan(b"P")]
    assert [key[:2] for key, _ in rows] == [("acme", "cmdb"), ("acme", "hr")]
    (cmdb_key, cmdb), (hr_key, hr) = rows
    assert len(cmdb) == 3 and len(hr) == 1, "an entry per event that moved the source's L row"
    assert cmdb_key[2] == cmdb[0][0] and hr_key[2] == hr[0][0], "keyed by the first entry's tx"
    latest = store.source_activity("acme")
    for system, entries in (("cmdb", cmdb), ("hr", hr)):
        a = latest[system]
        assert entries[-1][1:] == [a.last_change_detected_at, a.last_change_tx, a.last_heartbeat_detected_at,
                                   a.last_heartbeat_tx], "the last entry is the L row"

    more = Ledger(kv=store.kv)
    BatchRunner(more.processor, more.store, more.store.commit, 1000).run(HISTORY[6:9])  # c3 (old), p1
    rows = [(unpack(key[1:]), json.loads(value)) for key, value in store.kv.scan(b"P" + pack("acme", "cmdb"))]
    assert len(rows) == 2, "c3 is heard: a second row for cmdb"
    assert len(list(store.kv.scan(b"P" + pack("acme", "policy")))) == 1
    more.send(HISTORY[9], heartbeat("h9", "hr", "2026-03-01T00:00:00Z"))  # older than h1's detected_at
    # hr's only row held h1 alone, so the new row, starting with h1 as found, takes its key: a superset.
    ((_, value),) = store.kv.scan(b"P" + pack("acme", "hr"))
    assert [entry[0] for entry in json.loads(value)][-1] == more.store.last_tx(), "an old heartbeat is heard too"


def test_an_old_detected_at_is_heard_at_its_transaction_time_and_keeps_the_newest_detected_at() -> None:
    store = loaded(HISTORY[:9])
    cmdb = store.source_activity("acme")["cmdb"]
    c3_tx = store.last_tx() - 1  # c3, then p1, one tick each
    assert cmdb.last_change_tx == c3_tx, "the ledger applied c3 then: the source was heard"
    assert cmdb.last_change_detected_at == loaded(HISTORY[:5]).source_activity("acme")["cmdb"].last_change_detected_at
    a_batch_without_c3 = loaded(HISTORY[:7] + HISTORY[8:9])
    assert a_batch_without_c3.source_activity("acme")["cmdb"].last_change_tx < c3_tx


def test_history_rows_survive_a_reopen(tmp_path) -> None:
    store = loaded(HISTORY, batch_size=3, kv=RocksKV(tmp_path / "db"))
    expected = {tx: store.source_activity("acme", tx) for tx, _ in prefixes()}
    store.close()
    reopened = LedgerStore(RocksKV(tmp_path / "db"))
    assert {tx: reopened.source_activity("acme", tx) for tx in expected} == expected
    reopened.close()
