"""The ledger worker: consume -> process -> commit (state + offsets + outbox) -> send -> trim.

Exactly-once *effect* without Kafka transactions (the embedded broker does not honour aborts):
each batch's state changes, the input offsets it consumed and the records it must emit are written
in one RocksDB WriteBatch. The outbox is then produced with an idempotent producer and trimmed.
After a crash the worker re-sends whatever is still in the outbox and resumes each partition after
its stored offset, so every input is applied once and every output is sent at least once with a
stable ``record_id`` that consumers de-duplicate on.

A parked outbox is re-sent only once this worker is assigned every input partition it consumed and
no other worker has owned any of them since. Otherwise another worker may have redone that batch
from the log (with its own transaction times), and what is parked, and the local state that holds
it, contradict the log: the worker then discards both and rebuilds its partitions from the log, and
their owners apply those inputs again. Who owned a partition since shows on ``partition-claims``:
at every assignment, before it sends anything processed from them, a worker claims its input
partitions there in the name of its state's lineage (``streams.worker.claims``). So a redo cut short by a
second crash, which never committed its offsets, still shows, by its claim.

The hot path is a confluent-kafka batch loop: measured here, a faust-streaming agent tops out near
5,000 events/s while this loop does the same work at several times that.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from processors.heap import SettledHeap
from processors.ledger import Misrouted
from processors.pending import BatchCounts, PendingLedger
from schemas.ontology import Ontology, default_ontology
from state.kv import RocksKV
from state.pipeline_store import GivenUp, PipelineStore
from state.store import EncodedVersion, LedgerStore
from streams.kafka.config import consumer_config
from streams.kafka.produce import deliver, delivery_producer
from streams.kafka.topics import INPUT_TOPICS, Topic, TopicSettings, tenant_partition
from streams.log.records import OutRecord, is_marker, outbox_for, parked_inputs
from streams.processor import make_processor
from streams.worker.claims import claim_partitions, latest_claims
from streams.worker.fences import Epoch, Fencer, NotAMember, group_generation
from streams.worker.rebuild import PartitionRebuild, Rebuilds, StateDisowned

log = logging.getLogger(__name__)

#: Failpoint for crash tests: die (as from kill -9) after committing batch N but before sending it.
FAILPOINT_CRASH_AFTER_COMMIT = "EDGELEDGER_FAILPOINT_CRASH_AFTER_COMMIT"
#: Failpoint for crash tests: die while sending batch N, once its records up to its first tenant's
#: marker are delivered (one tenant's part of the batch is whole on the log, the others' are not).
FAILPOINT_CRASH_MID_SEND = "EDGELEDGER_FAILPOINT_CRASH_MID_SEND"
#: Failpoint for crash tests: in batch N's send, lose its first edge version record (as a delivery that
#: timed out would), deliver the rest, then die (a worker stops on a failed delivery).
FAILPOINT_LOSE_RECORD = "EDGELEDGER_FAILPOINT_LOSE_RECORD"
#: Failpoint for crash tests: die once batch N is sent, before the group commits its offsets.
FAILPOINT_CRASH_AFTER_SEND = "EDGELEDGER_FAILPOINT_CRASH_AFTER_SEND"
#: Failpoint for crash tests: die (as from kill -9) as the first rebuild of a partition from the log begins.
FAILPOINT_CRASH_IN_REBUILD = "EDGELEDGER_FAILPOINT_CRASH_IN_REBUILD"
#: Failpoint for tests: ``SECONDS`` added to the replay of each log record in a rebuild (a long log).
FAILPOINT_SLOW_REBUILD = "EDGELEDGER_FAILPOINT_SLOW_REBUILD"
#: Failpoint for tests: ``N:PATH`` holds batch N, committed to the state and not yet checked or sent,
#: until the file PATH exists (a test pauses the process there, as a long stall would).
FAILPOINT_HOLD_BEFORE_SEND = "EDGELEDGER_FAILPOINT_HOLD_BEFORE_SEND"
#: Failpoint for tests: ``N:PATH`` holds batch N once the group has confirmed the worker a member, right
#: before it is sent, until the file PATH exists (the window the log's fences close).
FAILPOINT_HOLD_AFTER_CHECK = "EDGELEDGER_FAILPOINT_HOLD_AFTER_CHECK"
CRASH_EXIT_CODE = 137

NOT_A_MEMBER = frozenset({KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION,
                          KafkaError.REBALANCE_IN_PROGRESS, KafkaError.FENCED_INSTANCE_ID})
"""What the group coordinator answers a commit from a member it no longer counts in this generation."""
OWNERSHIP_CHECK_ATTEMPTS = 3
"""How often a worker asks before it gives up on an answer other than "not a member" (and stops)."""
REBUILDS_AT_ONCE = 4
"""Partitions rebuilt side by side, each with its own reader of the log."""
REBUILD_SLICE = 0.25
"""Seconds of rebuilding between two polls of the input consumer."""

CommitObserver = Callable[[PendingLedger], None]
LagObserver = Callable[[str, int, int], None]
"""(topic, partition, records not yet applied)."""
RebuildObserver = Callable[[int, int], None]
"""(log partitions left to rebuild, log records replayed since the last call)."""


@dataclass
class WorkerConfig:
    state_dir: Path
    bootstrap: str
    group_id: str = "edgeledger-ledger"
    topics: TopicSettings = field(default_factory=TopicSettings)
    batch_max: int = 2000
    poll_timeout: float = 0.05
    consumer_overrides: dict[str, str | int] = field(default_factory=dict)
    """librdkafka settings on top of the defaults (the embedded broker gets fast group joins)."""
    worker_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])


class LedgerWorker:
    def __init__(self, config: WorkerConfig, ontology: Ontology | None = None,
                 observers: list[CommitObserver] | None = None, on_consumer_lag: LagObserver | None = None,
                 lag_interval: float = 10.0, on_rebuild: RebuildObserver | None = None) -> None:
        self.config = config
        kv = RocksKV(config.state_dir)
        self.store = LedgerStore(kv)
        self.bookkeeping = PipelineStore(kv)
        self.processor = make_processor(ontology or default_ontology(), simulated_clock=False)
        self.observers = observers or []
        self.totals = BatchCounts()
        self.applied_offsets = self.bookkeeping.input_offsets()
        self.consumer = Consumer(consumer_config(config.bootstrap, config.group_id, **config.consumer_overrides))
        self.producer = delivery_producer(config.bootstrap)
        self.assigned: set[tuple[str, int]] = set()
        self._batches = 0
        self.on_consumer_lag = on_consumer_lag
        self.lag_interval = lag_interval
        self.on_rebuild = on_rebuild
        self._lag_due = time.monotonic()
        self._crash_after_commit = int(os.environ.get(FAILPOINT_CRASH_AFTER_COMMIT, "0") or 0)
        self._crash_mid_send = int(os.environ.get(FAILPOINT_CRASH_MID_SEND, "0") or 0)
        self._crash_after_send = int(os.environ.get(FAILPOINT_CRASH_AFTER_SEND, "0") or 0)
        self._lose_record = int(os.environ.get(FAILPOINT_LOSE_RECORD, "0") or 0)
        self._crash_in_rebuild = os.environ.get(FAILPOINT_CRASH_IN_REBUILD, "") == "1"
        self._rebuild_slowed_by = float(os.environ.get(FAILPOINT_SLOW_REBUILD, "0") or 0)
        held, _, self._hold_until = os.environ.get(FAILPOINT_HOLD_BEFORE_SEND, "").partition(":")
        self._hold_batch = int(held or 0)
        held, _, self._hold_checked_until = os.environ.get(FAILPOINT_HOLD_AFTER_CHECK, "").partition(":")
        self._hold_checked_batch = int(held or 0)
        self._inputs: list[str] = []
        self.heap = SettledHeap()
        self._parked: list[tuple[bytes, tuple[str, str, bytes, int]]] = []
        self._batch_first: dict[tuple[str, int], int] = {}
        """The first input offset of each (topic, partition) in the batch being applied."""
        self._log_partitions = self.config.topics.partitions_for(Topic.EDGE_VERSIONS)
        self._assigned_at = time.monotonic()
        self._arrival: tuple[str, int] = ("", -1)
        """The (topic, partition) of the record being applied, for ``_misrouted``."""
        self._routing_rule: Misrouted = self._misrouted  # Speed: one bound method, not one per record
        self._last_sent: dict[int, str] = {}
        """Per log partition: the id of the last record this worker sent there (its last batch's marker
        without a tenant), since it last took the partition (``_note_given_up``)."""
        self.rebuilds = Rebuilds(self._start_rebuild, REBUILDS_AT_ONCE, REBUILD_SLICE)
        """Log partitions to rebuild before their inputs resume (``streams.worker.rebuild.Rebuilds``)."""
        self.fencer = Fencer(self.producer, config.topics.name(Topic.EDGE_VERSIONS), config.worker_id,
                             lambda: self.bookkeeping.lineage, lambda: group_generation(self.consumer),
                             self._confirm_member, self._keep_fences)
        self._must_rejoin = False
        """An assignment could not fence its partitions: the loop lets them go and joins again."""
        self._fences: dict[int, Epoch] = {}
        """Per log partition: the epoch of the fence this worker put there when it last took the
        partition; its markers there carry it (``streams.worker.fences``)."""

    # -- lifecycle ---------------------------------------------------------------------------------
    def run(self, stop: threading.Event | None = None, idle_exit_after: float | None = None) -> BatchCounts:
        """Process until ``stop`` is set (or, for tests and backfills, after ``idle_exit_after`` idle seconds)."""
        stop = stop or threading.Event()
        self._log_partitions = self._partitions_of(self.config.topics.name(Topic.EDGE_VERSIONS))
        try:
            self._check_co_partitioned()
        except ValueError:
            self.close()
            raise
        self._parked = self.bookkeeping.outbox()
        if self._parked:
            log.info("found %d outbox records a previous run committed but may not have sent: they are "
                     "settled once this worker is assigned its partitions", len(self._parked))
        self._inputs = [self.config.topics.name(t) for t in INPUT_TOPICS]
        self._subscribe()
        log.info("worker %s consuming %s", self.config.worker_id, ", ".join(self._inputs))
        idle_since = time.monotonic()
        try:
            with self.heap:
                while not stop.is_set():
                    self._report_lag()
                    if self.rebuilds.waiting:
                        self._advance_rebuilds()
                        idle_since = time.monotonic()
                    if self.process_batch():
                        idle_since = time.monotonic()
                        continue
                    # An assignment is not idle time, nor is a rebuild (above).
                    quiet_since = max(idle_since, self._assigned_at)
                    if idle_exit_after is not None and time.monotonic() - quiet_since > idle_exit_after:
                        break
                    self.heap.when_idle()
        finally:
            self.close()
        return self.totals

    def _subscribe(self) -> None:
        self.consumer.subscribe(self._inputs, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_lost)

    def _check_co_partitioned(self) -> None:
        """Refuse to start unless every input topic has as many partitions as ``edge-versions``: a
        tenant's inputs and its log records must share a partition number (``_misrouted``), and with
        other counts a correctly keyed tenant's every record would be refused."""
        uneven = {name: count for name in (self.config.topics.name(t) for t in INPUT_TOPICS)
                  if (count := self._partitions_of(name)) != self._log_partitions}
        if uneven:
            listed = ", ".join(f"{name} has {count}" for name, count in sorted(uneven.items()))
            raise ValueError(f"the input topics must have as many partitions as "
                             f"{self.config.topics.name(Topic.EDGE_VERSIONS)} ({self._log_partitions}), so that "
                             f"a tenant's inputs and log records share a partition number: {listed}")

    def _partitions_of(self, topic: str) -> int:
        """The topic's partition count as the cluster has it (the configured one if it cannot say):
        markers are sent to partitions by number, and a topic made elsewhere may have fewer."""
        metadata = self.consumer.list_topics(topic, timeout=30).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            return self.config.topics.partitions_for(Topic.EDGE_VERSIONS)
        return len(metadata.partitions)

    def close(self) -> None:
        self._abandon_rebuilds()
        self.producer.flush(10)
        self.consumer.close()
        self.store.close()
        self.heap.release()

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Resume each partition right after the last offset this state applied (not the group's).

        When the group committed further than this state applied (another worker owned the
        partition meanwhile, or this disk was lost), or another state claimed it since this one did
        (another worker owned it and may have sent batches whose offsets it never committed), first
        rebuild it from the ``edge-versions`` log: the batches this state applied are skipped there.
        Such a partition's inputs are assigned paused; the worker's loop rebuilds it (``streams.worker.rebuild``)
        and then resumes them, while the other partitions go on.
        """
        committed = consumer.committed(partitions, timeout=30)
        claims = latest_claims(self.producer, self.config.bootstrap, self.config.topics, self.config.group_id)
        behind = self._behind(committed, claims)
        if self._parked and self._settle_parked(partitions, committed, claims):
            # Discarded: every assigned partition is rebuilt, also one the group has no offset for,
            # whose batches may be on the log all the same (their offsets' commit was lost).
            behind = sorted({tp.partition for tp in partitions})
        assigned = {tp.partition for tp in partitions}
        behind = sorted(set(behind) | (self.bookkeeping.rebuilding() & assigned))
        # Claimed before the rebuilds, which can take long: a worker that takes a partition over
        # meanwhile claims it after this one, so the last claim names the later owner. The rebuilds
        # are marked first, so that a crash during one is not mistaken, by the claim, for its end.
        self.bookkeeping.begin_rebuilds(behind)
        claim_partitions(self.producer, self.config.topics, self.config.group_id,
                         sorted(assigned), self.bookkeeping.lineage, self.config.worker_id)
        # After the parked batch is sent (``_settle_parked``), which carries the fence before this one.
        try:
            self._fence(sorted(assigned - set(behind)))
            self.bookkeeping.take_back(sorted(assigned - set(behind)))  # its state applies their inputs again
        except NotAMember as lost:
            # Nothing of this assignment is applied (``_apply`` skips what is not ``assigned``): the loop
            # lets it go and joins again.
            log.warning("worker %s cannot fence its partitions and joins the group again: %s",
                        self.config.worker_id, lost)
            self._must_rejoin = True
            consumer.assign(partitions)
            consumer.pause(partitions)
            self._assigned_at = time.monotonic()
            return
        held: list[TopicPartition] = []
        for tp in partitions:
            if tp.partition in behind:
                # Paused until rebuilt, then assigned again at its place (``_resume_rebuilt``). From the
                # beginning meanwhile: a fetch that began before the pause can only bring records
                # from offset 0 on, which the applied offsets then skip, never a later one past a gap.
                tp.offset = OFFSET_BEGINNING
                held.append(tp)
            else:
                tp.offset = self._resume_offset(tp)
                self.assigned.add((tp.topic, tp.partition))
        consumer.assign(partitions)
        # A pause outlives an assignment in librdkafka: a partition paused for a rebuild that ended
        # before the previous generation resumed it would otherwise stay paused.
        consumer.resume([tp for tp in partitions if tp not in held])
        if held:
            consumer.pause(held)
        # A rebuild the last revocation suspended goes on where it was, rather than from offset 0;
        # the suspended rebuilds of partitions this assignment does not hold are closed.
        going_on, closed = self.rebuilds.expect(behind)
        for rebuild in going_on:
            log.info("worker %s goes on rebuilding partition %d", self.config.worker_id, rebuild.partition)
        self._log_stopped(closed)
        self._report_rebuilds(0)
        self._assigned_at = time.monotonic()
        log.info("worker %s assigned %s%s", self.config.worker_id,
                 sorted(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in partitions if tp not in held),
                 f"; rebuilds partition(s) {behind} from the log first" if behind else "")

    def _fence(self, partitions: list[int]) -> None:
        """Fence the log partitions this worker takes without a rebuild, over the last fence its state
        knows there: no other state took them since (their claims say), so no later fence than its
        own, or one it read, can be there but a late writer's, of a lower epoch."""
        known = self.bookkeeping.fences()
        written = self.fencer.fence({p: known.get(p) for p in partitions if p < self._log_partitions})
        for partition, (_, record_id) in written.items():
            self._last_sent[partition] = record_id  # what a rebuild from where it is given up looks for

    def _keep_fences(self, epochs: dict[int, Epoch]) -> None:
        """Every fence this worker writes, before it is delivered: in its state, and for its markers."""
        self.bookkeeping.record_fences(epochs)
        self._fences.update(epochs)

    def _confirm_member(self, partition: int) -> bool:
        """Whether the group counts this worker a member now, asked as ``_still_a_member`` asks: a
        synchronous commit, here of the offsets the group holds for the input partitions of that number
        (0 where it holds none), which moves nothing."""
        asked = self.consumer.committed([TopicPartition(topic, partition) for topic in self._inputs], timeout=30)
        held = [tp for tp in asked if tp.offset >= 0]
        return self._ask_membership(held or [TopicPartition(self._inputs[0], partition, 0)])

    def _resume_offset(self, tp: TopicPartition) -> int:
        """Right after the last offset this state applied (not the group's), or the beginning."""
        applied = self.applied_offsets.get((tp.topic, tp.partition))
        return applied + 1 if applied is not None else OFFSET_BEGINNING

    def _advance_rebuilds(self) -> None:
        """One slice of the pending rebuilds. Once the last is done, the rebuilt partitions' inputs
        resume together, as when they were rebuilt inside the rebalance callback: a batch then
        spans them all."""
        try:
            finished, replayed = self.rebuilds.advance()
        except StateDisowned as disowned:
            log.warning("worker %s discards its local state: %s; it rebuilds its partitions from the log",
                        self.config.worker_id, disowned)
            self._discard_state()
            self._join_again()  # in its new lineage, every partition is another's
            return
        except NotAMember as lost:
            log.warning("worker %s stops its rebuilds and joins the group again: %s", self.config.worker_id, lost)
            self._join_again()
            return
        for rebuild in finished:
            self._finish_rebuild(rebuild)
        rebuilt = self.rebuilds.take_rebuilt()
        if rebuilt:
            self._resume_rebuilt(rebuilt)
        self._report_rebuilds(replayed)

    def _report_rebuilds(self, replayed: int) -> None:
        if self.on_rebuild is not None:
            self.on_rebuild(len(self.rebuilds.waiting), replayed)

    def _start_rebuild(self, partition: int, quiet_for: float = 1.0, stalled_after: float = 120.0,
                       fence_it: bool = True) -> PartitionRebuild:
        if self._crash_in_rebuild:
            os._exit(CRASH_EXIT_CODE)
        self._last_sent.pop(partition, None)
        start_at, start_after, start_fence = self.bookkeeping.given_up_at().get(
            partition, GivenUp(OFFSET_BEGINNING, ""))
        log.info("worker %s rebuilds partition %d from the log, %s", self.config.worker_id, partition,
                 f"from offset {start_at}, where it gave the partition up" if start_at >= 0 else "from the beginning")
        applied = {position: offset for position, offset in self.applied_offsets.items() if position[1] == partition}
        return PartitionRebuild(self.store, self.bookkeeping, self.config.bootstrap, self.config.group_id,
                                self.config.topics.name(Topic.EDGE_VERSIONS), partition, applied, start_at, start_after,
                                start_fence=start_fence, fencer=self.fencer, fence_it=fence_it, quiet_for=quiet_for,
                                stalled_after=stalled_after, slowed_by=self._rebuild_slowed_by)

    def _finish_rebuild(self, rebuild: PartitionRebuild) -> None:
        rebuild.close()
        self._restore_offsets(rebuild)
        if rebuild.fence_id:
            self._last_sent[rebuild.partition] = rebuild.fence_id
        self.bookkeeping.end_rebuild(rebuild.partition)
        log.info("worker %s rebuilt partition %d from %d log records (offset %d on) in %.1f s", self.config.worker_id,
                 rebuild.partition, rebuild.records, max(rebuild.start_at, 0), time.monotonic() - rebuild.started_at)

    def _restore_offsets(self, rebuild: PartitionRebuild) -> None:
        """The input offsets the replayed batches recorded, as the state's rows now hold them."""
        for position, offset in rebuild.applied.items():
            self.applied_offsets[position] = max(offset, self.applied_offsets.get(position, -1))

    def _resume_rebuilt(self, rebuilt: set[int]) -> None:
        """Assign the whole assignment again, each partition right after what this state applied, and
        resume the rebuilt ones: their fetches then start together, as at an assignment (a seek per
        partition started them one by one, and a batch right after held only some of them)."""
        assignment = self.consumer.assignment()
        for tp in assignment:
            tp.offset = self._resume_offset(tp)
            self.assigned.add((tp.topic, tp.partition))
        self.consumer.assign(assignment)
        held = [tp for tp in assignment if tp.partition in rebuilt]
        self.consumer.resume(held)
        log.info("worker %s resumes %s", self.config.worker_id,
                 sorted(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in held))

    def _suspend_rebuilds(self, partitions: set[int]) -> None:
        """Set the rebuilds of revoked partitions aside (``Rebuilds.suspend``). What they replayed stays,
        with its offsets, and so do their rebuild marks."""
        for rebuild in self.rebuilds.suspend(partitions):
            self._restore_offsets(rebuild)

    def _abandon_rebuilds(self) -> None:
        """Close every rebuild, running or suspended: the worker leaves its partitions, or its state is
        gone. A partition's rebuild mark stays, so that it is rebuilt on from what was replayed if it
        comes back."""
        self._suspend_rebuilds(set(self.rebuilds.waiting))
        self._log_stopped(self.rebuilds.close_suspended())
        self._report_rebuilds(0)

    def _log_stopped(self, partitions: list[int]) -> None:
        for partition in partitions:
            log.info("worker %s stops rebuilding partition %d", self.config.worker_id, partition)

    def _behind(self, committed: list[TopicPartition], claims: dict[int, str]) -> list[int]:
        """Partitions another worker owned since this state did: the group's offset is past what this
        state applied, or another state claimed the partition last. A partition nobody claimed yet
        (claims began with session 12) is judged by the offsets alone."""
        lineage = self.bookkeeping.lineage
        return sorted({
            tp.partition for tp in committed
            if (tp.offset >= 0 and tp.offset - 1 > self.applied_offsets.get((tp.topic, tp.partition), -1))
            or claims.get(tp.partition, lineage) != lineage
        })

    def _settle_parked(self, partitions: list[TopicPartition], committed: list[TopicPartition],
                       claims: dict[int, str]) -> bool:
        """Re-send the parked outbox if it is still this worker's to send; else discard it with the
        local state (see the module docstring). True when the state was discarded.

        It is this worker's while each input partition the batch consumed is assigned here and was
        claimed last by this state: any other state that took the partition over claimed it before
        sending a record, so its redo, whole or cut short, is on the log, and this copy must not
        follow it. A partition with no claim (none yet: claims began with session 12) counts as another's. The group's
        offset past the batch's first offset there tells the same, and is kept as a check."""
        consumed = parked_inputs(record for _, record in self._parked)
        assigned = {(tp.topic, tp.partition) for tp in partitions}
        group = {(tp.topic, tp.partition): tp.offset for tp in committed}
        overtaken = sorted({position[1] for position, first in consumed.items()
                            if group.get(position, -1) > first or claims.get(position[1]) != self.bookkeeping.lineage})
        missing = sorted(set(consumed) - assigned)
        if not overtaken and not missing:
            self._send_outbox()
            return False
        log.warning("worker %s discards its local state and %d parked outbox records: %s; it rebuilds its "
                    "partitions from the log", self.config.worker_id, len(self._parked),
                    f"another worker owned partition(s) {overtaken} since" if overtaken
                    else f"input partition(s) {missing} it consumed are assigned elsewhere")
        self._discard_state()
        return True

    def _discard_state(self) -> None:
        """Forget the local state: it is rebuilt from the log, in a new lineage."""
        self._abandon_rebuilds()  # first: what they restored belongs to the state about to go
        self.store.reset()
        self.bookkeeping.reset()
        self.applied_offsets = {}
        self._parked = []
        self._fences = {}
        self._last_sent = {}

    def _report_lag(self) -> None:
        """Records behind the high watermark per assigned partition (on the embedded broker the
        watermark counts record batches, so this understates lag there). The watermark is the one
        the consumer's fetches last brought back: asking the broker would block the loop for a
        round trip per partition. A partition nothing was fetched from yet has none and is skipped."""
        if self.on_consumer_lag is None or time.monotonic() < self._lag_due:
            return
        self._lag_due = time.monotonic() + self.lag_interval
        for topic, partition in sorted(self.assigned):
            try:
                _, high = self.consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            except Exception as error:
                log.debug("no watermark for %s[%d]: %s", topic, partition, error)
                continue
            if high < 0:
                continue
            applied = self.applied_offsets.get((topic, partition), -1)
            self.on_consumer_lag(topic, partition, max(0, high - applied - 1))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        applying = sorted({tp.partition for tp in partitions if (tp.topic, tp.partition) in self.assigned})
        self._let_go(partitions)
        self._note_given_up(applying)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions gone without a rebalance this worker took part in (its session ran out): another
        worker may hold them already, and have written to their logs, so where those end is not noted."""
        self._let_go(partitions)

    def _let_go(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.assigned.discard((tp.topic, tp.partition))
        self._suspend_rebuilds({tp.partition for tp in partitions})

    def _note_given_up(self, partitions: list[int]) -> None:
        """Note where the log of each partition this worker was applying ends now (``PipelineStore.give_up``).
        The state holds that log before there: every batch this worker sent was delivered before it
        polled again, only a partition's owner writes to its log, and in a rebalance no other worker
        owns the partition yet. So if the partition comes back after another worker held it, its
        rebuild replays only what that worker added, from right after the last record this worker
        sent there, looked for from that end on (``PartitionRebuild.start_after``): a worker dropped
        from the group without knowing it yet may note an end past others' records, and the embedded
        broker's end counts short. Not while the outbox holds
        records not known to be sent (a batch parked, or one whose send failed as the worker stops):
        the state then holds more than the log. Nor for a partition this worker sent nothing to since
        it took the partition (a rebuild's last record is another's).

        Nor for a partition whose last claim is another state's, asked once the ends are read: this
        worker was then dropped without knowing it, and a batch it sent after the check may be on the
        log after the new owner's fence, right before the end. Claimed after the ends were read, the
        new owner has written nothing before them (it claims before it writes to the log)."""
        if self.bookkeeping.outbox():  # what is parked is in the outbox too, until sent
            return
        log_topic = self.config.topics.name(Topic.EDGE_VERSIONS)
        ends = {}
        for partition in partitions:
            last_sent = self._last_sent.get(partition)
            if partition >= self._log_partitions or last_sent is None:
                continue
            try:
                _, end = self.consumer.get_watermark_offsets(TopicPartition(log_topic, partition),
                                                             timeout=10, cached=False)
                ends[partition] = GivenUp(end, last_sent, self._fences.get(partition))
            except (KafkaException, RuntimeError) as error:  # RuntimeError: the consumer is closing
                log.warning("worker %s could not read where %s[%d] ends (%s): if it comes back after another "
                            "worker held it, it is rebuilt from the beginning", self.config.worker_id, log_topic,
                            partition, error)
        if ends:
            try:
                claims = latest_claims(self.producer, self.config.bootstrap, self.config.topics, self.config.group_id,
                                       timeout=10)  # inside the rebalance: the group waits
            except (KafkaException, RuntimeError, TimeoutError) as error:
                log.warning("worker %s could not read the partition claims (%s): partitions %s are rebuilt from "
                            "the beginning if they come back", self.config.worker_id, error, sorted(ends))
                return
            overtaken = sorted(p for p in ends if claims.get(p) != self.bookkeeping.lineage)
            if overtaken:
                log.warning("worker %s: another state claimed partition(s) %s before this one gave them up; "
                            "where their logs end is not noted", self.config.worker_id, overtaken)
            ends = {p: end for p, end in ends.items() if p not in overtaken}
        self.bookkeeping.give_up(ends)

    # -- the loop ------------------------------------------------------------------------------------
    def process_batch(self) -> int:
        """One consume-process-produce round; returns how many input records it applied. Each stage is
        a method of its own, so a benchmark can time them by overriding (``tests.benchmarks.pipeline_load``)."""
        messages = self._consume()
        if self._must_rejoin:
            self._must_rejoin = False
            self._join_again()
            return 0
        if not messages:
            return 0
        pending, consumed = self._apply(messages)
        if not consumed:
            return 0
        records, outbox_keys = self._commit(pending, consumed)
        self._observe(pending)
        if self._batches == self._crash_after_commit:
            os._exit(CRASH_EXIT_CODE)
        if self._batches == self._hold_batch:
            self._hold(self._hold_until)
        if not self._still_a_member():
            self._park_lost_batch()
            return len(consumed)
        if self._batches == self._hold_checked_batch:
            self._hold(self._hold_checked_until)
        if self._batches == self._crash_mid_send:
            self._send(through_first_marker(records))
            os._exit(CRASH_EXIT_CODE)
        if self._batches == self._lose_record:
            self._send(without_first_version(records))
            os._exit(CRASH_EXIT_CODE)
        self._send(records)
        if self._batches == self._crash_after_send:
            os._exit(CRASH_EXIT_CODE)
        self.bookkeeping.trim(outbox_keys)
        self._commit_offsets(consumed)
        return len(consumed)

    def _still_a_member(self) -> bool:
        """Whether the group still counts this worker as the owner of its partitions, asked right before
        a batch is sent. A worker the group evicted while it applied the batch (a paused process, a
        batch or rebuild longer than ``max.poll.interval.ms``) must not send it: another worker may
        have rebuilt those partitions from the log and redone the inputs, and the two copies on the
        log would contradict each other. The question is a synchronous commit of the offsets the batch
        started from: the coordinator refuses it from a member of an earlier generation, and it moves
        no offset past what the log holds. Other errors are retried, then raised (the worker stops,
        and its restart settles the batch from the outbox)."""
        started = [TopicPartition(topic, partition, offset) for (topic, partition), offset in self._batch_first.items()]
        if self._ask_membership(started):
            return True
        log.warning("worker %s does not send batch %d", self.config.worker_id, self._batches)
        return False

    def _ask_membership(self, offsets: list[TopicPartition]) -> bool:
        """Commit ``offsets`` synchronously: True once the coordinator takes them, False when it answers
        that this worker is not a member of its generation; other errors are retried, then raised."""
        attempt = 1
        while True:
            try:
                self.consumer.commit(offsets=offsets, asynchronous=False)
                return True
            except KafkaException as error:
                if error.args[0].code() in NOT_A_MEMBER:
                    log.warning("worker %s is no longer a member of the group (%s)", self.config.worker_id,
                                error.args[0].str())
                    return False
                if attempt == OWNERSHIP_CHECK_ATTEMPTS:
                    raise
                log.warning("worker %s could not confirm it is still a member of the group (%s); asking again",
                            self.config.worker_id, error.args[0].str())
                time.sleep(0.5 * attempt)
                attempt += 1

    def _join_again(self) -> None:
        """Let every partition go and join the group anew: the next assignment settles what is held."""
        self.assigned.clear()
        self._abandon_rebuilds()
        self.consumer.unsubscribe()
        self._subscribe()

    def _park_lost_batch(self) -> None:
        """The batch is committed to the state and its outbox but not sent: park it as a restart would
        find it, and join the group again; the next assignment settles it (``_settle_parked``: sent if
        the partitions came back untouched, else discarded with the state, which is rebuilt from the
        log). Until then no record of a partition held before is applied."""
        self._parked = self.bookkeeping.outbox()
        self._join_again()

    def _hold(self, until: str) -> None:
        log.warning("worker %s holds batch %d until %s exists (a failpoint)", self.config.worker_id, self._batches,
                    until)
        while not os.path.exists(until):
            time.sleep(0.05)

    def _consume(self) -> list[Message]:
        # While a rebuild is pending the loop does not wait for input: the rebuild is the work.
        timeout = 0 if self.rebuilds.waiting else self.config.poll_timeout
        return self.consumer.consume(num_messages=self.config.batch_max, timeout=timeout)

    def _apply(self, messages: list[Message]) -> tuple[PendingLedger, dict[tuple[str, int], int]]:
        """Run the ledger's processor over the batch; the last offset applied per (topic, partition)."""
        pending = PendingLedger(self.store)
        consumed: dict[tuple[str, int], int] = {}
        first = self._batch_first = {}
        batch: list[tuple[Message, tuple[str, int]]] = []
        raws: list[bytes | str] = []
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    log.warning("consume error: %s", error)
                continue
            position = (message.topic(), message.partition())
            if message.offset() <= self.applied_offsets.get(position, -1) or position not in self.assigned:
                continue
            batch.append((message, position))
            raws.append(message.value() or b"")
        for (message, position), raw, validated in zip(batch, raws, self.processor.prepare(raws, pending),
                                                       strict=True):
            self._arrival = position
            letters = len(pending.dead_letters)
            self.processor.process(raw, pending, self._routing_rule, validated)
            if len(pending.dead_letters) > letters:  # a dead letter says where the event was read
                pending.dead_letters[-1] = replace(pending.dead_letters[-1], input_topic=position[0],
                                                   input_partition=position[1], input_offset=message.offset())
            self.heap.after_event()
            consumed[position] = message.offset()
            first.setdefault(position, message.offset())
        return pending, consumed

    def _misrouted(self, tenant: str) -> str | None:
        """Why an event of ``tenant`` may not be applied from the partition it arrived on, or None. A
        tenant's inputs must arrive on the partition number its log records go to: a rebuild of that
        partition replays them from there, and another worker holding another partition would keep a
        second, diverging copy of the tenant's state (an input keyed by something else, or by nothing,
        or hashed by another partitioner)."""
        topic, partition = self._arrival
        expected = tenant_partition(tenant, self._log_partitions)
        if partition == expected:
            return None
        return (f"misrouted: events of tenant {tenant!r} belong on partition {expected} of {topic}, where its "
                f"edge-versions records go (the CRC-32 of the tenant as key, modulo {self._log_partitions}, "
                f"librdkafka's default partitioner), and this one arrived on partition {partition}: produce "
                "it keyed by its tenant, as `edgeledger produce` does")

    def _commit(self, pending: PendingLedger,
                consumed: dict[tuple[str, int], int]) -> tuple[list[OutRecord], list[bytes]]:
        """The batch's state, its input offsets and its outbox in one WriteBatch; returns the records to
        send and the outbox rows to trim once they are sent."""
        self._batches += 1
        batch_id = f"{self.config.worker_id}-{self._batches}-{min(consumed.values())}"
        records: list[OutRecord] = []
        outbox_keys: list[bytes] = []

        def outbox(versions: list[EncodedVersion]) -> list[tuple[bytes, bytes]]:
            records.extend(self._outbox(pending, versions, consumed, batch_id))
            puts, keys = self.bookkeeping.outbox_puts(records)  # an OutRecord is a (topic, key, value, partition)
            outbox_keys.extend(keys)
            return puts

        self.store.commit(pending, self.bookkeeping.offset_puts(consumed), outbox)
        self.applied_offsets.update(consumed)
        self.totals.add(pending.counts)
        return records, outbox_keys

    def _outbox(self, pending: PendingLedger, versions: list[EncodedVersion],
                consumed: dict[tuple[str, int], int], batch_id: str) -> list[OutRecord]:
        """A method of its own (as ``_commit_offsets``) so that a benchmark can time it apart from the commit."""
        return outbox_for(pending, versions, consumed, batch_id, self._log_partitions, self._batch_first, self._fences)

    def _observe(self, pending: PendingLedger) -> None:
        for observe in self.observers:
            observe(pending)

    def _commit_offsets(self, consumed: dict[tuple[str, int], int]) -> None:
        self.consumer.commit(offsets=[TopicPartition(t, p, o + 1) for (t, p), o in consumed.items()],
                             asynchronous=True)

    def _rebuild_partition(self, partition: int, quiet_for: float = 1.0, stalled_after: float = 120.0) -> None:
        """Rebuild one partition to the end at once (``streams.worker.rebuild.PartitionRebuild``), outside the
        loop: for tests and benchmarks that replay a log into a worker's state directly."""
        rebuild = self._start_rebuild(partition, quiet_for, stalled_after, fence_it=False)
        try:
            while not rebuild.step(REBUILD_SLICE):
                pass
        except BaseException:
            rebuild.close()
            raise
        self._finish_rebuild(rebuild)  # closes it

    def _send_outbox(self) -> None:
        """Re-send what a previous run committed but may not have sent (crash between commit and send)."""
        parked, self._parked = self._parked, []
        if parked:
            log.info("re-sending %d outbox records left by a previous run", len(parked))
            self._send([OutRecord(*record) for _, record in parked])
            self.bookkeeping.trim([key for key, _ in parked])

    def _send(self, records: list[OutRecord]) -> None:
        name = self.config.topics.name
        deliver(self.producer, ((name(r.topic), r.key.encode(), r.value, r.partition) for r in records), 30)
        # A batch ends with its markers without a tenant, the last records it puts on those partitions.
        for record in reversed(records):
            if record.topic != Topic.EDGE_VERSIONS or record.partition < 0 or not is_marker(record.value):
                break
            self._last_sent[record.partition] = orjson.loads(record.value)["record_id"]


def without_first_version(records: list[OutRecord]) -> list[OutRecord]:
    """A send that lost a record, for ``FAILPOINT_LOSE_RECORD``: all but the first edge version record."""
    for index, record in enumerate(records):
        if record.topic == Topic.EDGE_VERSIONS and record.value.startswith(b'{"kind":"edge_version"'):
            return records[:index] + records[index + 1:]
    return records


def through_first_marker(records: list[OutRecord]) -> list[OutRecord]:
    """A send cut short, for ``FAILPOINT_CRASH_MID_SEND``: the records up to and including the first
    batch marker on the log (all of them if there is none)."""
    for index, record in enumerate(records):
        if record.topic == Topic.EDGE_VERSIONS and is_marker(record.value):
            return records[:index + 1]
    return records
