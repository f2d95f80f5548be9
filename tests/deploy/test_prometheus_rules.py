"""Checks for the monitoring deploy files (deploy/prometheus, deploy/grafana).

promtool validates the rules and the scrape config and runs the rule unit tests; if it is not on
PATH, .ci/ensure-promtool.sh installs it (Debian's `prometheus` package). These tests never skip.

Every metric name referenced by the rules and by the Grafana dashboard must be one the application
exports (APP_METRICS, tests/support/monitoring.py), a recording rule defined in rules.yml, or `up`
(synthesised by Prometheus for every scrape target).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.monitoring import (
    APP_METRICS,
    DASHBOARD,
    PROM_CONFIG,
    ROOT,
    RULES,
    RULES_TEST,
    metric_names,
)

ENSURE_PROMTOOL = ROOT / ".ci" / "ensure-promtool.sh"

# Series names as scraped: a histogram is exposed as _bucket, _sum and _count.
EXPOSED_SERIES: frozenset[str] = frozenset(
    name + suffix
    for name, kind in APP_METRICS.items()
    for suffix in (("_bucket", "_sum", "_count") if kind == "histogram" else ("",))
)
# Series Prometheus itself adds for every scrape target.
PROMETHEUS_SYNTHETIC: frozenset[str] = frozenset({"up"})

REQUIRED_RECORDING_RULES = {
    "source:edgeledger_freshness_lag_seconds:p50",
    "source:edgeledger_freshness_lag_seconds:p95",
    "source:edgeledger_freshness_lag_seconds:p99",
}
REQUIRED_ALERTS = {
    "EdgeledgerSourceStale",
    "EdgeledgerFreshnessLagAboveSLO",
    "EdgeledgerDeadLetterRateHigh",
    "EdgeledgerReviewQueueGrowing",
}



def test_metric_names_parser() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (source, le) (rate(foo_bucket{source=~"$source", le!="1"}[$__rate_interval])))'
        " > on (source) group_left max without (job) (bar:baz:p99 offset 1h) and time() - 1e3 > 5"
    )
    assert metric_names(expr) == {"foo_bucket", "bar:baz:p99"}


# --------------------------------------------------------------------------------------------- promtool


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path to a working promtool, installing it with .ci/ensure-promtool.sh if missing."""
    path = shutil.which("promtool")
    if path is None:
        proc = subprocess.run(["bash", str(ENSURE_PROMTOOL)], cwd=ROOT, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            pytest.fail(f"{ENSURE_PROMTOOL} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        path = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
    if path is None:
        pytest.fail("promtool is still not on PATH after running .ci/ensure-promtool.sh")
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0, f"promtool --version failed:\n{version.stdout}\n{version.stderr}"
    return path


def run_promtool(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([promtool, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"promtool {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_promtool_check_rules(promtool: str) -> None:
    proc = run_promtool(promtool, "check", "rules", str(RULES.relative_to(ROOT)))
    assert "SUCCESS" in proc.stdout


def test_promtool_test_rules(promtool: str) -> None:
    proc = run_promtool(promtool, "test", "rules", str(RULES_TEST.relative_to(ROOT)))
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_promtool_check_config(promtool: str) -> None:
    proc = run_promtool(promtool, "check", "config", str(PROM_CONFIG.relative_to(ROOT)))
    assert "SUCCESS" in proc.stdout


def test_dashboard_queries_are_valid_promql(promtool: str, tmp_path: Path) -> None:
    """Every dashboard query, with Grafana variables substituted, passes promtool's PromQL parser."""
    rules = []
    for i, (_, expr) in enumerate(dashboard_queries(load_dashboard())):
        concrete = re.sub(r"\$\{?__rate_interval\}?", "5m", expr)
        concrete = re.sub(r"\$\{?__interval\}?", "1m", concrete)
        concrete = re.sub(r"\$\{?source\}?", ".*", concrete)
        assert "$" not in concrete, f"unexpected Grafana variable in {expr!r}"
        rules.append({"record": f"dashboard:query_{i}:check", "expr": concrete})
    assert rules
    path = tmp_path / "dashboard_queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    run_promtool(promtool, "check", "rules", str(path))


# --------------------------------------------------------------------------------------------- rules.yml


def load_rules() -> list[dict]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def recording_rule_names() -> set[str]:
    return {rule["record"] for rule in load_rules() if "record" in rule}


def allowed_names() -> set[str]:
    return set(EXPOSED_SERIES) | recording_rule_names() | set(PROMETHEUS_SYNTHETIC)


def test_required_recording_rules_and_alerts_exist() -> None:
    rules = load_rules()
    records = {r["record"] for r in rules if "record" in r}
    alerts = {r["alert"] for r in rules if "alert" in r}
    assert records >= REQUIRED_RECORDING_RULES
    assert alerts >= REQUIRED_ALERTS
    for name in REQUIRED_RECORDING_RULES:
        expr = next(r["expr"] for r in rules if r.get("record") == name)
        assert "histogram_quantile" in expr and "edgeledger_freshness_lag_seconds_bucket" in expr
        assert re.search(r"sum by \(source, le\)", expr), expr
    assert any("dead_lettered" in r["expr"] for r in rules if "record" in r), "no dead-letter rate recording rule"


def test_alerts_have_severity_summary_and_description() -> None:
    for rule in load_rules():
        if "alert" not in rule:
            continue
        name = rule["alert"]
        assert rule.get("labels", {}).get("severity") in {"critical", "warning", "info"}, name
        annotations = rule.get("annotations", {})
        assert annotations.get("summary", "").strip(), f"{name}: no summary"
        description = annotations.get("description", "")
        assert "What to do" in description, f"{name}: the description must tell the operator what to do"


def test_rule_metric_names_are_known() -> None:
    allowed = allowed_names()
    for rule in load_rules():
        name = rule.get("record") or rule.get("alert")
        unknown = metric_names(rule["expr"]) - allowed
        assert not unknown, f"{name}: unknown metric(s) {sorted(unknown)}"
        # Metrics queried from annotation templates (the `query` template function).
        for text in rule.get("annotations", {}).values():
            unknown = set(re.findall(r"\bedgeledger_[A-Za-z0-9_]+", text)) - allowed
            assert not unknown, f"{name}: annotation uses unknown metric(s) {sorted(unknown)}"


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    alerts = {r["alert"] for r in load_rules() if "alert" in r}
    doc = yaml.safe_load(RULES_TEST.read_text())
    assert doc["rule_files"] == ["rules.yml"]
    fired: set[str] = set()
    silent: set[str] = set()
    for test in doc["tests"]:
        for case in test.get("alert_rule_test", []):
            (fired if case.get("exp_alerts") else silent).add(case["alertname"])
    assert alerts - fired == set(), f"alerts never tested firing: {sorted(alerts - fired)}"
    assert alerts - silent == set(), f"alerts never tested not firing: {sorted(alerts - silent)}"
    tested_records = {
        name
        for test in doc["tests"]
        for case in test.get("promql_expr_test", [])
        for name in metric_names(case["expr"])
    }
    assert tested_records & REQUIRED_RECORDING_RULES, "no recording-rule value check"


# --------------------------------------------------------------------------------------------- prometheus.yml


def test_scrape_config_targets() -> None:
    config = yaml.safe_load(PROM_CONFIG.read_text())
    assert "rules.yml" in config["rule_files"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = {name: [t for sc in job.get("static_configs", []) for t in sc["targets"]]
               + [f"{host}:{sd['port']}" for sd in job.get("dns_sd_configs", []) for host in sd["names"]]
               for name, job in jobs.items()}
    assert any(t.endswith(":8080") for t in targets["edgeledger-serve"])
    assert jobs["edgeledger-serve"].get("metrics_path", "/metrics") == "/metrics"
    assert any(t.endswith(":9108") for t in targets["edgeledger-run"])


# --------------------------------------------------------------------------------------------- Grafana


def load_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def all_panels(dashboard: dict) -> list[dict]:
    panels = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))  # collapsed rows hold their panels
    return panels


def dashboard_queries(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, expr) for every panel target, plus template-variable queries."""
    queries = [
        (panel.get("title", ""), target["expr"])
        for panel in all_panels(dashboard)
        for target in panel.get("targets", [])
        if "expr" in target
    ]
    for var in dashboard["templating"]["list"]:
        if var.get("type") == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            match = re.fullmatch(r"\s*label_values\((.+),\s*\w+\)\s*", query)
            queries.append((f"${var['name']}", match.group(1) if match else query))
    return queries


def test_dashboard_structure() -> None:
    dashboard = load_dashboard()
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["uid"] and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    assert variables["source"]["type"] == "query"
    assert variables["source"]["datasource"]["uid"] == "${DS_PROMETHEUS}"

    panels = all_panels(dashboard)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"panels {cells[(x, y)]!r} and {panel['title']!r} overlap"
                cells[(x, y)] = panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]


def test_dashboard_metric_names_are_known() -> None:
    allowed = allowed_names()
    for title, expr in dashboard_queries(load_dashboard()):
        unknown = metric_names(expr) - allowed
        assert not unknown, f"panel {title!r}: unknown metric(s) {sorted(unknown)} in {expr!r}"


def test_dashboard_covers_required_views() -> None:
    dashboard = load_dashboard()
    used = set().union(*(metric_names(expr) for _, expr in dashboard_queries(dashboard)))
    required = {
        "source:edgeledger_freshness_lag_seconds:p50",
        "source:edgeledger_freshness_lag_seconds:p95",
        "source:edgeledger_freshness_lag_seconds:p99",
        "source_outcome:edgeledger_events:rate5m",  # events/s by outcome
        "source:edgeledger_events_dead_lettered:ratio_rate5m",  # dead-letter rate
        "edgeledger_source_stale",
        "edgeledger_review_queue_depth",
        "edgeledger_consumer_lag_records",
        "edgeledger_cache_requests_total",
        "edgeledger_traversals_truncated_total",
    }
    assert required <= used, f"dashboard lacks {sorted(required - used)}"
    types = {p["type"] for p in all_panels(dashboard)}
    assert types & {"stat", "state-timeline"}, "stale sources need a stat or state-timeline panel"
    source_filtered = [expr for _, expr in dashboard_queries(dashboard) if "$source" in expr]
    assert source_filtered, "no panel uses the $source variable"
