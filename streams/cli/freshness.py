"""`edgeledger freshness`: freshness lag percentiles per source, read back from the ledger itself,
and which sources are stale.

Lag is ``tx_from - detected_at`` of each newly asserted fact (the version with
``origin == edge_id``; see ``processors.freshness``), for versions appended in the transaction-time
window ``[--since, --until)``. Percentiles come from an HDR histogram (3 significant digits), so
they are exact to 0.1 % and comparable with the Prometheus histogram's bucket estimates.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

import typer
from hdrh.histogram import HdrHistogram
from pydantic import BaseModel, ConfigDict

from processors.commit_summary import lag_micros
from processors.freshness import assess_silence
from processors.model import EdgeVersion, last_heard_tx
from schemas.slo import SloConfig, slo_or_default
from schemas.times import MICROS, format_micros, parse_micros
from state.open import open_reader
from state.store import LedgerStore
from streams.cli.options import Tenant
from streams.processor import wall_clock_micros

HDR_SIGNIFICANT_DIGITS = 3
HDR_HIGHEST_MICROS = 100 * 366 * 86_400 * MICROS
"""A century: a backfill of very old changes still fits (larger lags are recorded as this)."""

freshness_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Freshness lag per source (p50/p95/p99/max) and source staleness against the SLO.",
)


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SourceLag(Out):
    source: str
    count: int
    p50_seconds: float
    p95_seconds: float
    p99_seconds: float
    max_seconds: float


class SourceStaleness(Out):
    source: str
    status: Literal["fresh", "stale", "no_slo"]
    last_heard_at: str | None
    """Transaction time of the newest change or heartbeat applied from the source."""
    silence_seconds: float | None
    max_silence_seconds: float | None


class FreshnessReport(Out):
    tenant: str
    since: str | None
    until: str | None
    now: str
    lag: list[SourceLag]
    staleness: list[SourceStaleness]


def appended_in_window(store: LedgerStore, tenant: str, since: int | None, until: int | None) -> Iterator[EdgeVersion]:
    """Versions appended in ``[since, until)`` of transaction time, in transaction-time order."""
    for tx, edge_id, what in store.versions_in_tx_order(tenant):
        if until is not None and tx >= until:
            return
        if what != "appended" or (since is not None and tx < since):
            continue
        version = store.version(tenant, edge_id)
        if version is not None:
            yield version


def lag_histograms(versions: Iterator[EdgeVersion]) -> dict[str, HdrHistogram]:
    """Lag in microseconds per source (authority), one HDR histogram each."""
    histograms: dict[str, HdrHistogram] = {}
    for version in versions:
        lag = lag_micros(version)
        if lag is None:
            continue
        histogram = histograms.get(version.authority)
        if histogram is None:
            histogram = histograms[version.authority] = HdrHistogram(1, HDR_HIGHEST_MICROS, HDR_SIGNIFICANT_DIGITS)
        histogram.record_value(min(lag, HDR_HIGHEST_MICROS))
    return histograms


def summarise(source: str, histogram: HdrHistogram) -> SourceLag:
    def seconds(micros: int) -> float:
        return micros / MICROS

    return SourceLag(
        source=source,
        count=histogram.get_total_count(),
        p50_seconds=seconds(histogram.get_value_at_percentile(50)),
        p95_seconds=seconds(histogram.get_value_at_percentile(95)),
        p99_seconds=seconds(histogram.get_value_at_percentile(99)),
        max_seconds=seconds(histogram.get_max_value()),
    )


def staleness(store: LedgerStore, tenant: str, slo: SloConfig, now: int) -> list[SourceStaleness]:
    """Each source as of ``now``: what the ledger had heard from it by then (a past ``--now`` is an
    as-of view, so last heard is at or before it and silence is never negative)."""
    activity = store.source_activity(tenant, now)
    found = [
        SourceStaleness(
            source=source,
            status=silence.state,
            last_heard_at=format_micros(silence.last_heard_tx),
            silence_seconds=None if silence.silence_micros is None else silence.silence_micros / MICROS,
            max_silence_seconds=silence.max_silence_micros / MICROS,
        )
        for source, silence in assess_silence(activity, slo, now).items()
    ]
    for source in activity.keys() - slo.sources.keys():
        heard = last_heard_tx(activity[source])  # heard by ``now``: the activity is as of it
        found.append(SourceStaleness(source=source, status="no_slo", last_heard_at=format_micros(heard),
                                     silence_seconds=None if heard is None else (now - heard) / MICROS,
                                     max_silence_seconds=None))
    return sorted(found, key=lambda s: s.source)


def freshness_report(store: LedgerStore, tenant: str, since: int | None, until: int | None, slo: SloConfig,
                     now: int) -> FreshnessReport:
    histograms = lag_histograms(appended_in_window(store, tenant, since, until))
    return FreshnessReport(
        tenant=tenant,
        since=format_micros(since),
        until=format_micros(until),
        now=format_micros(now) or "",
        lag=[summarise(source, histograms[source]) for source in sorted(histograms)],
        staleness=staleness(store, tenant, slo, now),
    )


def render_text(report: FreshnessReport) -> str:
    window = f"[{report.since or 'start'}, {report.until or 'now'})"
    lines = [f"freshness lag, tenant {report.tenant}, transaction time {window}",
             f"{'source':<12} {'count':>8} {'p50 s':>12} {'p95 s':>12} {'p99 s':>12} {'max s':>12}"]
    lines += [f"{s.source:<12} {s.count:>8} {s.p50_seconds:>12.3f} {s.p95_seconds:>12.3f} {s.p99_seconds:>12.3f} "
              f"{s.max_seconds:>12.3f}" for s in report.lag]
    if not report.lag:
        lines.append("no facts asserted in this window")
    lines += ["", f"staleness as of {report.now}",
              f"{'source':<12} {'status':<7} {'last heard (tx)':<28} {'silence s':>12} {'max silence s':>14}"]
    for s in report.staleness:
        silence = f"{s.silence_seconds:.0f}" if s.silence_seconds is not None else "never"
        limit = f"{s.max_silence_seconds:.0f}" if s.max_silence_seconds is not None else "-"
        lines.append(f"{s.source:<12} {s.status:<7} {s.last_heard_at or '-':<28} {silence:>12} {limit:>14}")
    return "\n".join(lines) + "\n"


def _instant(text: str | None, flag: str) -> int | None:
    if text is None:
        return None
    try:
        return parse_micros(text)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint=flag) from None


@freshness_app.command("freshness")
def freshness(
    state: Annotated[Path, typer.Option("--state", help="Ledger state directory (RocksDB).")],
    tenant: Tenant,
    since: Annotated[str | None, typer.Option("--since", help="Window start, transaction time (ISO-8601).")] = None,
    until: Annotated[str | None, typer.Option("--until", help="Window end, exclusive (ISO-8601).")] = None,
    slo: Annotated[Path | None, typer.Option(
        "--slo", help="SLO file (default: the bundled schemas/slo_default.json; deploy/slo.json is a copy).")] = None,
    now: Annotated[
        str | None, typer.Option("--now", help="Judge staleness as of this instant (ISO-8601). Default: now.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """Freshness lag p50/p95/p99/max per source, and which sources are stale."""
    start, end = _instant(since, "--since"), _instant(until, "--until")
    if start is not None and end is not None and end <= start:
        raise typer.BadParameter("must be after --since", param_hint="--until")
    at = _instant(now, "--now")
    moment = at if at is not None else wall_clock_micros()
    limits = slo_or_default(slo)
    store = open_reader(state)
    try:
        # One view as of --now: with no --until, the lag window ends there too.
        report = freshness_report(store, tenant, start, end if end is not None else moment, limits, moment)
    finally:
        store.close()
    sys.stdout.write(report.model_dump_json(indent=2) + "\n" if as_json else render_text(report))
