"""Running workers and replicas in tests until their work is done, not until they have idled a while.

A worker is done once its state has applied every input partition up to where it ended when the
test asked (``input_ends``), with no rebuild left and nothing parked in its outbox; a replica once
it has read every log partition to its end. The ends are read from partition-EOF events: on the
embedded broker the high watermark can count short (it counts produced record batches), while the
end a fetch reports is exact. Unlike ``tests.support.kafka``'s probes, this writes nothing to the
topic: a probe on ``edge-versions`` would be a record no reader of the log can parse.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from state.kv import RocksKV
from state.pipeline_store import PipelineStore
from streams.kafka.topics import INPUT_TOPICS, TopicSettings
from streams.log.replica import run_replica
from streams.worker.loop import LedgerWorker
from tests.support.kafka import Position, read_to_eof
from tests.support.logpipe import LogPipe
from tests.support.pipeline import holds_partitions, start_worker
from tests.support.wait import wait_until


def ends_of(bootstrap: str, topics: Iterable[str], timeout: float = 60.0) -> dict[Position, int]:
    """The end offset (the next record's offset) of every partition of ``topics`` now."""
    return read_to_eof(bootstrap, topics, timeout)[1]


def input_ends(bootstrap: str, topics: TopicSettings) -> dict[Position, int]:
    return ends_of(bootstrap, [topics.name(topic) for topic in INPUT_TOPICS])


def applied_to(applied: dict[Position, int], ends: dict[Position, int]) -> bool:
    """Whether the last offsets applied reach every non-empty partition's last record."""
    return all(applied.get(position, -1) >= end - 1 for position, end in ends.items() if end > 0)


def worker_done(worker: LedgerWorker, ends: dict[Position, int]) -> Callable[[], bool]:
    """``LedgerWorker.run(until=...)`` for a worker in the test's process: it holds its partitions, has
    applied them to ``ends``, and has no rebuild left and nothing parked."""
    return lambda: (bool(worker.assigned) and not worker.rebuilds.waiting and not worker.holdings.parked
                    and applied_to(worker.applied_offsets, ends))


def states_done(states: Iterable[Path], ends: dict[Position, int]) -> bool:
    """Whether these state directories, read as secondaries while their workers run, have applied
    every input partition to ``ends`` between them, none with a rebuild unfinished or a batch unsent."""
    applied: dict[Position, int] = {}
    for state in states:
        if not (state / "CURRENT").exists():
            return False
        kv = RocksKV(state, read_only=True)
        try:
            bookkeeping = PipelineStore(kv, reader=True)
            if bookkeeping.rebuilding() or bookkeeping.outbox():
                return False
            for position, offset in bookkeeping.input_offsets().items():
                applied[position] = max(offset, applied.get(position, -1))
        finally:
            kv.close()
    return applied_to(applied, ends)


def run_to_the_end(state: Path, bootstrap: str, topics: TopicSettings, group: str, faults: list[str] | None = None,
                   timeout: float = 120) -> LogPipe:
    """One worker process (`edgeledger run`, or ``tests.support.faulty_worker`` with ``faults``) run
    until it holds its partitions and its state has applied every input there is now; stopped as an
    operator does (SIGTERM). Its output (``LogPipe.summary``)."""
    ends = input_ends(bootstrap, topics)
    worker = LogPipe(start_worker(state, bootstrap, topics, group, faults=faults))

    def done_or_dead() -> bool:
        return worker.process.poll() is not None or (holds_partitions(worker) and states_done([state], ends))

    try:
        wait_until(done_or_dead, f"the worker on {state.name} applied every input", timeout)
        assert worker.process.poll() is None, worker.tail(40)
        worker.stop()
        return worker
    finally:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait()
        worker.close()


def replicate(state: Path, bootstrap: str, topics: TopicSettings, timeout: float = 120) -> int:
    """``run_replica`` until it has read every partition of ``edge-versions`` to its end; the log
    records it applied."""
    applied: list[int] = []
    stop = threading.Event()
    thread = threading.Thread(target=lambda: applied.append(
        run_replica(state, bootstrap, topics, stop=stop, until_caught_up=True)))
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        stop.set()
        thread.join(30)
    assert applied and not stop.is_set(), f"the replica did not read the log to its end within {timeout} s"
    return applied[0]
