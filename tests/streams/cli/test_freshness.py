"""`edgeledger freshness` against a generated stream with a known lag distribution, and against the
Prometheus histogram the same load fed: both report the same percentiles, within the histogram's
bucket resolution (sqrt 2)."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from processors.batch import BatchRunner
from processors.freshness import LAG_QUANTILES, histogram_quantile
from schemas.ontology import default_ontology
from schemas.times import format_micros, parse_micros
from state.open import open_writer
from streams.cli.freshness import freshness_app
from streams.metrics import LedgerMetrics
from streams.processor import make_processor

START = parse_micros("2026-03-01T00:00:00Z")
STEP = 10_000_000
SECOND = 1_000_000
HDR_PRECISION = 1e-3


@dataclass
class Stream:
    lines: list[str]
    lags: dict[str, list[int]]
    """Per source, the lag of each fact asserted, in microseconds, in transaction-time order."""
    times: dict[str, list[int]]
    end: int


def draw_lag(rng: random.Random, source: str) -> int:
    """cmdb: log-normal around 30 s; hr: exponential, mean 15 min; policy: uniform 1 s to 2 days."""
    if source == "cmdb":
        return round(rng.lognormvariate(math.log(30), 1.5) * SECOND)
    if source == "hr":
        return round(rng.expovariate(1 / 900) * SECOND)
    return rng.randint(SECOND, 2 * 86_400 * SECOND)


def change(index: int, source: str, detected_at: int) -> dict:
    event = {"kind": "change", "event_id": f"{source}-{index}", "tenant": "acme", "source": {"system": source},
             "detected_at": format_micros(detected_at)}
    if source == "cmdb" and index % 25 == 0:
        # a new owner from a later date each time: the previous fact is closed and its remainder
        # appended again, with the old detected_at; that remainder must not be measured again
        owner = {"src": {"type": "Component", "id": "cmdb:C0"}, "rel": "owned_by",
                 "dst": {"type": "Team", "id": f"hr:T{index}"}, "valid_from": format_micros(START + index * STEP)}
        return event | {"assert": [owner]}
    relationship = {"cmdb": ("Service", "depends_on", "Service"), "hr": ("Person", "member_of", "Team"),
                    "policy": ("Policy", "requires", "ApprovalRole")}[source]
    src_type, rel, dst_type = relationship
    fact = {"src": {"type": src_type, "id": f"{source}:{index}"}, "rel": rel,
            "dst": {"type": dst_type, "id": f"{source}:{index % 40}"}}
    return event | {"assert": [fact]}


def generate(seed: int = 2026, events: int = 2600) -> Stream:
    rng = random.Random(seed)
    lines: list[str] = []
    lags: dict[str, list[int]] = {"cmdb": [], "hr": [], "policy": []}
    times: dict[str, list[int]] = {"cmdb": [], "hr": [], "policy": []}
    now = START
    for index in range(events):
        now += STEP
        source = rng.choices(("cmdb", "hr", "policy"), weights=(6, 3, 1))[0]
        lag = draw_lag(rng, source)
        lines.append(json.dumps({"kind": "clock", "now": format_micros(now)}))
        lines.append(json.dumps(change(index, source, now - lag)))
        lags[source].append(lag)
        times[source].append(now)
    now += STEP
    lines.append(json.dumps({"kind": "clock", "now": format_micros(now)}))
    for source in lags:
        lines.append(json.dumps({"kind": "heartbeat", "event_id": f"hb-{source}", "tenant": "acme",
                                 "source": {"system": source}, "detected_at": format_micros(now)}))
    return Stream(lines, lags, times, now)


@dataclass
class Loaded:
    state: Path
    stream: Stream
    metrics: LedgerMetrics


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Loaded:
    """The stream loaded with the simulated clock, each committed batch observed by the metrics."""
    state = tmp_path_factory.mktemp("freshness") / "state"
    stream = generate()
    metrics = LedgerMetrics()
    store = open_writer(state)

    def commit(pending) -> None:
        store.commit(pending)
        metrics.observe_commit(pending)

    try:
        processor = make_processor(default_ontology(), simulated_clock=True)
        counts = BatchRunner(processor, store, commit, batch_size=500).run(stream.lines)
    finally:
        store.close()
    assert counts.balanced() and counts.dead_lettered == 0 and counts.queued_for_review == 0
    return Loaded(state, stream, metrics)


def freshness(*args: str) -> dict:
    result = CliRunner().invoke(freshness_app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def value_at_rank(values: list[int], q: float) -> int:
    """The exact quantile under HdrHistogram's rank rule: the value at rank q * n, rounded half up."""
    ordered = sorted(values)
    return ordered[max(1, int(q * len(ordered) + 0.5)) - 1]


def scraped_buckets(metrics: LedgerMetrics) -> dict[str, list[tuple[float, float]]]:
    """Per source, (le, cumulative count) of edgeledger_freshness_lag_seconds, as /metrics serves them."""
    buckets: dict[str, list[tuple[float, float]]] = {}
    for family in text_string_to_metric_families(metrics.scrape().decode()):
        if family.name != "edgeledger_freshness_lag_seconds":
            continue
        for sample in family.samples:
            if sample.name == "edgeledger_freshness_lag_seconds_bucket":
                buckets.setdefault(sample.labels["source"], []).append((float(sample.labels["le"]), sample.value))
    return buckets


def test_the_cli_reports_the_known_lag_distribution(loaded: Loaded) -> None:
    report = freshness("--state", str(loaded.state), "--tenant", "acme")
    lag = {row["source"]: row for row in report["lag"]}
    assert set(lag) == {"cmdb", "hr", "policy"}
    for source, values in loaded.stream.lags.items():
        row = lag[source]
        assert row["count"] == len(values)  # one per asserted fact: no remainder counted
        for q, field in zip(LAG_QUANTILES, ("p50_seconds", "p95_seconds", "p99_seconds"), strict=True):
            exact = value_at_rank(values, q) / SECOND
            assert row[field] == pytest.approx(exact, rel=HDR_PRECISION, abs=1e-6), (source, field)
        assert row["max_seconds"] == pytest.approx(max(values) / SECOND, rel=HDR_PRECISION)


def test_metrics_and_cli_percentiles_agree_within_a_bucket(loaded: Loaded) -> None:
    report = freshness("--state", str(loaded.state), "--tenant", "acme")
    buckets = scraped_buckets(loaded.metrics)
    bucket_ratio = math.log(math.sqrt(2))
    for row in report["lag"]:
        source = row["source"]
        observed = dict(buckets[source])
        assert observed[math.inf] == row["count"]
        for q, field in zip(LAG_QUANTILES, ("p50_seconds", "p95_seconds", "p99_seconds"), strict=True):
            from_metrics = histogram_quantile(q, buckets[source])
            assert abs(math.log(from_metrics / row[field])) <= bucket_ratio + HDR_PRECISION, (source, field)


def test_the_window_selects_facts_by_transaction_time(loaded: Loaded) -> None:
    since = START + 1000 * STEP
    until = START + 2000 * STEP
    report = freshness("--state", str(loaded.state), "--tenant", "acme", "--since", format_micros(since) or "",
                       "--until", format_micros(until) or "")
    counts = {row["source"]: row["count"] for row in report["lag"]}
    expected = {source: sum(since <= t < until for t in times) for source, times in loaded.stream.times.items()}
    assert counts == expected
    assert report["since"] == "2026-03-01T02:46:40Z" and report["until"] == "2026-03-01T05:33:20Z"
    as_of = freshness("--state", str(loaded.state), "--tenant", "acme", "--now", format_micros(until) or "")
    before = {source: sum(t < until for t in times) for source, times in loaded.stream.times.items()}
    assert {row["source"]: row["count"] for row in as_of["lag"]} == {s: n for s, n in before.items() if n}, (
        "a past --now with no --until is one view: the facts appended by then")
    assert as_of["until"] == as_of["now"] == format_micros(until)


def test_staleness_per_source_against_the_slo(loaded: Loaded, tmp_path: Path) -> None:
    end = loaded.stream.end
    soon = freshness("--state", str(loaded.state), "--tenant", "acme", "--now", format_micros(end + 60 * SECOND) or "")
    assert {s["source"]: s["status"] for s in soon["staleness"]} == {"cmdb": "fresh", "hr": "fresh", "policy": "fresh"}
    # the three heartbeats were applied 1 µs apart at the end of the stream
    assert [s["silence_seconds"] for s in soon["staleness"]] == pytest.approx([60.0] * 3, abs=1e-5)

    slo = tmp_path / "slo.json"
    slo.write_text(json.dumps({"sources": {"cmdb": {"max_silence_seconds": 30, "max_p99_lag_seconds": 60},
                                           "crm": {"max_silence_seconds": 30, "max_p99_lag_seconds": 60}}}))
    strict = freshness("--state", str(loaded.state), "--tenant", "acme", "--slo", str(slo),
                       "--now", format_micros(end + 60 * SECOND) or "")
    assert {s["source"]: s["status"] for s in strict["staleness"]} == {
        "cmdb": "stale", "crm": "stale", "hr": "no_slo", "policy": "no_slo"}
    never = next(s for s in strict["staleness"] if s["source"] == "crm")
    assert never["last_heard_at"] is None and never["silence_seconds"] is None
    without_slo = {s["source"]: s for s in strict["staleness"] if s["status"] == "no_slo"}
    assert {source: s["last_heard_at"] for source, s in without_slo.items()} == {
        source: s["last_heard_at"] for source, s in {s["source"]: s for s in soon["staleness"]}.items()
        if source in without_slo}, "a source without an SLO was still heard, and says when"
    assert [s["silence_seconds"] for s in without_slo.values()] == pytest.approx([60.0] * 2, abs=1e-5)


def test_staleness_as_of_a_past_instant_is_what_the_ledger_had_heard_by_then(loaded: Loaded, tmp_path: Path) -> None:
    """--now in the middle of the stream: the same staleness as a ledger loaded only up to then (other
    batch cuts), last heard at or before --now, silence never negative; later activity does not count."""
    events = len(loaded.stream.lines) // 2 // 2
    middle = START + events * STEP + 5 * SECOND  # between two events
    state = tmp_path / "state"
    store = open_writer(state)
    try:
        processor = make_processor(default_ontology(), simulated_clock=True)
        BatchRunner(processor, store, store.commit, batch_size=97).run(loaded.stream.lines[:2 * events])
    finally:
        store.close()
    at = format_micros(middle) or ""
    past = freshness("--state", str(loaded.state), "--tenant", "acme", "--now", at)
    assert past["staleness"] == freshness("--state", str(state), "--tenant", "acme", "--now", at)["staleness"]
    assert {s["source"] for s in past["staleness"]} == {"cmdb", "hr", "policy"}
    for source in past["staleness"]:
        assert parse_micros(source["last_heard_at"]) <= middle and source["silence_seconds"] >= 0
    # the closing heartbeats were applied at the stream's last clock and 1 and 2 µs after it
    end = loaded.stream.end
    at_end = freshness("--state", str(loaded.state), "--tenant", "acme", "--now", format_micros(end) or "")
    assert {s["source"]: parse_micros(s["last_heard_at"]) == end for s in at_end["staleness"]} == {
        "cmdb": True, "hr": False, "policy": False}, "hr's and policy's were not applied yet"
    after = freshness("--state", str(loaded.state), "--tenant", "acme", "--now", format_micros(end + SECOND) or "")
    assert [s["silence_seconds"] for s in after["staleness"]] == pytest.approx([1.0] * 3, abs=1e-5)


def test_text_output_and_an_empty_tenant(loaded: Loaded) -> None:
    result = CliRunner().invoke(freshness_app, ["--state", str(loaded.state), "--tenant", "acme"])
    assert result.exit_code == 0, result.output
    assert "p99 s" in result.output and "cmdb" in result.output and "staleness as of" in result.output
    empty = CliRunner().invoke(freshness_app, ["--state", str(loaded.state), "--tenant", "nobody"])
    assert "no facts asserted in this window" in empty.output and "never" in empty.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "yesterday"], "--since"),
        (["--since", "2026-03-02", "--until", "2026-03-01"], "must be after --since"),
        (["--now", "2026-03-01T00:00:00"], "timezone"),
    ],
)
def test_bad_input_is_one_clear_error(loaded: Loaded, args: list[str], message: str) -> None:
    result = CliRunner().invoke(freshness_app, ["--state", str(loaded.state), "--tenant", "acme", *args])
    assert result.exit_code == 2 and message in result.output


def test_a_missing_state_directory_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(freshness_app, ["--state", str(tmp_path / "none"), "--tenant", "acme"])
    assert isinstance(result.exception, FileNotFoundError) and "no ledger state" in str(result.exception)
