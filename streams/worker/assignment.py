"""A worker's part in a rebalance: which partitions it takes as they are and which it rebuilds first,
the parked outbox it settles, and where the logs end of the partitions it gives up.

Every assignment is claimed on ``partition-claims`` in the name of the state's lineage
(``streams.worker.claims``) before anything processed from it is sent: so the last claim on a
partition names the last state that owned it, even one whose redo a second crash cut short before
it committed its offsets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from processors.model import Epoch
from processors.outbox import OutRecord, parked_inputs
from schemas.topics import Topic
from state.pipeline_store import GivenUp, PipelineStore
from state.store import LedgerStore
from streams.kafka.identity import TopicIdentities
from streams.kafka.topics import TopicSettings
from streams.worker.claims import claim_partitions, latest_claims
from streams.worker.fences import Fencer, NotAMember
from streams.worker.holdings import Holdings
from streams.worker.positions import Positions
from streams.worker.rebuilding import Rebuilding

log = logging.getLogger(__name__)


class Assignment:
    """The consumer's rebalance callbacks (``on_assign``, ``on_revoke``, ``on_lost``) for one worker."""

    def __init__(self, store: LedgerStore, bookkeeping: PipelineStore, producer: Producer, fencer: Fencer,
                 holdings: Holdings, rebuilding: Rebuilding, bootstrap: str, group_id: str, topics: TopicSettings,
                 worker_id: str, send: Callable[[list[OutRecord]], None]) -> None:
        self.store = store
        self.bookkeeping = bookkeeping
        self.producer = producer
        self.fencer = fencer
        self.holdings = holdings
        self.rebuilding = rebuilding
        self.bootstrap = bootstrap
        self.group_id = group_id
        self.topics = topics
        self.worker_id = worker_id
        self._send = send
        self.positions = Positions(bookkeeping, holdings, producer, TopicIdentities(bootstrap),
                                   topics.name(Topic.EDGE_VERSIONS), worker_id)
        rebuilding.positions = self.positions  # it resumes what it rebuilt, checked alike

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Resume each partition right after the last offset this state applied (not the group's).

        When the group committed further than this state applied (another worker owned the
        partition meanwhile, or this disk was lost), or another state claimed it since this one did
        (another worker owned it and may have sent batches whose offsets it never committed), first
        rebuild it from the ``edge-versions`` log: the batches this state applied are skipped there.
        Such a partition's inputs are assigned paused; the worker's loop rebuilds it
        (``streams.worker.rebuilding``) and then resumes them, while the other partitions go on.
        """
        holdings = self.holdings
        self.positions.check_log(sorted({tp.partition for tp in partitions if tp.partition < holdings.log_partitions}))
        committed = consumer.committed(partitions, timeout=30)
        claims = latest_claims(self.producer, self.bootstrap, self.topics, self.group_id)
        behind = self._behind(committed, claims)
        if holdings.parked and self._settle_parked(partitions, committed, claims):
            # Discarded: every assigned partition is rebuilt, also one the group has no offset for,
            # whose batches may be on the log all the same (their offsets' commit was lost).
            behind = sorted({tp.partition for tp in partitions})
        assigned = {tp.partition for tp in partitions}
        behind = sorted(set(behind) | (self.bookkeeping.rebuilding() & assigned))
        # Claimed before the rebuilds, which can take long: a worker that takes a partition over
        # meanwhile claims it after this one, so the last claim names the later owner. The rebuilds
        # are marked first, so that a crash during one is not mistaken, by the claim, for its end.
        self.bookkeeping.begin_rebuilds(behind)
        claim_partitions(self.producer, self.topics, self.group_id, sorted(assigned), self.bookkeeping.lineage,
                         self.worker_id)
        # After the parked batch is sent (``_settle_parked``), which carries the fence before this one.
        try:
            self._fence(sorted(assigned - set(behind)))
            self.bookkeeping.take_back(sorted(assigned - set(behind)))  # its state applies their inputs again
        except NotAMember as lost:
            # Nothing of this assignment is applied (the loop skips what is not ``assigned``): the loop
            # lets it go and joins again.
            log.warning("worker %s cannot fence its partitions and joins the group again: %s", self.worker_id, lost)
            holdings.must_rejoin = True
            consumer.assign(partitions)
            consumer.pause(partitions)
            holdings.assigned_at = time.monotonic()
            return
        held: list[TopicPartition] = []
        for tp in partitions:
            if tp.partition in behind:
                # Paused until rebuilt, then assigned again at its place (``Rebuilding``). From the
                # beginning meanwhile: a fetch that began before the pause can only bring records
                # from offset 0 on, which the applied offsets then skip, never a later one past a gap.
                tp.offset = OFFSET_BEGINNING
                held.append(tp)
            else:
                holdings.assigned.add((tp.topic, tp.partition))
        # After the fences: a reader drops an input reset below its partition's fence.
        self.positions.resume([tp for tp in partitions if tp not in held])
        consumer.assign(partitions)
        # A pause outlives an assignment in librdkafka: a partition paused for a rebuild that ended
        # before the previous generation resumed it would otherwise stay paused.
        consumer.resume([tp for tp in partitions if tp not in held])
        if held:
            consumer.pause(held)
        self.rebuilding.expect(behind)
        holdings.assigned_at = time.monotonic()
        log.info("worker %s assigned %s%s", self.worker_id,
                 sorted(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in partitions if tp not in held),
                 f"; rebuilds partition(s) {behind} from the log first" if behind else "")

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        applying = sorted({tp.partition for tp in partitions if (tp.topic, tp.partition) in self.holdings.assigned})
        self._let_go(partitions)
        self._note_given_up(consumer, applying)

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions gone without a rebalance this worker took part in (its session ran out): another
        worker may hold them already, and have written to their logs, so where those end is not noted."""
        self._let_go(partitions)

    def keep_fences(self, epochs: dict[int, Epoch]) -> None:
        """Every fence this worker writes, before it is delivered: in its state, and for its markers."""
        self.bookkeeping.record_fences(epochs)
        self.holdings.fences.update(epochs)

    def discard_state(self) -> None:
        """Forget the local state: it is rebuilt from the log, in a new lineage."""
        self.rebuilding.abandon()  # first: what they restored belongs to the state about to go
        self.store.reset()
        self.bookkeeping.reset()
        self.holdings.forget()

    def _fence(self, partitions: list[int]) -> None:
        """Fence the log partitions this worker takes without a rebuild, over the last fence its state
        knows there: no other state took them since (their claims say), so no later fence than its
        own, or one it read, can be there but a late writer's, of a lower epoch."""
        known = self.bookkeeping.fences()
        written = self.fencer.fence({p: known.get(p) for p in partitions if p < self.holdings.log_partitions})
        for partition, (_, record_id) in written.items():
            self.holdings.last_sent[partition] = record_id  # what a rebuild from where it is given up looks for

    def _behind(self, committed: list[TopicPartition], claims: dict[int, str]) -> list[int]:
        """Partitions another worker owned since this state did: the group's offset is past what this
        state applied, or another state claimed the partition last. A partition nobody has claimed yet
        is judged by the offsets alone."""
        lineage = self.bookkeeping.lineage
        applied = self.holdings.applied_offsets
        return sorted({
            tp.partition for tp in committed
            if (tp.offset >= 0 and tp.offset - 1 > applied.get((tp.topic, tp.partition), -1))
            or claims.get(tp.partition, lineage) != lineage
        })

    def _settle_parked(self, partitions: list[TopicPartition], committed: list[TopicPartition],
                       claims: dict[int, str]) -> bool:
        """Re-send the parked outbox if it is still this worker's to send; else discard it with the
        local state (see ``streams.worker.loop``). True when the state was discarded.

        It is this worker's while each input partition the batch consumed is assigned here and was
        claimed last by this state: any other state that took the partition over claimed it before
        sending a record, so its redo, whole or cut short, is on the log, and this copy must not
        follow it. A partition nobody has claimed yet counts as another's. The group's offset past
        the batch's first offset there tells the same, and is kept as a check."""
        parked = self.holdings.parked
        consumed = parked_inputs(record for _, record in parked)
        assigned = {(tp.topic, tp.partition) for tp in partitions}
        group = {(tp.topic, tp.partition): tp.offset for tp in committed}
        overtaken = sorted({position[1] for position, first in consumed.items()
                            if group.get(position, -1) > first or claims.get(position[1]) != self.bookkeeping.lineage})
        missing = sorted(set(consumed) - assigned)
        if not overtaken and not missing:
            self._send_parked()
            return False
        log.warning("worker %s discards its local state and %d parked outbox records: %s; it rebuilds its "
                    "partitions from the log", self.worker_id, len(parked),
                    f"another worker owned partition(s) {overtaken} since" if overtaken
                    else f"input partition(s) {missing} it consumed are assigned elsewhere")
        self.discard_state()
        return True

    def _send_parked(self) -> None:
        """Re-send what a previous run committed but may not have sent (crash between commit and send)."""
        parked, self.holdings.parked = self.holdings.parked, []
        if parked:
            log.info("re-sending %d outbox records left by a previous run", len(parked))
            self._send([OutRecord(*record) for _, record in parked])
            self.bookkeeping.trim([key for key, _ in parked])

    def _let_go(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.holdings.assigned.discard((tp.topic, tp.partition))
        self.rebuilding.suspend({tp.partition for tp in partitions})

    def _note_given_up(self, consumer: Consumer, partitions: list[int]) -> None:
        """Note where the log of each partition this worker was applying ends now (``PipelineStore.give_up``).

        The state holds that log before there: every batch this worker sent was delivered before it
        polled again, only a partition's owner writes to its log, and in a rebalance no other worker
        owns the partition yet. So if the partition comes back after another worker held it, its
        rebuild replays only what that worker added, from right after the last record this worker
        sent there, looked for from that end on (``PartitionRebuild.start_after``): a worker dropped
        from the group without knowing it yet may note an end past others' records, and the embedded
        broker's end counts short. Not while the outbox holds records not known to be sent (a batch
        parked, or one whose send failed as the worker stops): the state then holds more than the
        log. Nor for a partition this worker sent nothing to since it took the partition (a
        rebuild's last record is another's).

        Nor for a partition whose last claim is another state's, asked once the ends are read: this
        worker was then dropped without knowing it, and a batch it sent after the check may be on the
        log after the new owner's fence, right before the end. Claimed after the ends were read, the
        new owner has written nothing before them (it claims before it writes to the log)."""
        if self.bookkeeping.outbox():  # what is parked is in the outbox too, until sent
            return
        log_topic = self.topics.name(Topic.EDGE_VERSIONS)
        ends = {}
        for partition in partitions:
            last_sent = self.holdings.last_sent.get(partition)
            if partition >= self.holdings.log_partitions or last_sent is None:
                continue
            try:
                _, end = consumer.get_watermark_offsets(TopicPartition(log_topic, partition), timeout=10, cached=False)
                ends[partition] = GivenUp(end, last_sent, self.holdings.fences.get(partition))
            except (KafkaException, RuntimeError) as error:  # RuntimeError: the consumer is closing
                log.warning("worker %s could not read where %s[%d] ends (%s): if it comes back after another "
                            "worker held it, it is rebuilt from the beginning", self.worker_id, log_topic,
                            partition, error)
        if ends:
            try:
                claims = latest_claims(self.producer, self.bootstrap, self.topics, self.group_id,
                                       timeout=10)  # inside the rebalance: the group waits
            except (KafkaException, RuntimeError, TimeoutError) as error:
                log.warning("worker %s could not read the partition claims (%s): partitions %s are rebuilt from "
                            "the beginning if they come back", self.worker_id, error, sorted(ends))
                return
            overtaken = sorted(p for p in ends if claims.get(p) != self.bookkeeping.lineage)
            if overtaken:
                log.warning("worker %s: another state claimed partition(s) %s before this one gave them up; "
                            "where their logs end is not noted", self.worker_id, overtaken)
            ends = {p: end for p, end in ends.items() if p not in overtaken}
        self.bookkeeping.give_up(ends)
