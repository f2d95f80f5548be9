"""The monitoring deploy files (deploy/prometheus, deploy/grafana), the metrics the application exports,
and the metric names a PromQL expression references: shared by the rule tests (tests/deploy) and the
metrics tests (tests/streams/test_metrics.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROM_DIR = ROOT / "deploy" / "prometheus"
RULES = PROM_DIR / "rules.yml"
RULES_TEST = PROM_DIR / "rules_test.yml"
PROM_CONFIG = PROM_DIR / "prometheus.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "edgeledger.json"

# The metrics the application exposes, by type (names are fixed).
APP_METRICS: dict[str, str] = {
    "edgeledger_freshness_lag_seconds": "histogram",
    "edgeledger_events_total": "counter",
    "edgeledger_corrections_total": "counter",
    "edgeledger_cache_requests_total": "counter",
    "edgeledger_cache_invalidations_total": "counter",
    "edgeledger_cache_invalidation_records_total": "counter",
    "edgeledger_traversals_total": "counter",
    "edgeledger_traversals_truncated_total": "counter",
    "edgeledger_review_queue_depth": "gauge",
    "edgeledger_consumer_lag_records": "gauge",
    "edgeledger_rebuild_partitions": "gauge",
    "edgeledger_rebuild_log_records_total": "counter",
    "edgeledger_offset_resets_total": "counter",
    "edgeledger_source_last_event_timestamp_seconds": "gauge",
    "edgeledger_source_last_heartbeat_timestamp_seconds": "gauge",
    "edgeledger_source_stale": "gauge",
    "edgeledger_source_slo_max_silence_seconds": "gauge",
    "edgeledger_source_slo_max_p99_lag_seconds": "gauge",
}
# PromQL words that are not metric names: keywords, aggregation operators and functions.
PROMQL_WORDS = frozenset(
    [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "inf",
        "nan",
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "abs",
        "absent",
        "absent_over_time",
        "ceil",
        "changes",
        "clamp",
        "clamp_max",
        "clamp_min",
        "day_of_month",
        "day_of_week",
        "day_of_year",
        "days_in_month",
        "delta",
        "deriv",
        "exp",
        "floor",
        "histogram_count",
        "histogram_fraction",
        "histogram_quantile",
        "histogram_sum",
        "holt_winters",
        "hour",
        "idelta",
        "increase",
        "irate",
        "label_join",
        "label_replace",
        "ln",
        "log2",
        "log10",
        "minute",
        "month",
        "predict_linear",
        "rate",
        "resets",
        "round",
        "scalar",
        "sgn",
        "sort",
        "sort_desc",
        "sqrt",
        "time",
        "timestamp",
        "vector",
        "year",
        "avg_over_time",
        "min_over_time",
        "max_over_time",
        "sum_over_time",
        "count_over_time",
        "quantile_over_time",
        "stddev_over_time",
        "stdvar_over_time",
        "last_over_time",
        "present_over_time",
        "atan2",
    ]
)
_TOKEN = re.compile(r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[A-Za-z]*|[A-Za-z_:][A-Za-z0-9_:]*|\S")


def metric_names(expr: str) -> set[str]:
    """Metric names referenced by a PromQL expression (Grafana variables allowed)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)  # string literals
    s = re.sub(r"\$\{[^}]*\}|\$\w+", "", s)  # Grafana variables ($__rate_interval, ${x})
    s = re.sub(r"\{[^}]*\}", "", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", "", s)  # range and subquery selectors
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", s)  # label lists
    names: set[str] = set()
    for match in _TOKEN.finditer(s):
        token = match.group(0)
        if not re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", token) or token.lower() in PROMQL_WORDS:
            continue
        names.add(token)
    return names
