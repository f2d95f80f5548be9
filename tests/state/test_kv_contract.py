"""One contract, two ordered stores: the in-memory twin and RocksDB behave the same."""

import pytest

from state.keys import pack
from state.kv import MemoryKV, RocksKV


@pytest.fixture(params=["memory", "rocksdb", "rocksdb-bulk"])
def kv(request, tmp_path):
    store = MemoryKV() if request.param == "memory" else RocksKV(tmp_path / "db", bulk=request.param == "rocksdb-bulk")
    yield store
    store.close()


def test_scan_returns_exactly_the_prefix_in_byte_order(kv) -> None:
    keys = [pack("t", "a", 2), pack("t", "a", -1), pack("t", "ab", 1), pack("t", "a\x00", 1), pack("u", "a", 1)]
    kv.write([(k, b"v") for k in keys])
    assert [k for k, _ in kv.scan(pack("t", "a"))] == [pack("t", "a", -1), pack("t", "a", 2)]
    assert len(list(kv.scan(pack("t")))) == 4


def test_a_scan_can_start_inside_its_prefix(kv) -> None:
    keys = [pack("t", tx) for tx in (-5, 0, 7, 1 << 40)] + [pack("u", 1)]
    kv.write([(k, b"v") for k in keys])
    assert [k for k, _ in kv.scan(pack("t"), start=pack("t", 0))] == keys[1:4]
    assert [k for k, _ in kv.scan(pack("t"), start=pack("t", 8))] == keys[3:4]
    assert [k for k, _ in kv.scan(pack("t"), start=pack("s"))] == keys[:4], "a start before the prefix is the prefix"
    assert list(kv.scan(pack("t"), start=pack("t", (1 << 40) + 1))) == []


def test_a_scan_before_a_key_walks_its_prefix_backwards_nearest_first(kv) -> None:
    keys = [pack("s", 9)] + [pack("t", name, 1) for name in ("a", "ab", "b", "c")] + [pack("u", 1)]
    kv.write([(k, b"v") for k in keys])
    assert [k for k, _ in kv.scan_before(pack("t"), pack("t", "b"))] == [keys[2], keys[1]]
    before_b = [k for k, _ in kv.scan_before(pack("t"), pack("t", "b", 1))]
    assert before_b == [keys[2], keys[1]], "the key itself is not before"
    assert [k for k, _ in kv.scan_before(pack("t"), pack("t", "zz"))] == keys[4:0:-1]
    assert list(kv.scan_before(pack("t"), pack("t", "a"))) == [], "nothing of the prefix before it"
    for _ in kv.scan_before(pack("t"), pack("t", "c")):
        break  # an abandoned scan leaves the store usable
    assert [k for k, _ in kv.scan(pack("t"), start=pack("t", "b"))] == keys[3:5]


def test_write_applies_puts_and_deletes_together(kv) -> None:
    kv.write([(b"k1", b"1"), (b"k2", b"2")])
    kv.write([(b"k3", b"3")], [b"k1"])
    assert [k for k, _ in kv.scan(b"k")] == [b"k2", b"k3"]
    assert kv.get(b"k1") is None and kv.get(b"k3") == b"3"


def test_get_many_answers_each_key_in_order_as_get_does(kv) -> None:
    kv.write([(b"k1", b"1"), (b"k2", b"2"), (b"k3", b"")], [b"k2"])
    keys = [b"k3", b"missing", b"k1", b"k2", b"k1"]
    assert kv.get_many(keys) == [kv.get(key) for key in keys] == [b"", None, b"1", None, b"1"]
    assert kv.get_many([]) == []


def test_within_one_write_the_last_put_of_a_key_wins_and_a_delete_beats_a_put(kv) -> None:
    kv.write([(b"k2", b"first"), (b"k1", b"1"), (b"k2", b"second"), (b"k3", b"3")], [b"k3"])
    assert list(kv.scan(b"k")) == [(b"k1", b"1"), (b"k2", b"second")]


def test_clear_deletes_every_key_and_the_store_takes_writes_after(kv) -> None:
    kv.write([(b"A\x02x", b"1"), (b"M\x02last_tx", b"9"), (b"W\x15" + bytes(8), b"3"), (b"\xfe", b"4")])
    for _ in kv.scan(b"A"):
        break  # an iterator made before the clear
    kv.clear()
    assert list(kv.scan(b"")) == []
    assert all(kv.get(key) is None for key in (b"A\x02x", b"M\x02last_tx", b"\xfe"))
    kv.write([(b"A\x02y", b"2")])
    assert list(kv.scan(b"A")) == [(b"A\x02y", b"2")]


def test_scans_see_every_write_before_them_also_when_iterators_are_reused(kv) -> None:
    kv.write([(b"a1", b"1"), (b"a2", b"2"), (b"b1", b"1")])
    for _ in kv.scan(b"a"):
        break  # an abandoned scan
    assert [k for k, _ in kv.scan(b"a")] == [b"a1", b"a2"]
    kv.write([(b"a3", b"3")], [b"a1"])
    assert [k for k, _ in kv.scan(b"a")] == [b"a2", b"a3"], "a scan after a write sees it"
    nested = [(outer, [inner for inner, _ in kv.scan(b"b")]) for outer, _ in kv.scan(b"a")]
    assert nested == [(b"a2", [b"b1"]), (b"a3", [b"b1"])], "nested scans do not share a position"


def test_rocksdb_reader_does_not_take_the_writers_lock(tmp_path) -> None:
    writer = RocksKV(tmp_path / "db")
    writer.write([(b"a", b"1")])
    reader = RocksKV(tmp_path / "db", read_only=True)
    assert reader.get(b"a") == b"1"
    writer.write([(b"b", b"2")])
    reader.close()
    writer.close()


def test_reader_of_a_missing_directory_says_so(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="edgeledger load"):
        RocksKV(tmp_path / "nothing", read_only=True)


def test_a_bulk_writer_leaves_every_batch_on_disk_when_it_closes(tmp_path) -> None:
    """Bulk writes skip the write-ahead log; closing flushes them, so a reader then sees them all."""
    writer = RocksKV(tmp_path / "db", bulk=True)
    for batch in range(3):
        writer.write([(pack("k", batch, n), b"v") for n in range(1000)])
    writer.close()
    reader = RocksKV(tmp_path / "db", read_only=True)
    try:
        assert sum(1 for _ in reader.scan(pack("k"))) == 3000
    finally:
        reader.close()
