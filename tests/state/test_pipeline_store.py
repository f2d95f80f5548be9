"""The worker's bookkeeping: input offsets and the outbox survive as written, in commit order."""

import pytest

from state import keys
from state.kv import MemoryKV
from state.layout import StateFormatError
from state.pipeline_store import PipelineStore


def test_the_outbox_returns_each_batch_in_commit_order_until_trimmed() -> None:
    kv = MemoryKV()
    store = PipelineStore(kv)
    first = [("edge-versions", "acme", b'{"kind":"edge_version"}', -1), ("dead-letter", "", b"\x00\xffraw", 3)]
    second = [("edge-corrections", "t\u00e9nant", b"x" * 70_000, -1)]
    for records in (first, second):
        puts, _ = store.outbox_puts(records)
        kv.write(puts)
    parked = store.outbox()
    assert [record for _, record in parked] == first + second
    first_row = {key for key, record in parked if record in first}
    assert len(first_row) == 1, "a batch is one outbox row"

    store.trim([key for key, record in parked if record in first])
    assert [record for _, record in store.outbox()] == second
    assert PipelineStore(kv).outbox_puts(first)[1][0] > parked[-1][0], "the sequence survives a reopen"


def test_an_empty_batch_parks_nothing() -> None:
    assert PipelineStore(MemoryKV()).outbox_puts([]) == ([], [])


def test_an_outbox_row_in_other_frames_is_refused_with_a_clear_reason() -> None:
    import struct

    kv = MemoryKV()
    frames = b"".join(struct.pack(">HHI", len(t), len(k), len(v)) + t + k + v
                      for t, k, v in ((b"edge-versions", b"acme", b"{}"), (b"dead-letter", b"", b"x")))
    kv.write([(b"W\x15" + bytes(7) + b"\x01", frames)])
    with pytest.raises(StateFormatError, match="not in frames this edgeledger writes: rebuild the state"):
        PipelineStore(kv).outbox()


def test_rebuild_marks_last_until_each_rebuild_ends() -> None:
    store = PipelineStore(MemoryKV())
    store.begin_rebuilds([2, 0])
    store.end_rebuild(0)
    assert store.rebuilding() == {2}
    assert PipelineStore(store.kv).rebuilding() == {2}, "kept with the state"


def test_where_a_partition_was_given_up_lasts_until_it_is_taken_back_or_rebuilt() -> None:
    kv = MemoryKV()
    store = PipelineStore(kv)
    store.give_up({0: (257, "w-9-40/partition-0", (0, 4)), 1: (3, "w-2-7/partition-1"), 3: (40, "a b/partition-3")})
    assert PipelineStore(kv).given_up_at() == {0: (257, "w-9-40/partition-0", (0, 4)),
                                               1: (3, "w-2-7/partition-1", None),
                                               3: (40, "a b/partition-3", None)}, "kept with the state"
    store.take_back([1])
    store.begin_rebuilds([3])
    store.end_rebuild(3)
    assert store.given_up_at() == {0: (257, "w-9-40/partition-0", (0, 4))}
    store.give_up({0: (300, "w-12-90/partition-0", (1, 2))})
    assert store.given_up_at() == {0: (300, "w-12-90/partition-0", (1, 2))}, "the latest"
    kv.write([(b"M" + keys.pack("given_up") + keys.pack(5), b"77 w 1-3-9/partition-5")])
    with pytest.raises(StateFormatError, match=r"partition 5's given-up note .* is not"):
        store.given_up_at()


def test_adopting_positions_records_their_topics_and_forgets_reset_offsets_and_fences_in_one_write() -> None:
    kv = MemoryKV()
    store = PipelineStore(kv)
    kv.write(store.offset_puts({("in", 0): 41, ("in", 1): 7, ("log", 0): 99})
             + store.fence_puts({0: (0, 3), 1: (0, 4)}))
    writes = []
    real_write = kv.write
    kv.write = lambda puts, deletes=(): writes.append(1) or real_write(puts, deletes)  # type: ignore[method-assign]
    store.adopt_positions({("in", 0): "c/new", ("in", 1): "c/new"}, [("in", 0), ("log", 0)], forget_fences=[0])
    assert len(writes) == 1
    assert store.input_offsets() == {("in", 0): -1, ("in", 1): 7, ("log", 0): -1}
    assert store.topic_identities() == {("in", 0): "c/new", ("in", 1): "c/new"}
    assert store.fences() == {1: (0, 4)}
    assert PipelineStore(kv).topic_identities() == store.topic_identities(), "kept in the state"


def test_a_reader_of_a_state_without_a_lineage_writes_nothing() -> None:
    """A state cleared for a rebuild has no lineage until its writer names a new one: a reader beside it
    (read-only, so it could not write one) reads it as it is."""
    kv = MemoryKV()
    reader = PipelineStore(kv, reader=True)
    assert reader.lineage == "" and list(kv.scan(b"")) == []
    assert PipelineStore(kv).lineage != "" and list(kv.scan(b""))
