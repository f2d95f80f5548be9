"""`edgeledger replica`: a query replica that materialises the whole ``edge-versions`` log.

Workers each hold only their partitions; a replica consumes every partition of the log (a global
table) into its own RocksDB read model, which `serve` and the read commands then query. It
resumes from the log positions it stored with the state, in the same write. Like a worker, it keeps
the collector off the state it has read (``processors.heap``): with CPython's own thresholds, a
fifth of a replay's samples were collections rescanning the store's growing caches.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from functools import partial
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from processors.heap import SettledHeap
from processors.pending import PendingLedger
from processors.positions import untrusted_offsets
from schemas.topics import Topic
from state.kv import RocksKV
from state.pipeline_store import PipelineStore
from state.store import LedgerStore
from streams.kafka.config import consumer_config
from streams.kafka.identity import TopicIdentities
from streams.kafka.liveness import BrokerWatch
from streams.kafka.topics import TopicSettings
from streams.log.records import Replay

log = logging.getLogger(__name__)


def run_replica(state: Path, bootstrap: str, topics: TopicSettings | None = None,
                stop: threading.Event | None = None, idle_exit_after: float | None = None,
                until_caught_up: bool = False, broker_timeout: float = 60.0,
                consumer_overrides: dict[str, str | int] | None = None) -> int:
    """Follow the log until stopped (or idle); returns the number of log records applied.

    ``until_caught_up``: stop once every partition of the log has been read to its end (the
    broker's end-of-partition event, after the last record): a backfill, or a test, waits on that
    condition instead of on a quiet period. A broker out of reach for ``broker_timeout`` seconds
    raises ``BrokerUnreachable``: a replica that cannot follow the log says so rather than serve
    an ever older read model in silence. ``consumer_overrides``: librdkafka settings on top of the
    defaults (a disk-backed embedded broker needs a longer fetch wait)."""
    topics = topics or TopicSettings()
    stop = stop or threading.Event()
    log_topic = topics.name(Topic.EDGE_VERSIONS)
    watch = BrokerWatch(bootstrap, broker_timeout)
    kv = RocksKV(state)
    store, bookkeeping = LedgerStore(kv), PipelineStore(kv)
    consumer = Consumer(consumer_config(bootstrap, f"edgeledger-replica-{state.name}", error_cb=watch.error_cb,
                                        **{"enable.partition.eof": until_caught_up, **(consumer_overrides or {})}))
    try:
        metadata: list = []
        if not watch.reach(lambda: metadata.append(consumer.list_topics(log_topic, timeout=2)), stop.is_set):
            return 0
        found = metadata[-1].topics.get(log_topic)
        if found is None or found.error is not None:
            raise RuntimeError(f"the log topic {log_topic} is not on the cluster at {bootstrap} "
                               f"({found.error if found is not None else 'no such topic'}): check --topic-prefix")
        partitions = found.partitions
        resets = _trust_positions(bookkeeping, TopicIdentities(bootstrap), log_topic, sorted(partitions))
        return _follow(consumer, store, bookkeeping, watch, log_topic, partitions, resets, stop, idle_exit_after,
                       until_caught_up)
    finally:
        consumer.close()
        store.close()


def _follow(consumer: Consumer, store: LedgerStore, bookkeeping: PipelineStore, watch: BrokerWatch,
            log_topic: str, partitions: dict, resets: int, stop: threading.Event, idle_exit_after: float | None,
            until_caught_up: bool) -> int:
    """Apply the log from the stored positions on, until stopped, idle or caught up."""
    stored = bookkeeping.input_offsets()
    positions = {p: o for (t, p), o in stored.items() if t == log_topic}
    # The input offsets the replayed batches consumed: a batch at or below them was applied before.
    inputs_seen = {(t, p): o for (t, p), o in stored.items() if t != log_topic}
    consumer.assign([TopicPartition(log_topic, p, positions[p] + 1 if p in positions else OFFSET_BEGINNING)
                     for p in partitions])
    log.info("replica following %s (%d partitions, %d with a stored position)", log_topic, len(partitions),
             len(positions))
    replay = Replay(store, bookkeeping.fences())  # the fences read before the stored positions
    ask = partial(consumer.list_topics, log_topic, timeout=1)

    applied = 0
    idle_since = time.monotonic()
    at_end: set[int] = set()
    with SettledHeap() as heap:
        while not stop.is_set():
            message = consumer.poll(0.2)
            if message is None:
                watch.check(ask)
                if idle_exit_after is not None and time.monotonic() - idle_since > idle_exit_after:
                    break
                heap.when_idle()
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    watch.reached()
                    at_end.add(message.partition())
                    if until_caught_up and at_end.issuperset(partitions):
                        break
                continue
            watch.reached()
            idle_since = time.monotonic()
            partition, offset = message.partition(), message.offset()
            at_end.discard(partition)

            def commit(pending: PendingLedger, partition: int = partition, offset: int = offset) -> None:
                # Only this partition's position moves, and only at its markers: records another
                # partition has sent of a batch not yet closed are read again after a restart.
                fence = replay.fences.get(partition)
                store.commit(pending, bookkeeping.offset_puts({(log_topic, partition): offset, **inputs_seen})
                             + bookkeeping.fence_puts({partition: fence} if fence is not None else {}))

            applied += replay.feed([message.value()], commit, inputs_seen, partition)
            heap.after_event()
    log.info("replica applied %d log records%s", applied,
             f" (read {resets} log partition(s) from their start)" if resets else "")
    return applied


def _trust_positions(bookkeeping: PipelineStore, identities: TopicIdentities, log_topic: str,
                     partitions: list[int]) -> int:
    """Drop the stored position of each log partition that is not the one it was read from (a broker
    or topic made anew, ``processors.positions``), with the input offsets and the fence read there:
    that partition is read from its start. Records the log's identity; returns how many were dropped."""
    stored = bookkeeping.input_offsets()
    current = identities.of([log_topic])
    positions = [(log_topic, partition) for partition in partitions]
    untrusted = untrusted_offsets(positions, stored, bookkeeping.topic_identities(), current)
    dropped = {entry.position[1] for entry in untrusted}
    for entry in untrusted:
        log.warning("replica reads a log partition from its start, not after its stored position: %s",
                    entry.describe())
    reset = [position for position in stored if position[1] in dropped]
    identity = current.get(log_topic)
    bookkeeping.adopt_positions({position: identity for position in positions} if identity is not None else {},
                                reset, sorted(dropped))
    return len(dropped)


def stop_on_signals() -> threading.Event:
    """An event SIGTERM and SIGINT set: the replica then stops after the record in hand, its position
    committed with the last batch it applied (call from the main thread)."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop
