"""Freshness: how late facts reach the ledger, and which sources have gone quiet. Pure: the clock
and the source activity come in as arguments; nothing here reads storage or exports metrics.

Two decisions:

- **Lag is measured once per asserted fact**, on the version first appended for it
  (``origin == edge_id``), as ``tx_from - detected_at``. Remainders that a later correction
  appends keep the original fact's ``detected_at`` and ``event_id`` (provenance follows the fact),
  so measuring them again would count one fact twice, with the age of the correction as its lag.
  (``processors.commit_summary.lag_micros`` is that definition; this module buckets the lags.)
  A ``detected_at`` after our transaction time (a source clock running ahead) counts as lag 0.
- **Silence is measured on transaction time**, not on the source's ``detected_at``: the last
  instant the ledger applied a change or heartbeat from the source, against ``now`` from the same
  clock. Transaction time is ours: strictly increasing, comparable with ``now``, and untouched by a
  source whose clock is skewed or that replays old changes (an old ``detected_at`` is a late
  fact, not a silent source). It also means a source is stale when the ledger has stopped
  applying its events for any reason, e.g. the processor lags behind; answers really are out of
  date then, which is what staleness warns about (the alert text tells the two causes apart by
  consumer lag). A source the ledger has never heard from is stale: nothing says it is fresh.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from processors.model import SourceActivity, last_heard_tx
from processors.queries import StaleSources
from schemas.ontology import Ontology
from schemas.slo import SloConfig, SourceState, SourceStatus
from schemas.times import MICROS, from_micros

LAG_QUANTILES = (0.5, 0.95, 0.99)
FOURTEEN_DAYS_SECONDS = 14 * 24 * 3600


# -- lag buckets -----------------------------------------------------------------------------------------
def exponential_buckets(start: float, factor: float, at_least: float) -> tuple[float, ...]:
    """Upper bounds ``start * factor**i`` (to 12 significant digits, for readable ``le`` labels)
    from ``start`` until one reaches ``at_least``."""
    if start <= 0 or factor <= 1:
        raise ValueError("exponential buckets need start > 0 and factor > 1")
    count = math.ceil(math.log(at_least / start) / math.log(factor) - 1e-9) + 1
    return tuple(float(f"{start * factor**i:.12g}") for i in range(count))


LAG_BUCKETS_SECONDS = exponential_buckets(0.01, math.sqrt(2), FOURTEEN_DAYS_SECONDS)
"""0.01 s to about 15.5 days, each bound sqrt(2) times the one before (55 buckets)."""


def bucket_bounds(value: float, upper_bounds: Sequence[float] = LAG_BUCKETS_SECONDS) -> tuple[float, float]:
    """The (lower, upper] bucket of ``upper_bounds`` that holds ``value``; above the last: (last, inf)."""
    index = bisect.bisect_left(upper_bounds, value)
    lower = upper_bounds[index - 1] if index > 0 else 0.0
    upper = upper_bounds[index] if index < len(upper_bounds) else math.inf
    return lower, upper


def histogram_quantile(q: float, cumulative: Sequence[tuple[float, float]]) -> float:
    """Prometheus's ``histogram_quantile`` over one histogram's cumulative buckets ``(le, count)``:
    find the bucket holding rank ``q * count`` and interpolate linearly within it."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    buckets = sorted(cumulative)
    if len(buckets) < 2 or not math.isinf(buckets[-1][0]):
        return math.nan
    monotonic: list[tuple[float, float]] = []
    highest = 0.0
    for upper, count in buckets:
        highest = max(highest, count)
        monotonic.append((upper, highest))
    observations = monotonic[-1][1]
    if observations == 0:
        return math.nan
    rank = q * observations
    index = next(i for i, (_, count) in enumerate(monotonic) if count >= rank)
    if index == len(monotonic) - 1:
        return monotonic[-2][0]
    upper, count = monotonic[index]
    if index == 0 and upper <= 0:
        return upper
    lower = 0.0
    if index > 0:
        lower, below = monotonic[index - 1]
        count -= below
        rank -= below
    return lower + (upper - lower) * (rank / count) if count else upper


# -- silence and staleness -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SourceSilence:
    """How long the ledger has heard nothing from one source, against its SLO."""

    source: str
    last_heard_tx: int | None
    silence_micros: int | None
    max_silence_micros: int

    @property
    def stale(self) -> bool:
        return self.silence_micros is None or self.silence_micros > self.max_silence_micros

    @property
    def state(self) -> SourceState:
        return "stale" if self.stale else "fresh"


def assess_silence(activity: Mapping[str, SourceActivity], slo: SloConfig, now: int) -> dict[str, SourceSilence]:
    """Every source with an SLO, for one tenant's ``activity`` (by source system), as of ``now``."""
    silences = {}
    for source, limits in slo.sources.items():
        heard = last_heard_tx(activity.get(source))
        silences[source] = SourceSilence(
            source=source,
            last_heard_tx=heard,
            silence_micros=None if heard is None else now - heard,
            max_silence_micros=round(limits.max_silence_seconds * MICROS),
        )
    return silences


def stale_sources(activity: Mapping[str, SourceActivity], slo: SloConfig, now: int) -> set[str]:
    """Sources silent for longer than their ``max_silence_seconds`` (or never heard from) at ``now``."""
    return {source for source, silence in assess_silence(activity, slo, now).items() if silence.stale}


# -- the state machine behind source-status events -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SourceStatusTransition:
    tenant: str
    previous: SourceState | None
    at: int
    silence: SourceSilence

    @property
    def source(self) -> str:
        return self.silence.source

    @property
    def status(self) -> SourceState:
        return self.silence.state

    def to_event(self) -> SourceStatus:
        silence = self.silence
        return SourceStatus(
            tenant=self.tenant,
            source=silence.source,
            status=silence.state,
            previous=self.previous,
            at=from_micros(self.at),
            last_heard_at=None if silence.last_heard_tx is None else from_micros(silence.last_heard_tx),
            silence_seconds=None if silence.silence_micros is None else silence.silence_micros / MICROS,
            max_silence_seconds=silence.max_silence_micros / MICROS,
        )


@dataclass
class FreshnessMonitor:
    """Flips each of one tenant's sources between fresh and stale, emitting each flip once.

    ``statuses`` is the last state emitted per source; seed it from storage on start so a restart
    neither repeats nor loses a transition. The first judgement of a source is a transition from
    ``None``, so the ``source-status`` topic holds every judged source's current state.
    """

    tenant: str
    slo: SloConfig
    statuses: dict[str, SourceState] = field(default_factory=dict)

    def evaluate(self, activity: Mapping[str, SourceActivity], now: int) -> list[SourceStatusTransition]:
        transitions = []
        for source, silence in sorted(assess_silence(activity, self.slo, now).items()):
            previous = self.statuses.get(source)
            if previous == silence.state:
                continue
            self.statuses[source] = silence.state
            transitions.append(SourceStatusTransition(self.tenant, previous, now, silence))
        return transitions

    def stale(self) -> set[str]:
        """The sources the last ``evaluate`` judged stale."""
        return {source for source in self.slo.sources if self.statuses.get(source) == "stale"}


# -- coverage for queries -------------------------------------------------------------------------------------
def stale_sources_for_queries(
    ontology: Ontology,
    slo: SloConfig,
    activity_of: Callable[[str, int], Mapping[str, SourceActivity]],
    clock: Callable[[], int] | None = None,
) -> StaleSources:
    """The ``QueryEngine.stale_sources`` hook: of the source systems the query's relationships come
    from (the ontology's ``sources``), those stale for the tenant at the query's ``known_at``, sorted.

    ``activity_of(tenant, at)`` is the tenant's source activity as the ledger had recorded it at
    ``at`` (``LedgerStore.source_activity``): a past answer is judged on what had been heard by then,
    not on what was heard afterwards, so it is the same whatever the ledger applied since. With a
    ``clock``, a ``known_at`` after its now is judged at now: nothing says how long a source will
    be silent in the future (the HTTP API's current answers, which the wall clock moves)."""
    sources_of = {name: frozenset(spec.sources) for name, spec in ontology.relationships.items()}

    def stale_for(tenant: str, relationships: frozenset[str], known_at: int) -> list[str]:
        needed = frozenset().union(*(sources_of.get(rel, frozenset()) for rel in relationships))
        if not needed:
            return []
        at = known_at if clock is None else min(known_at, clock())
        return sorted(needed & stale_sources(activity_of(tenant, at), slo, at))

    return stale_for
