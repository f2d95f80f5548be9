"""The worker's bookkeeping: input offsets and the outbox survive as written, in commit order."""

from state.kv import MemoryKV
from state.pipeline_store import PipelineStore


def test_the_outbox_returns_each_batch_in_commit_order_until_trimmed() -> None:
    kv = MemoryKV()
    store = PipelineStore(kv)
    first = [("edge-versions", "acme", b'{"kind":"edge_version"}'), ("dead-letter", "", b"\x00\xffraw")]
    second = [("edge-corrections", "t\u00e9nant", b"x" * 70_000)]
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
