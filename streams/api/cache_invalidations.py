"""Publishing the traversal cache's invalidation records to the ``cache-invalidations`` topic.

``edgeledger serve --bootstrap`` hands every ``schemas.cache.CacheInvalidation`` the cached engine
emits (the ``CachedQueryEngine.on_invalidation`` hook; the processors know nothing of Kafka) to
``InvalidationPublisher.publish``: one record per tenant, keyed by the tenant, its JSON as the value.

Publishing never waits for the broker: a record joins the producer's local queue (the idempotent
producer of ``streams.kafka.config``, so records stay in order and are not duplicated on retry), a
daemon thread polls for delivery reports, and ``close`` flushes. A record that was not delivered
(broker unreachable past ``message.timeout.ms``, local queue full, still queued when the flush at
shutdown gave up) is never dropped silently: it is counted in
``edgeledger_cache_invalidation_records_total{result="failed"}`` and logged at ERROR with its tenant,
invalidated entry keys and causing edge ids.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from schemas.cache import CacheInvalidation
from schemas.topics import Topic
from streams.kafka.config import ADMIN_DEFAULTS, producer_config
from streams.kafka.topics import TopicSettings, ensure_topics
from streams.metrics import LedgerMetrics

log = logging.getLogger(__name__)

class PublisherSetupError(RuntimeError):
    """The topic could not be checked or created, or the producer could not be configured."""


def _reason(error: object) -> str:
    """A KafkaException or KafkaError as its one-line text."""
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        error = error.args[0]
    if isinstance(error, KafkaError):
        return error.str()
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


class InvalidationPublisher:
    """Produces ``CacheInvalidation`` records to ``<prefix>cache-invalidations`` asynchronously.

    Thread-safe: ``publish`` may be called from request threads while the poller serves delivery
    reports. ``published`` and ``failed`` count delivery reports (and records refused locally).
    """

    def __init__(self, bootstrap: str, topics: TopicSettings | None = None, metrics: LedgerMetrics | None = None,
                 *, ensure_topic: bool = True, setup_timeout_s: float = 15.0,
                 producer_overrides: Mapping[str, Any] | None = None, poll_interval_s: float = 0.1,
                 queue_full_wait_s: float = 0.5) -> None:
        topics = topics or TopicSettings()
        self.topic = topics.name(Topic.CACHE_INVALIDATIONS)  # legal: TopicSettings checks its names
        self.bootstrap = bootstrap
        self.metrics = metrics
        self.queue_full_wait_s = queue_full_wait_s
        self.published = 0
        self.failed = 0
        try:
            if ensure_topic:
                # librdkafka's own log lines (one per failed connect) would bury the one-line error that
                # says why setup failed; this short-lived client logs only critical problems.
                admin = AdminClient({**ADMIN_DEFAULTS, "bootstrap.servers": bootstrap, "log_level": 2})
                ensure_topics(admin, topics, timeout=setup_timeout_s, only=[Topic.CACHE_INVALIDATIONS])
            self._producer = Producer(producer_config(bootstrap, **dict(producer_overrides or {})))
        except KafkaException as error:
            raise PublisherSetupError(
                f"cannot publish cache invalidations to {self.topic} at {bootstrap}: {_reason(error)}") from None
        if metrics is not None:
            metrics.expect_invalidation_records()
        self._lock = threading.Lock()
        """Guards ``_closed`` and producing (held while waiting for room in a full queue)."""
        self._counts = threading.Lock()
        """Guards the counters; the only lock the poller takes, so it never waits for ``publish``."""
        self._closed = False
        self._stop = threading.Event()
        self._poll_interval_s = poll_interval_s
        self._poller = threading.Thread(target=self._poll, name="cache-invalidations-producer", daemon=True)
        self._poller.start()
        log.info("publishing cache invalidations to %s at %s", self.topic, bootstrap)

    # -- the hook ---------------------------------------------------------------------------------------------
    def publish(self, record: CacheInvalidation) -> None:
        """Queue one record for delivery. Never raises and never waits for the broker's acknowledgement
        (at most ``queue_full_wait_s`` for room when the local queue is full); a record that cannot be
        queued is counted and logged as failed."""
        try:
            value = record.model_dump_json().encode()
            with self._lock:
                if self._closed:
                    raise RuntimeError("the publisher is closed")
                deadline = time.monotonic() + self.queue_full_wait_s
                while True:
                    try:
                        self._producer.produce(self.topic, key=record.tenant.encode(), value=value,
                                               on_delivery=partial(self._delivered, record))
                        return
                    except BufferError:
                        if time.monotonic() >= deadline:
                            raise
                        time.sleep(0.01)  # the poller frees room as delivery reports are served
        except Exception as error:  # a failed publish must never fail the request
            self._record_failure(record, f"not queued: {_reason(error)}")

    # -- delivery reports -----------------------------------------------------------------------------------------
    def _delivered(self, record: CacheInvalidation, error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            self._record_failure(record, _reason(error))
            return
        with self._counts:
            self.published += 1
        if self.metrics is not None:
            self.metrics.observe_invalidation_record(published=True)

    def _record_failure(self, record: CacheInvalidation, reason: str) -> None:
        with self._counts:
            self.failed += 1
        if self.metrics is not None:
            self.metrics.observe_invalidation_record(published=False)
        log.error("cache invalidation NOT published to %s (%s): tenant=%s invalidated_keys=%s causing_edge_ids=%s",
                  self.topic, reason, record.tenant, record.invalidated_keys, record.causing_edge_ids)

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                self._producer.poll(self._poll_interval_s)
            except Exception:  # keep serving delivery reports
                log.exception("serving cache-invalidation delivery reports failed")
                time.sleep(self._poll_interval_s)

    # -- shutdown -----------------------------------------------------------------------------------------------
    def close(self, timeout_s: float = 10.0) -> None:
        """Refuse new records, deliver the queued ones (waiting at most ``timeout_s``), and report the
        ones still undelivered as failed, each logged with its keys. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        self._poller.join()
        remaining = self._producer.flush(timeout_s)
        if remaining:
            # Purged records get a delivery report with a _PURGE_* error: each is counted and logged.
            self._producer.purge()
            self._producer.flush(1.0)
        # Destroy the client now (its connections would retry in the background while this object lives).
        del self._producer
        log.info("cache invalidations: %d published, %d failed", self.published, self.failed)
