"""What `edgeledger run` does besides applying events: metrics, and the freshness monitor on a timer.

The freshness tick (a faust timer) judges each tenant's sources against their SLOs, publishes
every stale/fresh flip once to ``source-status``, records it so a restart neither repeats nor
misses one, and refreshes the source and review-queue gauges.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from processors.freshness import FreshnessMonitor
from schemas.slo import SloConfig
from schemas.topics import Topic
from state.freshness_store import FreshnessStore
from state.store import LedgerStore
from streams.kafka.produce import deliver, delivery_producer
from streams.kafka.topics import TopicSettings
from streams.metrics import LedgerMetrics

log = logging.getLogger(__name__)


class FreshnessTicker:
    def __init__(self, store: LedgerStore, slo: SloConfig, metrics: LedgerMetrics, bootstrap: str,
                 topics: TopicSettings, clock: Callable[[], int]) -> None:
        self.store = store
        self.slo = slo
        self.metrics = metrics
        self.statuses = FreshnessStore(store.kv)
        self.monitors: dict[str, FreshnessMonitor] = {}
        self.producer = delivery_producer(bootstrap)
        self.topic = topics.name(Topic.SOURCE_STATUS)
        self.clock = clock

    def __call__(self) -> None:
        now = self.clock()
        activities = []
        stale_anywhere: set[str] = set()
        review_depth = 0
        for tenant in self.store.tenants_with_activity():
            activity = self.store.source_activity(tenant)
            activities += activity.values()
            monitor = self.monitors.get(tenant) or self.statuses.monitor(tenant, self.slo)
            self.monitors[tenant] = monitor
            transitions = monitor.evaluate(activity, now)
            for transition in transitions:
                log.warning("source %s for tenant %s is now %s", transition.source, tenant, transition.status)
            if transitions:
                records = [(self.topic, f"{tenant}/{t.source}".encode(), t.to_event().model_dump_json().encode())
                           for t in transitions]
                deliver(self.producer, records, 10)
                self.statuses.record(transitions)
            stale_anywhere |= monitor.stale()
            review_depth += self.store.review_count(tenant)
        self.metrics.set_source_status(activities, stale_anywhere, self.slo.sources)
        self.metrics.set_review_depth(review_depth)

