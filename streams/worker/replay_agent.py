"""The replay agent: a faust-streaming agent on the ``edge-versions`` log that replays the traces each
committed change batch touched and publishes one record per (trace, batch) to ``replay-results``.

The log carries a batch's appended and closed versions and its corrections, closed per tenant by a
``batch`` marker with the batch's last transaction time. At each tenant's marker the agent waits
until its read-only view of the ledger (a RocksDB secondary) has caught up to that time, takes the
tenant's changes since the last batch it replayed (a watermark in its own store), replays the traces
they touch as of the marker's transaction time, delivers the records (waiting for the broker's
acknowledgement), and only then moves the watermark. A crash after delivery and before the watermark
moves re-publishes the same records, with the same ``record_id`` (``tenant/batch/trace``): readers
de-duplicate by it, so a restart neither loses nor repeats a replay after de-duplication.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

import faust
import orjson

from processors.identity_map import identity_edits
from processors.model import Trace
from processors.queries import QueryEngine
from schemas.ontology import Ontology, default_ontology
from schemas.topics import Topic
from state.changes import LedgerFollower
from state.keys import pack
from state.kv import OrderedKV, RocksKV
from state.replays import catch_up, changed_versions, corrections_in, replays_of
from state.trace_index import TraceIndex
from streams.kafka.produce import Message, deliver, delivery_producer
from streams.kafka.topics import TopicSettings

log = logging.getLogger(__name__)

CATCH_UP_S = 30.0
"""Seconds a marker waits for the ledger's view to reach its transaction time before the agent fails."""


def agent_dir(state: Path) -> Path:
    return state.parent / f".{state.name}.replay-agent"


class BatchReplayer:
    """What the agent does at one marker, with no Kafka in it: testable on its own."""

    def __init__(self, follower: LedgerFollower, kv: OrderedKV, ontology: Ontology, topic: str) -> None:
        self.follower = follower
        self.kv = kv
        self.index = TraceIndex(kv)
        self.ontology = ontology
        self.topic = topic

    def _mark(self, tenant: str) -> bytes:
        return b"R" + pack("replayed", tenant)

    def replayed_through(self, tenant: str) -> int | None:
        raw = self.kv.get(self._mark(tenant))
        return int(raw) if raw else None

    def caught_up(self, last_tx: int) -> bool:
        self.follower.refresh()
        return self.follower.last_tx() >= last_tx

    def records(self, batch: str, tenant: str, last_tx: int) -> list[Message]:
        """The ``replay-results`` records of the tenant's batch ending at ``last_tx``."""
        since = self.replayed_through(tenant)
        if since is not None and since >= last_tx:
            return []  # a marker seen again after a restart: its replays were delivered
        store = self.follower.store
        engine = QueryEngine(store, self.ontology)
        recorded: list[Trace] = []
        catch_up(store, self.index, engine, tenant, recorded)
        edits = identity_edits(store.merges(tenant), since if since is not None else -(1 << 62), last_tx)
        replays = replays_of(store, self.index, engine, changed_versions(store, tenant, since, last_tx),
                             corrections_in(store, tenant, _earliest(since, recorded), last_tx), last_tx, recorded,
                             edits)
        messages: list[Message] = []
        for rank, replay in enumerate(replays):
            record = {"record_id": f"{tenant}/{batch}/{replay.trace.trace_id}", "batch": batch, "rank": rank,
                      **replay.as_json()}
            messages.append((self.topic, tenant.encode(), orjson.dumps(record)))
        return messages

    def done(self, tenant: str, last_tx: int) -> None:
        self.kv.write([(self._mark(tenant), str(last_tx).encode())])


def _earliest(since: int | None, recorded: list[Trace]) -> int | None:
    """Where the corrections to name begin: the window's start, or a new trace's older ``known_at``."""
    if not recorded:
        return since
    oldest = min(trace.known_at for trace in recorded)
    return oldest if since is None else min(since, oldest)


def build_replay_app(bootstrap: str, state: Path, topics: TopicSettings, group: str = "edgeledger-replay",
                     ontology: Ontology | None = None,
                     on_published: Callable[[int], None] | None = None) -> tuple[faust.App, BatchReplayer]:
    """The faust app and its agent; ``app.main()`` or ``worker`` runs it."""
    app = faust.App(
        group, broker=f"kafka://{bootstrap}", store="memory://", web_enabled=False,
        datadir=str(state.parent / f".{state.name}.replay-faust"), topic_allow_declare=False,
        broker_session_timeout=6, broker_heartbeat_interval=2, consumer_auto_offset_reset="earliest",
    )
    replayer = BatchReplayer(LedgerFollower(state, min_interval_s=0.0), RocksKV(agent_dir(state)),
                             ontology or default_ontology(), topics.name(Topic.REPLAY_RESULTS))
    producer = delivery_producer(bootstrap)
    log_topic = app.topic(topics.name(Topic.EDGE_VERSIONS), value_serializer="raw", key_serializer="raw")

    @app.agent(log_topic)
    async def replay_batches(stream: faust.StreamT) -> None:
        async for value in stream:
            record = orjson.loads(value)
            tenant = record.get("tenant")
            if record.get("kind") != "batch" or not tenant:
                continue
            last_tx = int(record["last_tx"])
            deadline = time.monotonic() + CATCH_UP_S
            while not replayer.caught_up(last_tx):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the ledger at {state} did not reach tx {last_tx} within {CATCH_UP_S}s")
                await asyncio.sleep(0.05)  # the worker's commit reaches the secondary view shortly
            messages = replayer.records(str(record["batch"]), str(tenant), last_tx)
            if messages:
                await asyncio.get_running_loop().run_in_executor(None, deliver, producer, messages, 30)
            replayer.done(str(tenant), last_tx)
            if on_published is not None:
                on_published(len(messages))

    return app, replayer
