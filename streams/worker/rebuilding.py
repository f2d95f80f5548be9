"""A worker's rebuilds of partitions from the log: started, stepped from its loop, finished, suspended.

An assignment hands in the partitions another worker owned since this state did
(``Assignment.on_assign``); their inputs stay paused while the loop replays their logs a slice at
a time (``streams.worker.rebuild``), and resume together once the last is rebuilt.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer

from schemas.topics import Topic
from state.pipeline_store import GivenUp, PipelineStore
from state.store import LedgerStore
from streams.kafka.topics import TopicSettings
from streams.worker.faults import Faults
from streams.worker.fences import Fencer, NotAMember
from streams.worker.holdings import Holdings
from streams.worker.positions import Positions
from streams.worker.rebuild import PartitionRebuild, Rebuilds, StateDisowned

log = logging.getLogger(__name__)

REBUILDS_AT_ONCE = 4
"""Partitions rebuilt side by side, each with its own reader of the log."""
REBUILD_SLICE = 0.25
"""Seconds of rebuilding between two polls of the input consumer."""

RebuildObserver = Callable[[int, int], None]
"""(log partitions left to rebuild, log records replayed since the last call)."""


class Rebuilding:
    """Starts, steps and finishes the rebuilds of a worker's partitions, and resumes their inputs."""

    def __init__(self, store: LedgerStore, bookkeeping: PipelineStore, consumer: Consumer, fencer: Fencer,
                 holdings: Holdings, bootstrap: str, group_id: str, topics: TopicSettings, worker_id: str,
                 faults: Faults, on_rebuild: RebuildObserver | None, discard_state: Callable[[], None],
                 join_again: Callable[[], None]) -> None:
        self.store = store
        self.bookkeeping = bookkeeping
        self.consumer = consumer
        self.fencer = fencer
        self.holdings = holdings
        self.bootstrap = bootstrap
        self.group_id = group_id
        self.log_topic = topics.name(Topic.EDGE_VERSIONS)
        self.worker_id = worker_id
        self.faults = faults
        self.on_rebuild = on_rebuild
        self._discard_state = discard_state
        self._join_again = join_again
        self.positions: Positions | None = None
        """Checks the offsets it resumes rebuilt partitions from (set by ``Assignment``)."""
        self.rebuilds: Rebuilds[PartitionRebuild] = Rebuilds(self.start, REBUILDS_AT_ONCE, REBUILD_SLICE)
        """Log partitions to rebuild before their inputs resume (``streams.worker.rebuild.Rebuilds``)."""

    def expect(self, behind: list[int]) -> None:
        """An assignment's partitions to rebuild. A rebuild the last revocation suspended goes on where
        it was, rather than from offset 0; the suspended rebuilds of partitions this assignment does
        not hold are closed."""
        going_on, closed = self.rebuilds.expect(behind)
        for rebuild in going_on:
            log.info("worker %s goes on rebuilding partition %d", self.worker_id, rebuild.partition)
        self._log_stopped(closed)
        self.report(0)

    def advance(self) -> None:
        """One slice of the pending rebuilds. Once the last is done, the rebuilt partitions' inputs
        resume together, as when they were rebuilt inside the rebalance callback: a batch then
        spans them all."""
        try:
            finished, replayed = self.rebuilds.advance()
        except StateDisowned as disowned:
            log.warning("worker %s discards its local state: %s; it rebuilds its partitions from the log",
                        self.worker_id, disowned)
            self._discard_state()
            self._join_again()  # in its new lineage, every partition is another's
            return
        except NotAMember as lost:
            log.warning("worker %s stops its rebuilds and joins the group again: %s", self.worker_id, lost)
            self._join_again()
            return
        for rebuild in finished:
            self.finish(rebuild)
        rebuilt = self.rebuilds.take_rebuilt()
        if rebuilt:
            self._resume_rebuilt(rebuilt)
        self.report(replayed)

    def report(self, replayed: int) -> None:
        if self.on_rebuild is not None:
            self.on_rebuild(len(self.rebuilds.waiting), replayed)

    def start(self, partition: int, quiet_for: float = 1.0, stalled_after: float = 120.0,
              fence_it: bool = True) -> PartitionRebuild:
        """Begin the rebuild of ``partition``: from where this state gave it up, if it holds the log
        before there (``PipelineStore.given_up_at``), else from the beginning."""
        self.faults.rebuild_starting(partition)
        self.holdings.last_sent.pop(partition, None)
        start_at, start_after, start_fence = self.bookkeeping.given_up_at().get(
            partition, GivenUp(OFFSET_BEGINNING, ""))
        log.info("worker %s rebuilds partition %d from the log, %s", self.worker_id, partition,
                 f"from offset {start_at}, where it gave the partition up" if start_at >= 0 else "from the beginning")
        applied = {position: offset for position, offset in self.holdings.applied_offsets.items()
                   if position[1] == partition}
        return PartitionRebuild(self.store, self.bookkeeping, self.bootstrap, self.group_id, self.log_topic, partition,
                                applied, start_at, start_after, start_fence=start_fence, fencer=self.fencer,
                                fence_it=fence_it, quiet_for=quiet_for, stalled_after=stalled_after,
                                faults=self.faults)

    def finish(self, rebuild: PartitionRebuild) -> None:
        rebuild.close()
        self._restore_offsets(rebuild)
        if rebuild.fence_id:
            self.holdings.last_sent[rebuild.partition] = rebuild.fence_id
        self.bookkeeping.end_rebuild(rebuild.partition)
        log.info("worker %s rebuilt partition %d from %d log records (offset %d on) in %.1f s", self.worker_id,
                 rebuild.partition, rebuild.records, max(rebuild.start_at, 0), time.monotonic() - rebuild.started_at)

    def rebuild_partition(self, partition: int, quiet_for: float = 1.0, stalled_after: float = 120.0) -> None:
        """Rebuild one partition to the end at once, outside the loop: for tests and benchmarks that
        replay a log into a worker's state directly."""
        rebuild = self.start(partition, quiet_for, stalled_after, fence_it=False)
        try:
            while not rebuild.step(REBUILD_SLICE):
                pass
        except BaseException:
            rebuild.close()
            raise
        self.finish(rebuild)  # closes it

    def _restore_offsets(self, rebuild: PartitionRebuild) -> None:
        """The input offsets the replayed batches recorded, as the state's rows now hold them."""
        # Not the higher of the two: an ``input_reset`` on the log lowers what the replay applied.
        self.holdings.applied_offsets.update(rebuild.applied)

    def _resume_rebuilt(self, rebuilt: set[int]) -> None:
        """Assign the whole assignment again, each partition right after what this state applied, and
        resume the rebuilt ones: their fetches then start together, as at an assignment (a seek per
        partition started them one by one, and a batch right after held only some of them)."""
        assignment = self.consumer.assignment()
        held = [tp for tp in assignment if tp.partition in rebuilt]
        for tp in assignment:
            tp.offset = self.holdings.resume_offset(tp.topic, tp.partition)
            self.holdings.assigned.add((tp.topic, tp.partition))
        if self.positions is not None:
            self.positions.resume(held)  # after the rebuild's fence: a reader drops an input reset below it
        self.consumer.assign(assignment)
        self.consumer.resume(held)
        log.info("worker %s resumes %s", self.worker_id,
                 sorted(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in held))

    def suspend(self, partitions: set[int]) -> None:
        """Set the rebuilds of revoked partitions aside (``Rebuilds.suspend``). What they replayed stays,
        with its offsets, and so do their rebuild marks."""
        for rebuild in self.rebuilds.suspend(partitions):
            self._restore_offsets(rebuild)

    def abandon(self) -> None:
        """Close every rebuild, running or suspended: the worker leaves its partitions, or its state is
        gone. A partition's rebuild mark stays, so that it is rebuilt on from what was replayed if it
        comes back."""
        self.suspend(set(self.rebuilds.waiting))
        self._log_stopped(self.rebuilds.close_suspended())
        self.report(0)

    def _log_stopped(self, partitions: list[int]) -> None:
        for partition in partitions:
            log.info("worker %s stops rebuilding partition %d", self.worker_id, partition)
