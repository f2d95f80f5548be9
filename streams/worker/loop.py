"""The ledger worker: consume -> apply -> commit (state + offsets + outbox) -> check -> send -> trim.

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
their owners apply those inputs again. Who owned a partition since shows on ``partition-claims``
(``streams.worker.assignment``), so a redo cut short by a second crash, which never committed its
offsets, still shows, by its claim.

The worker's parts: ``assignment`` (the rebalance callbacks), ``membership`` (is it still the
owner?), ``rebuilding`` (partitions replayed from the log), ``holdings`` (what they share) and
``faults`` (where a test makes it fail). The hot path is a confluent-kafka batch loop: measured
here, a faust-streaming agent tops out near 5,000 events/s while this loop does the same work at
several times that.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from processors.heap import SettledHeap
from processors.ledger import Misrouted
from processors.model import EncodedVersion, Epoch
from processors.outbox import OutRecord, is_marker, outbox_for
from processors.pending import BatchCounts, PendingLedger
from schemas.ontology import Ontology, default_ontology
from schemas.topics import Topic, tenant_partition
from state.kv import RocksKV
from state.pipeline_store import PipelineStore
from state.store import LedgerStore
from streams.kafka.config import consumer_config
from streams.kafka.liveness import AssignmentWatch, BrokerWatch
from streams.kafka.produce import deliver, delivery_producer
from streams.kafka.topics import INPUT_TOPICS, TopicSettings
from streams.processor import make_processor
from streams.worker.assignment import Assignment
from streams.worker.cluster import LagObserver, LagReport, check_co_partitioned, partitions_of
from streams.worker.faults import NO_FAULTS, Faults
from streams.worker.fences import Fencer, group_generation
from streams.worker.holdings import Holdings, InputPosition
from streams.worker.membership import Membership
from streams.worker.rebuild import PartitionRebuild, Rebuilds
from streams.worker.rebuilding import Rebuilding, RebuildObserver

log = logging.getLogger(__name__)

CRASH_EXIT_CODE = 137
"""How a worker killed with SIGKILL exits, and how a test's fault ends one (``tests.support.faulty_worker``)."""

CommitObserver = Callable[[PendingLedger], None]


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
    broker_timeout: float = 60.0
    """Seconds the cluster may stay out of reach before the worker fails (``BrokerUnreachable``)."""
    assignment_timeout: float = 60.0
    """Seconds of waiting for an assignment before a warning (``streams.kafka.liveness.AssignmentWatch``)."""
    close_timeout: float = 3.0
    """Seconds a stop waits for records on their way to the broker."""


class LedgerWorker:
    """One member of the ledger's consumer group: its loop, and the parts it hands the protocol to."""

    def __init__(self, config: WorkerConfig, ontology: Ontology | None = None,
                 observers: list[CommitObserver] | None = None, on_consumer_lag: LagObserver | None = None,
                 lag_interval: float = 10.0, on_rebuild: RebuildObserver | None = None,
                 faults: Faults = NO_FAULTS) -> None:
        self.config = config
        kv = RocksKV(config.state_dir)
        self.store = LedgerStore(kv)
        self.bookkeeping = PipelineStore(kv)
        self.processor = make_processor(ontology or default_ontology(), simulated_clock=False)
        self.observers = observers or []
        self.faults = faults
        self.totals = BatchCounts()
        self.broker = BrokerWatch(config.bootstrap, config.broker_timeout)
        self.waiting = AssignmentWatch(config.group_id, config.bootstrap, config.state_dir, config.assignment_timeout)
        self.consumer = Consumer(consumer_config(config.bootstrap, config.group_id, error_cb=self.broker.error_cb,
                                                 **config.consumer_overrides))
        self.producer = delivery_producer(config.bootstrap, error_cb=self.broker.error_cb)
        self.heap = SettledHeap()
        self._batches = 0
        self.holdings = Holdings(config.topics.partitions_for(Topic.EDGE_VERSIONS), self.bookkeeping.input_offsets())
        self.report_lag = LagReport(self.consumer, self.holdings, on_consumer_lag, lag_interval)
        self._arrival: InputPosition = ("", -1)
        """The (topic, partition) of the record being applied, for ``_misrouted``."""
        self._routing_rule: Misrouted = self._misrouted  # Speed: one bound method, not one per record
        self.membership = Membership(self.consumer, self.holdings, config.worker_id, self._subscribe,
                                     self._abandon_rebuilds)
        self.fencer = Fencer(self.producer, config.topics.name(Topic.EDGE_VERSIONS), config.worker_id,
                             lambda: self.bookkeeping.lineage, lambda: group_generation(self.consumer),
                             self.membership.confirm_member, self._keep_fences)
        self.rebuilding = Rebuilding(self.store, self.bookkeeping, self.consumer, self.fencer, self.holdings,
                                     config.bootstrap, config.group_id, config.topics, config.worker_id, faults,
                                     on_rebuild, self._discard_state, self.membership.join_again)
        self.assignment = Assignment(self.store, self.bookkeeping, self.producer, self.fencer, self.holdings,
                                     self.rebuilding, config.bootstrap, config.group_id, config.topics,
                                     config.worker_id, self._send)

    @property
    def applied_offsets(self) -> dict[InputPosition, int]:
        """The last input offset the state applied, per input partition."""
        return self.holdings.applied_offsets

    @property
    def assigned(self) -> set[InputPosition]:
        return self.holdings.assigned

    @property
    def rebuilds(self) -> Rebuilds[PartitionRebuild]:
        return self.rebuilding.rebuilds

    # -- lifecycle ---------------------------------------------------------------------------------
    def run(self, stop: threading.Event | None = None, idle_exit_after: float | None = None,
            until: Callable[[], bool] | None = None) -> BatchCounts:
        """Process until ``stop`` is set or ``until()`` holds (asked between batches), or, for
        backfills, after ``idle_exit_after`` idle seconds: waiting for the group's assignment is not
        idleness, and fails the run past ``assignment_timeout`` (``NoAssignment``). Fails too once the
        cluster has been out of reach for ``broker_timeout`` (``BrokerUnreachable``)."""
        stop = stop or threading.Event()
        holdings = self.holdings
        try:
            if not self.broker.reach(self._ask_cluster, stop.is_set):
                self.close()
                return self.totals
            topics = self.config.topics
            holdings.log_partitions = partitions_of(self.consumer, topics.name(Topic.EDGE_VERSIONS),
                                                    topics.partitions_for(Topic.EDGE_VERSIONS))
            check_co_partitioned(self.consumer, topics, holdings.log_partitions)
        except BaseException:
            self.close()
            raise
        holdings.parked = self.bookkeeping.outbox()
        if holdings.parked:
            log.info("found %d outbox records a previous run committed but may not have sent: they are "
                     "settled once this worker is assigned its partitions", len(holdings.parked))
        holdings.inputs = [self.config.topics.name(t) for t in INPUT_TOPICS]
        self._subscribe()
        log.info("worker %s consuming %s", self.config.worker_id, ", ".join(holdings.inputs))
        idle_since = time.monotonic()
        ask = self._ask_cluster
        try:
            with self.heap:
                while not stop.is_set() and not (until is not None and until()):
                    self.report_lag()
                    if self.rebuilds.waiting:
                        self.rebuilding.advance()
                        idle_since = time.monotonic()
                    if self.process_batch():
                        idle_since = time.monotonic()
                        continue
                    self.broker.check(ask)
                    if self.waiting.waiting_since is not None:  # waiting for the group is not idleness
                        self.waiting.check(give_up=idle_exit_after is not None)
                        idle_since = time.monotonic()
                    # An assignment is not idle time, nor is a rebuild (above).
                    quiet_since = max(idle_since, holdings.assigned_at)
                    if idle_exit_after is not None and time.monotonic() - quiet_since > idle_exit_after:
                        break
                    self.heap.when_idle()
        except Exception as error:
            self.broker.blame(error)
            raise
        finally:
            self.close()
        return self.totals

    def _ask_cluster(self) -> object:
        """One metadata round trip, bounded by a second (so that a stop is seen while the cluster is out of reach)."""
        return self.consumer.list_topics(self.config.topics.name(Topic.EDGE_VERSIONS), timeout=1.0)

    def _subscribe(self) -> None:
        self.waiting.wait()
        self.consumer.subscribe(self.holdings.inputs, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_lost)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """``Assignment.on_assign`` (a method of its own, so that a benchmark can see when it comes)."""
        self.assignment.on_assign(consumer, partitions)
        self.waiting.assigned()
        self.broker.reached()  # the assignment's round trips to the cluster were answered

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """A rebalance begins. With the cluster out of reach the partitions go as lost: where their logs end
        cannot be read (``Assignment.on_revoke``), and trying would hold a stop up."""
        self.waiting.wait()
        (self.assignment.on_lost if self.broker.suspect else self.assignment.on_revoke)(consumer, partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.waiting.wait()
        self.assignment.on_lost(consumer, partitions)

    def close(self) -> None:
        """Close the rebuilds, wait a little for records on their way, leave the group, close the state. A
        record not confirmed is still in the outbox (trimmed only once delivered): the next run sends it."""
        self._abandon_rebuilds()
        unconfirmed = self.producer.flush(self.config.close_timeout)
        if unconfirmed:
            log.warning("worker %s stops with %d records not confirmed by the broker at %s: its state's outbox "
                        "keeps what they belong to, and the next run sends it", self.config.worker_id,
                        unconfirmed, self.config.bootstrap)
        self.consumer.close()
        self.store.close()
        self.heap.release()

    # -- the loop ------------------------------------------------------------------------------------
    def process_batch(self) -> int:
        """One consume-apply-checkpoint round; returns how many input records it applied. Each stage is
        a method of its own, so a benchmark can time them by overriding (``tests.benchmarks.pipeline_load``)."""
        messages = self._consume()
        if self.holdings.must_rejoin:
            self.holdings.must_rejoin = False
            self.membership.join_again()
            return 0
        if not messages:
            return 0
        pending, consumed = self._apply(messages)
        if not consumed:
            return 0
        self._checkpoint(pending, consumed)
        return len(consumed)

    def _checkpoint(self, pending: PendingLedger, consumed: dict[InputPosition, int]) -> None:
        """Make the batch durable, then let it out, then move the group's offsets:

        1. state, input offsets and outbox in one WriteBatch: after a crash from here on, the worker
           resumes after those offsets and re-sends the outbox;
        2. ask the group whether this worker still owns the partitions: if not, the batch stays
           parked in the outbox and the worker joins again (the next assignment settles it);
        3. send the outbox and wait for its delivery;
        4. trim the outbox: the batch is on the log;
        5. commit the offsets to the group, asynchronously: the state's offsets are the ones resumed
           from, the group's tell other workers how far the partition was applied."""
        records, outbox_keys = self._commit(pending, consumed)
        self._observe(pending)
        self.faults.after_commit(self._batches)
        if not self._still_a_member():
            self._park_lost_batch()
            return
        self.faults.after_membership_check(self._batches)
        self._send(self.faults.to_send(self._batches, records))
        self.faults.after_send(self._batches)
        self.bookkeeping.trim(outbox_keys)
        self._commit_offsets(consumed)

    def _still_a_member(self) -> bool:
        """``Membership.still_a_member``; with the cluster out of reach no answer is a no: the batch is
        parked, and settled at the next assignment, which waits for the cluster (up to its bound)."""
        try:
            return self.membership.still_a_member(self._batches)
        except KafkaException as error:
            if not self.broker.suspect:
                raise
            log.warning("worker %s cannot ask the group about batch %d (%s): parked", self.config.worker_id,
                        self._batches, error.args[0].str())
            return False

    def _park_lost_batch(self) -> None:
        """The batch is committed to the state and its outbox but not sent: park it as a restart would
        find it, and join the group again; the next assignment settles it (sent if the partitions
        came back untouched, else discarded with the state, which is rebuilt from the log). Until
        then no record of a partition held before is applied."""
        self.holdings.parked = self.bookkeeping.outbox()
        self.membership.join_again()

    def _consume(self) -> list[Message]:
        # While a rebuild is pending the loop does not wait for input: the rebuild is the work.
        timeout = 0 if self.rebuilds.waiting else self.config.poll_timeout
        return self.consumer.consume(num_messages=self.config.batch_max, timeout=timeout)

    def _apply(self, messages: list[Message]) -> tuple[PendingLedger, dict[InputPosition, int]]:
        """Run the ledger's processor over the batch; the last offset applied per (topic, partition)."""
        pending = PendingLedger(self.store)
        consumed: dict[InputPosition, int] = {}
        first = self.holdings.batch_first = {}
        applied, assigned = self.holdings.applied_offsets, self.holdings.assigned
        batch: list[tuple[Message, InputPosition]] = []
        raws: list[bytes | str] = []
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    log.warning("consume error: %s", error)
                continue
            position = (message.topic(), message.partition())
            if message.offset() <= applied.get(position, -1) or position not in assigned:
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
        log_partitions = self.holdings.log_partitions
        expected = tenant_partition(tenant, log_partitions)
        if partition == expected:
            return None
        return (f"misrouted: events of tenant {tenant!r} belong on partition {expected} of {topic}, where its "
                f"edge-versions records go (the CRC-32 of the tenant as key, modulo {log_partitions}, "
                f"librdkafka's default partitioner), and this one arrived on partition {partition}: produce "
                "it keyed by its tenant, as `edgeledger produce` does")

    def _commit(self, pending: PendingLedger,
                consumed: dict[InputPosition, int]) -> tuple[list[OutRecord], list[bytes]]:
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
        self.holdings.applied_offsets.update(consumed)
        self.totals.add(pending.counts)
        return records, outbox_keys

    def _outbox(self, pending: PendingLedger, versions: list[EncodedVersion],
                consumed: dict[InputPosition, int], batch_id: str) -> list[OutRecord]:
        """A method of its own (as ``_commit_offsets``) so that a benchmark can time it apart from the commit."""
        return outbox_for(pending, versions, consumed, batch_id, self.holdings.log_partitions,
                          self.holdings.batch_first, self.holdings.fences)

    def _observe(self, pending: PendingLedger) -> None:
        for observe in self.observers:
            observe(pending)

    def _commit_offsets(self, consumed: dict[InputPosition, int]) -> None:
        self.consumer.commit(offsets=[TopicPartition(t, p, o + 1) for (t, p), o in consumed.items()],
                             asynchronous=True)

    def _send(self, records: list[OutRecord]) -> None:
        name = self.config.topics.name
        deliver(self.producer, ((name(r.topic), r.key.encode(), r.value, r.partition) for r in records), 30)
        self.broker.reached()
        # A batch ends with its markers without a tenant, the last records it puts on those partitions.
        last_sent = self.holdings.last_sent
        for record in reversed(records):
            if record.topic != Topic.EDGE_VERSIONS or record.partition < 0 or not is_marker(record.value):
                break
            last_sent[record.partition] = orjson.loads(record.value)["record_id"]

    # -- what the parts ask of each other ------------------------------------------------------------
    def _keep_fences(self, epochs: dict[int, Epoch]) -> None:
        self.assignment.keep_fences(epochs)

    def _discard_state(self) -> None:
        self.assignment.discard_state()

    def _abandon_rebuilds(self) -> None:
        self.rebuilding.abandon()
