"""Rebuilding one partition's state from the ``edge-versions`` log, a slice at a time.

A worker that takes over a partition (or lost its disk) replays the partition's log into its state
before it applies any input of that partition. The replay runs in the worker's loop, in slices,
with the partition's inputs paused, not inside the rebalance callback, where it held up every
partition of the worker, also those that needed no rebuild. Between slices the loop polls the
consumer and applies the input of those.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from processors.model import Epoch
from processors.pending import PendingLedger
from state.pipeline_store import PipelineStore
from state.store import LedgerStore
from streams.kafka.config import consumer_config
from streams.log.records import Replay
from streams.worker.faults import NO_FAULTS, Faults
from streams.worker.fences import Fencer, NotAMember

log = logging.getLogger(__name__)

InputPosition = tuple[str, int]
"""(input topic, partition number)."""


R = TypeVar("R", bound="Steppable")


class RebuildStalled(RuntimeError):
    """The broker stopped handing over the log short of the record the rebuild reads up to."""


class StateDisowned(RuntimeError):
    """The log dropped a batch this state applied and sent: its writer, this worker, had lost the
    partition by the time the batch arrived (a pause between the membership check and the send), so
    the state holds what no reader of the log holds, and must be discarded."""


@dataclass
class PartitionRebuild:
    """Replays ``log_topic[partition]`` into ``store``, restoring the input offsets it records.

    It reads up to a probe record it writes to the partition as it starts (``streams.worker.fences``):
    exactly what the log held then, however long the broker is silent and whatever log end it
    reports (the embedded broker's counts short). Then, as the partition's new owner
    (``fence_it``), it fences the partition over the last fence it read there and reads on up to
    its fence, so that what a late writer landed before it is in the state, and what lands after
    it is dropped by every reader. Short of its record with nothing arriving for ``stalled_after``
    seconds, it raises ``RebuildStalled``. The batches the state applied already (``applied``, its
    input offsets on this partition number) are read and skipped (``Replay``)."""

    store: LedgerStore
    bookkeeping: PipelineStore
    bootstrap: str
    group_id: str
    log_topic: str
    partition: int
    applied: dict[InputPosition, int]
    """On entry the state's input offsets on this partition number; kept up to date as batches apply."""
    start_at: int = OFFSET_BEGINNING
    """The log offset to replay from: where this state gave the partition up, if it holds the log
    before there (``PipelineStore.given_up_at``); else the beginning."""
    start_after: str = ""
    """The id of the record this state last sent to the partition, which must be the one right
    before ``start_at``: otherwise the log is not the one the state gave up, or someone else
    wrote to it before the state let go, and the rebuild reads from the beginning."""
    start_fence: Epoch | None = None
    """The epoch of this state's fence on the partition when it was given up at ``start_at``: the last
    fence before there."""
    fencer: Fencer | None = None
    """Writes the probe, and the fence (required)."""
    fence_it: bool = True
    """Whether the rebuild is its worker's taking the partition over, and fences it. A replay of the log
    into a worker's state outside the group (``Rebuilding.rebuild_partition``) does not."""
    quiet_for: float = 1.0
    """How long the search for ``start_after`` waits for more of the log."""
    stalled_after: float = 120.0
    faults: Faults = NO_FAULTS
    """Told of each log record replayed: a test's delay there stands in for a long log."""
    records: int = 0
    epoch: Epoch | None = None
    """The epoch of the fence this rebuild wrote, once it did."""
    fence_id: str = ""
    """That fence's record id."""
    started_at: float = field(default_factory=time.monotonic)
    _reader: Consumer | None = None
    _replay: Replay | None = None
    _end: int = 0
    _waiting_for: str = ""
    """The record id of the probe or fence the read goes up to."""
    _fenced: bool = False
    _heard_at: float = 0.0
    _own_fence: Epoch | None = None
    """The last fence this state put on the partition before the rebuild began: a batch of that epoch
    that the log drops was this state's."""

    def __post_init__(self) -> None:
        self._reader = Consumer(consumer_config(self.bootstrap, f"{self.group_id}-rebuild",
                                                **{"enable.auto.commit": False}))
        try:
            self._end = self._log_end()
            if self.start_at > 0 and not self._follows_own_record():
                self.start_at = OFFSET_BEGINNING
            # Read from the beginning, the rebuild meets every fence there; from further on, it goes
            # on from the last fence before there.
            self._own_fence = self.bookkeeping.fences().get(self.partition)
            known = self.start_fence if self.start_at > 0 else None
            self._replay = Replay(self.store, {self.partition: known} if known is not None else {})
            self._reader.assign([TopicPartition(self.log_topic, self.partition, self.start_at)])
            self._read_to_new_probe()
        except BaseException:
            self.close()
            raise

    def _read_to_new_probe(self) -> None:
        """Read up to a probe written now."""
        assert self.fencer is not None, "a rebuild writes its probe with a fencer"
        self._fenced = False
        self._heard_at = time.monotonic()
        self._waiting_for = self.fencer.probe(self.partition)

    def _follows_own_record(self, ahead: int = 10_000) -> bool:
        """Whether the record this state last sent there (``start_after``) is at ``start_at - 1`` or a
        little after (up to ``ahead`` records: the embedded broker's log end can count short), and if
        so, start right after it. Not found there, the log went on past it before the state let go,
        or is another log: False. It runs in the worker's loop, so it gives up once the log has been
        quiet for ``quiet_for``, and the rebuild then reads from the beginning."""
        assert self._reader is not None
        where = f"{self.log_topic}[{self.partition}]"
        if self.start_at > self._end + ahead:
            log.warning("%s ends at %d, before offset %d where this state gave it up: not the same log (a "
                        "broker that lost its storage?); rebuilding from the beginning", where, self._end,
                        self.start_at)
            return False
        self._reader.assign([TopicPartition(self.log_topic, self.partition, self.start_at - 1)])
        heard_at = time.monotonic()
        while time.monotonic() - heard_at < self.quiet_for:
            message = self._reader.poll(0.2)
            if message is None or message.error():
                continue
            heard_at = time.monotonic()
            if message.offset() < self.start_at - 1:
                continue
            if message.offset() > self.start_at - 1 + ahead:
                break
            if orjson.loads(message.value()).get("record_id") == self.start_after:
                self.start_at = message.offset() + 1
                return True
        log.warning("%s: %r, which this state last sent there, is not at offset %d or the %d after it: "
                    "rebuilding from the beginning", where, self.start_after, self.start_at - 1, ahead)
        return False

    def read_on(self) -> None:
        """Go on after a pause (the partition was revoked and assigned again, in another generation):
        up to a new probe, and a new fence, since another worker may have held the partition meanwhile."""
        self._read_to_new_probe()

    def _log_end(self) -> int:
        """The partition's end as the broker has it now: exact on Kafka; the embedded broker's is its last
        record batch's first offset plus one, short by the rest of that batch."""
        assert self._reader is not None, "a closed rebuild reads nothing"
        _, end = self._reader.get_watermark_offsets(TopicPartition(self.log_topic, self.partition),
                                                    timeout=30, cached=False)
        return end

    def step(self, budget: float) -> bool:
        """Replay for about ``budget`` seconds (a record, at least, when one is there); True once done."""
        assert self._reader is not None and self._replay is not None, "a closed rebuild does not step"
        deadline = time.monotonic() + budget
        while True:
            now = time.monotonic()
            if now >= deadline:
                return False
            message = self._reader.poll(deadline - now)
            if message is None:
                if time.monotonic() - self._heard_at > self.stalled_after:
                    raise RebuildStalled(f"the rebuild of {self.log_topic}[{self.partition}] did not reach its "
                                         f"{self._waiting_for.partition('/')[0]} record ({self._waiting_for}) and "
                                         f"got nothing for {self.stalled_after:.0f} s")
                continue
            if message.error():
                continue
            self._heard_at = time.monotonic()
            self.faults.rebuild_record_replayed(self.partition)
            value = message.value() or b""
            self.records += self._replay.feed([value], self._commit, self.applied, self.partition)
            if self._own_fence is not None and self._own_fence in self._replay.fenced_off_epochs:
                raise StateDisowned(f"{self.log_topic}[{self.partition}] holds a batch of this state's, of epoch "
                                    f"{self._own_fence}, after a higher fence: sent after this worker had lost "
                                    "the partition, it is not applied by any reader of the log")
            if value.startswith((b'{"kind":"probe"', b'{"kind":"fence"')) \
                    and orjson.loads(value)["record_id"] == self._waiting_for:
                if not self.fence_it:
                    return True
                if self._fenced:
                    if self._replay.fences.get(self.partition) != self.epoch:
                        raise NotAMember(f"{self.log_topic}[{self.partition}] was fenced at "
                                         f"{self._replay.fences.get(self.partition)} above this worker's fence of "
                                         f"{self.epoch}: another worker holds it")
                    return True
                self._fence()

    def _fence(self) -> None:
        """At the probe: fence the partition over the last fence read, and read on up to the fence."""
        assert self.fencer is not None and self._replay is not None
        self.epoch, self.fence_id = self.fencer.fence({self.partition: self._replay.fences.get(self.partition)})[
            self.partition]
        self._waiting_for = self.fence_id
        self._fenced = True

    def _commit(self, pending: PendingLedger) -> None:
        mine = {position: offset for position, offset in self.applied.items() if position[1] == self.partition}
        self.store.commit(pending, self.bookkeeping.offset_puts(mine))

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


class Steppable(Protocol):
    """What ``Rebuilds`` needs of a rebuild (``PartitionRebuild``; a unit test's stand-in)."""

    partition: int
    records: int

    def step(self, budget: float) -> bool: ...

    def read_on(self) -> None: ...

    def close(self) -> None: ...


@dataclass
class Rebuilds(Generic[R]):
    """Which of a worker's partitions wait for a rebuild, which are rebuilding, and which are done.

    The worker hands in the partitions an assignment must rebuild (``expect``) and calls
    ``advance`` from its loop; a rebuild begins when there is room (``at_once`` side by side) and
    steps for its share of ``slice_seconds``. The rebuilt partitions resume together once none is
    left (``take_rebuilt``). A revocation suspends the rebuilds of the partitions it takes
    (``suspend``): with the eager protocol every rebalance revokes every partition, and the next
    assignment goes on with those it holds again (``expect``) rather than reading their logs anew.
    """

    start: Callable[[int], R]
    at_once: int = 4
    slice_seconds: float = 0.25
    waiting: dict[int, R | None] = field(default_factory=dict)
    """Partitions still to rebuild, in order: each one's rebuild once begun."""
    rebuilt: list[int] = field(default_factory=list)
    """Rebuilt partitions whose inputs resume once no other is left."""
    suspended: dict[int, R] = field(default_factory=dict)

    def expect(self, partitions: Iterable[int]) -> tuple[list[R], list[int]]:
        """Wait for these partitions' rebuilds: a suspended one goes on (``read_on``); any other
        suspended rebuild is closed. Returns (the rebuilds that go on, the partitions closed)."""
        going_on = []
        for partition in partitions:
            rebuild = self.waiting[partition] = self.suspended.pop(partition, None)
            if rebuild is not None:
                rebuild.read_on()
                going_on.append(rebuild)
        return going_on, self.close_suspended()

    def advance(self) -> tuple[list[R], int]:
        """One slice; returns (the rebuilds that finished, still open, and the log records replayed)."""
        active = [partition for partition, rebuild in self.waiting.items() if rebuild is not None]
        for partition, rebuild in list(self.waiting.items()):
            if len(active) >= self.at_once:
                break
            if rebuild is None:
                self.waiting[partition] = self.start(partition)
                active.append(partition)
        done, replayed = [], 0
        for partition in active:
            rebuild = self.waiting[partition]
            assert rebuild is not None
            before = rebuild.records
            if rebuild.step(self.slice_seconds / len(active)):
                done.append(partition)
            replayed += rebuild.records - before
        # Only once every step of the slice returned: a step that raises leaves all of them waiting, to
        # be closed with the rest (``suspend``).
        finished: list[R] = []
        for partition in done:
            rebuild = self.waiting.pop(partition)
            assert rebuild is not None
            finished.append(rebuild)
            self.rebuilt.append(partition)
        return finished, replayed

    def take_rebuilt(self) -> set[int]:
        """The rebuilt partitions to resume, once no rebuild is left waiting (else none)."""
        if self.waiting:
            return set()
        rebuilt, self.rebuilt = set(self.rebuilt), []
        return rebuilt

    def suspend(self, partitions: set[int]) -> list[R]:
        """Set the rebuilds of these partitions aside (returned); forget them as waiting or rebuilt."""
        self.rebuilt = [partition for partition in self.rebuilt if partition not in partitions]
        set_aside = []
        for partition in sorted(partitions & set(self.waiting)):
            rebuild = self.waiting.pop(partition)
            if rebuild is not None:
                self.suspended[partition] = rebuild
                set_aside.append(rebuild)
        return set_aside

    def close_suspended(self) -> list[int]:
        """Close the suspended rebuilds; returns their partitions."""
        closed = sorted(self.suspended)
        for partition in closed:
            self.suspended[partition].close()
        self.suspended = {}
        return closed
