"""The freshness monitor's persisted state: the last status emitted per (tenant, source).

Table ``F`` (beside the ledger's tables in ``state/store.py``): key ``tenant, source``, value
``[status, at]`` (``at`` in microseconds of transaction time). Seeding ``FreshnessMonitor`` from it
on start means a restart neither repeats a ``source-status`` event nor misses a flip.
"""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from processors.freshness import FreshnessMonitor, SourceStatusTransition
from schemas.slo import SloConfig, SourceState
from state.keys import pack, unpack
from state.kv import OrderedKV

_TABLE = b"F"
_STATES: frozenset[str] = frozenset({"fresh", "stale"})


class FreshnessStore:
    def __init__(self, kv: OrderedKV) -> None:
        self.kv = kv

    def statuses(self, tenant: str) -> dict[str, SourceState]:
        found: dict[str, SourceState] = {}
        for key, value in self.kv.scan(_TABLE + pack(tenant)):
            _, source = unpack(key[1:])
            status, _ = orjson.loads(value)
            if status in _STATES:
                found[str(source)] = status
        return found

    def monitor(self, tenant: str, slo: SloConfig) -> FreshnessMonitor:
        """A monitor for ``tenant`` that resumes from the statuses last recorded."""
        return FreshnessMonitor(tenant, slo, self.statuses(tenant))

    def record(self, transitions: Iterable[SourceStatusTransition]) -> None:
        """Store the new statuses in one atomic write; call it after the events are published."""
        puts = [
            (_TABLE + pack(t.tenant, t.source), orjson.dumps([t.status, t.at]))
            for t in transitions
        ]
        if puts:
            self.kv.write(puts)
