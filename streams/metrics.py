"""Prometheus metrics. Names and labels are fixed: deploy/prometheus/rules.yml and the Grafana
dashboard are written against them.

Metrics are observers. The ledger core never calls them: after each atomic commit the shell hands
the committed ``PendingLedger`` to ``LedgerMetrics.observe_commit``, and the query, cache and
freshness shells report through the other ``observe_*``/``set_*`` methods. Every metric lives in
one ``CollectorRegistry`` owned by ``LedgerMetrics`` (not the process-global default registry), so
a process, or a test, can hold several independent sets.

Timestamps are transaction time (the ledger's clock), in seconds since the epoch, so Prometheus
can compare them with its own ``time()``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from threading import Thread
from typing import Generic, TypeVar
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server
from prometheus_client.asgi import make_asgi_app

from processors.commit_summary import summarise_commit
from processors.freshness import LAG_BUCKETS_SECONDS
from processors.model import SourceActivity
from processors.pending import PendingLedger
from schemas.events import EVENT_KINDS
from schemas.results import QueryResult
from schemas.slo import SloConfig
from schemas.times import MICROS

UNKNOWN = "unknown"
"""Label value for what an event that could not be parsed does not tell us (its source or kind)."""
NO_SOURCE = "none"
"""Source label of the kinds that carry no source system (revocations by id, commands, traces, clock)."""
SOURCELESS_KINDS = frozenset({"revoke", "merge", "split", "alias", "trace", "clock"})
_KNOWN_KINDS = frozenset(EVENT_KINDS)

M = TypeVar("M", Counter, Gauge)


class _Children(Generic[M]):
    """A labelled metric with its children cached by label values: ``labels()`` costs a lock and a
    few dict lookups per call, too much to pay per event in the hot path."""

    def __init__(self, metric: M) -> None:
        self.metric = metric
        self._children: dict[Hashable, M] = {}

    def __call__(self, *values: str) -> M:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
        return child


class BatchedHistogram:
    """prometheus-client's ``Histogram`` with one label, fed a committed batch's values at once.

    Why: ``Histogram.observe`` walks the bucket bounds in Python and takes a lock per value, most of
    ``observe_commit``'s time on the worker's hot path with the 55 freshness-lag buckets. Here a
    batch's values are counted per bucket by ``bisect``, then added to the client's own bucket and
    sum values, one ``inc`` per bucket the batch touched: the client histogram holds and exposes
    everything."""

    def __init__(self, name: str, documentation: str, label: str, buckets: Iterable[float],
                 registry: CollectorRegistry) -> None:
        self.histogram = Histogram(name, documentation, [label], buckets=tuple(buckets), registry=registry)
        self._bounds: tuple[float, ...] = tuple(self.histogram._upper_bounds)  # the client's, +Inf last

    def observe_all(self, label_value: str, values: Sequence[float]) -> None:
        """Observe each of ``values`` for ``label_value`` (none: no series, as ``observe`` would make none)."""
        if not values:
            return
        bounds = self._bounds
        counts = [0] * len(bounds)
        total = 0.0
        for value in values:
            counts[bisect_left(bounds, value)] += 1  # the first bucket whose bound is >= value, as observe's
            total += value
        child = self.histogram.labels(label_value)
        for bucket, count in zip(child._buckets, counts, strict=True):
            if count:
                bucket.inc(count)
        child._sum.inc(total)


def source_label(system: str | None, kind: str | None) -> str:
    if system is not None:
        return system
    return NO_SOURCE if kind in SOURCELESS_KINDS else UNKNOWN


def kind_label(kind: str | None) -> str:
    """An event's kind, or ``unknown``: a kind we do not know never becomes a label value, so bad
    input cannot create series without bound."""
    return kind if kind in _KNOWN_KINDS else UNKNOWN


def _seconds(micros: int) -> float:
    return micros / MICROS


class LedgerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.freshness_lag = BatchedHistogram(
            "edgeledger_freshness_lag_seconds",
            "Transaction time of a newly asserted edge version minus the time its source detected the change.",
            "source", LAG_BUCKETS_SECONDS, r,
        )
        self.events = Counter(
            "edgeledger_events_total",
            "Events read, by source system, kind and outcome (applied, dead_lettered, queued_for_review, duplicate).",
            ["source", "kind", "outcome"], registry=r,
        )
        self.corrections = Counter(
            "edgeledger_corrections_total", "Correction events (closed beliefs), by the source of the closed versions.",
            ["source"], registry=r,
        )
        self.cache_requests = Counter(
            "edgeledger_cache_requests_total", "Traversal cache lookups, by result (hit, miss).", ["result"],
            registry=r,
        )
        self.cache_invalidations = Counter(
            "edgeledger_cache_invalidations_total", "Cached answers invalidated by new or closed edge versions.",
            registry=r,
        )
        self.cache_invalidation_records = Counter(
            "edgeledger_cache_invalidation_records_total",
            "Invalidation records produced to the cache-invalidations topic (serve --bootstrap), by result: "
            "published (acknowledged by the broker) or failed (not delivered; logged with its keys).",
            ["result"], registry=r,
        )
        self.traversals = Counter("edgeledger_traversals_total", "Traversals answered, by query.", ["query"],
                                  registry=r)
        self.traversals_truncated = Counter(
            "edgeledger_traversals_truncated_total", "Traversals that hit a ceiling, by query.", ["query"],
            registry=r,
        )
        self.review_queue_depth = Gauge("edgeledger_review_queue_depth", "Items waiting in the review queue.",
                                        registry=r)
        self.consumer_lag = Gauge(
            "edgeledger_consumer_lag_records", "Records not yet consumed, by topic and partition.",
            ["topic", "partition"], registry=r,
        )
        self.rebuild_partitions = Gauge(
            "edgeledger_rebuild_partitions",
            "Log partitions this worker rebuilds from edge-versions before it resumes their input.", registry=r,
        )
        self.rebuild_records = Counter(
            "edgeledger_rebuild_log_records", "edge-versions records replayed into this worker's state by rebuilds.",
            registry=r,
        )
        self.offset_resets = Counter(
            "edgeledger_offset_resets_total",
            "Input partitions read from their start because the offset stored for them was read from "
            "another topic of the same name (a broker or topic made anew), by topic.", ["topic"], registry=r,
        )
        self.source_last_event = Gauge(
            "edgeledger_source_last_event_timestamp_seconds",
            "Transaction time of the newest change event applied from the source.", ["source"], registry=r,
        )
        self.source_last_heartbeat = Gauge(
            "edgeledger_source_last_heartbeat_timestamp_seconds",
            "Transaction time of the newest heartbeat applied from the source.", ["source"], registry=r,
        )
        self.source_stale = Gauge(
            "edgeledger_source_stale", "1 while the source is past its max-silence SLO (for any tenant), else 0.",
            ["source"], registry=r,
        )
        self.slo_max_silence = Gauge(
            "edgeledger_source_slo_max_silence_seconds", "The source's max-silence SLO.", ["source"], registry=r,
        )
        self.slo_max_p99_lag = Gauge(
            "edgeledger_source_slo_max_p99_lag_seconds", "The source's p99 freshness-lag SLO.", ["source"],
            registry=r,
        )
        self._events = _Children(self.events)
        self._corrections = _Children(self.corrections)
        self._last_event = _Children(self.source_last_event)
        self._last_heartbeat = _Children(self.source_last_heartbeat)
        self._latest_change_tx: dict[str, int] = {}
        self._latest_heartbeat_tx: dict[str, int] = {}

    # -- the write path, once per committed batch ----------------------------------------------------------
    def observe_commit(self, pending: PendingLedger) -> None:
        """Count a committed batch: events by source/kind/outcome, the freshness lag of each newly
        asserted fact, corrections by source, and the newest change and heartbeat per source."""
        summary = summarise_commit(pending)  # one compiled pass over the batch
        labelled: dict[tuple[str, str, str], int] = {}
        for (system, kind, result), count in summary.outcomes.items():
            label = (source_label(system, kind), kind_label(kind), result)
            labelled[label] = labelled.get(label, 0) + count  # unknown kinds share one label
        for label, count in labelled.items():
            self._events(*label).inc(count)
        for source, seconds in summary.lag_seconds.items():
            self.freshness_lag.observe_all(source, seconds)
        for corrected_source, count in summary.corrections.items():
            self._corrections(corrected_source if corrected_source is not None else UNKNOWN).inc(count)
        self._advance(self._latest_change_tx, self._last_event, summary.newest_change_tx)
        self._advance(self._latest_heartbeat_tx, self._last_heartbeat, summary.newest_heartbeat_tx)

    @staticmethod
    def _advance(latest: dict[str, int], gauge: _Children[Gauge], newest: Mapping[str, int]) -> None:
        """Move a per-source timestamp gauge forward, never back."""
        for source, tx in newest.items():
            if tx > latest.get(source, tx - 1):
                latest[source] = tx
                gauge(source).set(_seconds(tx))

    # -- the read path ---------------------------------------------------------------------------------------
    def observe_query(self, result: QueryResult) -> None:
        self.traversals.labels(result.query.name).inc()
        if result.truncated:
            self.traversals_truncated.labels(result.query.name).inc()

    def observe_cache(self, hit: bool) -> None:
        self.cache_requests.labels("hit" if hit else "miss").inc()

    def observe_invalidations(self, count: int) -> None:
        if count:
            self.cache_invalidations.inc(count)

    def observe_invalidation_record(self, published: bool) -> None:
        self.cache_invalidation_records.labels("published" if published else "failed").inc()

    def expect_invalidation_records(self) -> None:
        """Expose both results at 0 from the start, so an alert on ``failed`` has a series to watch."""
        for result in ("published", "failed"):
            self.cache_invalidation_records.labels(result)

    # -- levels --------------------------------------------------------------------------------------------------
    def set_review_depth(self, depth: int) -> None:
        self.review_queue_depth.set(depth)

    def set_consumer_lag(self, topic: str, partition: int, lag: int) -> None:
        self.consumer_lag.labels(topic, str(partition)).set(lag)

    def observe_rebuild(self, partitions: int, records: int) -> None:
        """Rebuilds in progress: how many partitions are left, and the log records replayed since the last call."""
        self.rebuild_partitions.set(partitions)
        if records:
            self.rebuild_records.inc(records)

    def observe_offset_reset(self, topic: str, partition: int) -> None:
        self.offset_resets.labels(topic).inc()

    def set_slo(self, slo: SloConfig) -> None:
        for source, limits in slo.sources.items():
            self.slo_max_silence.labels(source).set(limits.max_silence_seconds)
            self.slo_max_p99_lag.labels(source).set(limits.max_p99_lag_seconds)

    def set_source_status(self, activities: Iterable[SourceActivity], stale: Iterable[str],
                          judged: Iterable[str]) -> None:
        """Source gauges over every tenant: the newest change and heartbeat applied from each source
        (``activities`` of all tenants; this also seeds the timestamps after a restart), and
        ``edgeledger_source_stale`` = 1 for the ``judged`` sources in ``stale`` (stale for any tenant),
        0 for the other judged ones."""
        changes: dict[str, int] = {}
        beats: dict[str, int] = {}
        for activity in activities:
            if activity.last_change_tx is not None:
                changes[activity.system] = max(changes.get(activity.system, activity.last_change_tx),
                                               activity.last_change_tx)
            if activity.last_heartbeat_tx is not None:
                beats[activity.system] = max(beats.get(activity.system, activity.last_heartbeat_tx),
                                             activity.last_heartbeat_tx)
        self._advance(self._latest_change_tx, self._last_event, changes)
        self._advance(self._latest_heartbeat_tx, self._last_heartbeat, beats)
        stale_now = frozenset(stale)
        for source in judged:
            self.source_stale.labels(source).set(1 if source in stale_now else 0)

    def scrape(self) -> bytes:
        """The registry in the Prometheus text format, as ``/metrics`` serves it."""
        return generate_latest(self.registry)


def serve_metrics(registry: CollectorRegistry, port: int, address: str = "0.0.0.0") -> tuple[WSGIServer, Thread]:
    """Serve ``/metrics`` from a daemon thread (``edgeledger run``, :9108). Stop it with
    ``server.shutdown()``."""
    return start_http_server(port, address, registry=registry)


def metrics_asgi_app(registry: CollectorRegistry) -> Callable[..., Awaitable[None]]:
    """An ASGI app serving the registry, to mount at ``/metrics`` in the HTTP API (``edgeledger serve``)."""
    return make_asgi_app(registry=registry)
