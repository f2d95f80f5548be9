"""Fences on the ``edge-versions`` log: who may write a log partition's batches from where on.

A worker the group dropped without its knowing (a paused process) can still land a batch on the
log after another worker took the partition over and redid those inputs: the membership check
before each send leaves a window between the coordinator's answer and the records' arrival. So
every worker, as it takes a log partition (each assignment), first writes a ``fence`` record there
carrying an epoch, and every batch marker it writes there carries that epoch too. A reader of the
log (a rebuild, a replica) keeps, per partition, the highest fence it has read, and does not apply a
batch whose marker carries a lower epoch: a late batch is then dropped by every reader alike, and a
new owner, which reads the log up to its own fence before it applies anything, holds exactly what
every reader holds.

The epoch must be one that a late writer cannot beat, so it is not anything the writer makes up:
it is the consumer group's generation, which the group coordinator raises at every rebalance. A
paused worker's fence or marker carries the generation it was a member of, lower than the one of
the worker that took over from it, however late it lands. Group generations start again when a
group is made anew (another ``--group``, or one whose offsets expired): so the epoch is the pair
(era, generation), and a worker whose generation is not above the last fence it finds on the
partition moves to the next era (``next_epoch``). It finds that fence by reading the log to a
``probe`` of its own (``streams.worker.rebuild``), or, for a partition no one took from it since, in its
own state, where it keeps the last fence of each partition it wrote or read (``PipelineStore``).
"""

from __future__ import annotations

import logging
import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from confluent_kafka import Consumer, Producer

from processors.model import Epoch
from streams.kafka.produce import deliver

log = logging.getLogger(__name__)


_GROUP_METADATA_MAGIC = b"CGMDv2:"
_GENERATION = struct.Struct("=i")
"""librdkafka writes the generation right after the magic, as a native-endian 32-bit integer
(``rd_kafka_consumer_group_metadata_write``)."""


def group_generation(consumer: Consumer) -> int:
    """The consumer group generation this consumer is a member of now (-1 when it is not in one).

    confluent-kafka hands the group metadata over only as librdkafka's serialised bytes."""
    return generation_in(consumer.consumer_group_metadata())


def generation_in(metadata: object) -> int:
    """The generation in librdkafka's serialised consumer group metadata."""
    if not isinstance(metadata, bytes) or not metadata.startswith(_GROUP_METADATA_MAGIC) \
            or len(metadata) < len(_GROUP_METADATA_MAGIC) + _GENERATION.size:
        raise RuntimeError(f"unexpected consumer group metadata from librdkafka: {metadata!r:.60}")
    return int(_GENERATION.unpack_from(metadata, len(_GROUP_METADATA_MAGIC))[0])


def next_epoch(latest: Epoch | None, generation: int) -> Epoch:
    """The epoch of a fence written by a member of ``generation`` over ``latest``, the last fence on the
    partition: the same era while the generation is higher (one group), else the next era (a group made
    anew, whose generations started again)."""
    if latest is None:
        return (0, generation)
    era, fenced_generation = latest
    return (era, generation) if generation > fenced_generation else (era + 1, generation)


def probe_record() -> tuple[str, bytes]:
    """A record a reader of the log skips; its writer reads the log up to it to know it has read all
    that was there when it wrote it (the embedded broker's log end counts short, so it cannot say)."""
    record_id = f"probe/{uuid.uuid4().hex}"
    return record_id, orjson.dumps({"kind": "probe", "record_id": record_id})


def fence_record(partition: int, epoch: Epoch, worker: str, lineage: str) -> tuple[str, bytes]:
    """The record that fences ``partition`` at ``epoch``: batches of lower epochs after it are not applied."""
    record_id = f"fence/{uuid.uuid4().hex}"
    return record_id, orjson.dumps({"kind": "fence", "record_id": record_id, "partition": partition,
                                    "epoch": list(epoch), "worker": worker, "lineage": lineage,
                                    "fenced_at": time.time()})


def epoch_of(record: dict) -> Epoch | None:
    """The epoch a fence or batch marker carries (None: a marker written before fences)."""
    epoch = record.get("epoch")
    return (int(epoch[0]), int(epoch[1])) if epoch is not None else None


class NotAMember(RuntimeError):
    """The group does not count this worker a member now: it must not fence, and lets its partitions go."""


@dataclass
class Fencer:
    """Writes a worker's probes and fences to its log partitions, each delivered before it returns.

    A fence that moves to the next era (``next_epoch``) is written only once the group confirms the
    worker a member (``confirm_member``): a worker dropped from the group that reads another's
    higher fence looks, by its generation, just like a member of a group made anew, and its fence
    in the next era would outrank the real owner's. Confirmed, the higher fence it read cannot be its
    own group's: it was there before the check, and a member of a later generation would have made
    the check fail."""

    producer: Producer
    log_topic: str
    worker: str
    lineage: Callable[[], str]
    """The worker's state's lineage now (it changes when the state is discarded)."""
    generation: Callable[[], int]
    """The group generation the worker is a member of now (``group_generation``)."""
    confirm_member: Callable[[int], bool]
    """Whether the group coordinator counts the worker a member of its generation now (asked about a
    partition number it holds)."""
    record: Callable[[dict[int, Epoch]], None]
    """Keeps the epochs in the worker's state, before they are delivered: a fence on the log that the
    state does not know could be above the next one it writes."""

    def probe(self, partition: int) -> str:
        """Write a probe to ``partition``; its record id."""
        record_id, value = probe_record()
        deliver(self.producer, [(self.log_topic, b"", value, partition)], 30)
        return record_id

    def fence(self, latest: dict[int, Epoch | None]) -> dict[int, tuple[Epoch, str]]:
        """Fence each partition over ``latest``, its last fence (None: none known); each one's epoch and
        fence record id."""
        generation, lineage = self.generation(), self.lineage()
        if generation < 0:
            raise NotAMember(f"worker {self.worker} is in no group generation: it does not fence")
        written, records = {}, []
        for partition, last in sorted(latest.items()):
            epoch = next_epoch(last, generation)
            if last is not None and epoch[0] > last[0] and not self.confirm_member(partition):
                raise NotAMember(f"worker {self.worker} of generation {generation} read a fence of {last} on "
                                 f"{self.log_topic}[{partition}], and the group does not count it a member: "
                                 "it lost the partition, and does not fence it")
            record_id, value = fence_record(partition, epoch, self.worker, lineage)
            written[partition] = (epoch, record_id)
            records.append((self.log_topic, b"", value, partition))
        self.record({partition: epoch for partition, (epoch, _) in written.items()})
        deliver(self.producer, records, 30)
        if written:
            log.info("worker %s fenced %s", self.worker,
                     ", ".join(f"{self.log_topic}[{p}] at {epoch}" for p, (epoch, _) in written.items()))
        return written
