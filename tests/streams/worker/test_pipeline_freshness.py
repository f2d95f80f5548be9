"""A quiet source goes stale after its SLO and fresh again on its next heartbeat, in the running
pipeline; each flip is published to source-status once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

import pytest

from schemas.topics import Topic
from streams.kafka.config import FAST_GROUP_OVERRIDES
from streams.kafka.produce import produce_lines
from streams.kafka.topics import ensure_topics
from tests.support.pipeline import fresh_topics, read_topic

pytestmark = pytest.mark.integration


def heartbeat(event_id: str) -> bytes:
    return json.dumps({"kind": "heartbeat", "event_id": event_id, "tenant": "acme", "source": {"system": "cmdb"},
                       "detected_at": "2026-11-29T00:00:00Z"}).encode()


def statuses(bootstrap: str, topic: str) -> list[str]:
    return [record["status"] for record in read_topic(bootstrap, topic)
            if record["source"] == "cmdb"]


def test_source_goes_stale_and_fresh_again(kafka_broker, tmp_path: Path) -> None:
    topics = fresh_topics()
    ensure_topics(kafka_broker.bootstrap, topics)
    slo = tmp_path / "slo.json"
    slo.write_text(json.dumps({"sources": {"cmdb": {"max_silence_seconds": 2, "max_p99_lag_seconds": 60}}}))
    command = [sys.executable, "-m", "streams.cli.main", "run", "--state", str(tmp_path / "state"),
               "--bootstrap", kafka_broker.bootstrap, "--topic-prefix", topics.prefix, "--metrics-port", "0",
               "--slo", str(slo), "--freshness-interval", "0.3"]
    for key, value in FAST_GROUP_OVERRIDES.items():
        command += ["--consumer-option", f"{key}={value}"]
    produce_lines([heartbeat("hb-1")], kafka_broker.bootstrap, topics)
    worker = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    status_topic = topics.name(Topic.SOURCE_STATUS)
    try:
        deadline = time.monotonic() + 60
        while "stale" not in statuses(kafka_broker.bootstrap, status_topic):
            assert time.monotonic() < deadline, "cmdb never went stale"
        produce_lines([heartbeat("hb-2")], kafka_broker.bootstrap, topics)
        # Until cmdb has gone stale again after the fresh flip: every tick between saw a status to keep.
        while statuses(kafka_broker.bootstrap, status_topic).count("stale") < 2:
            assert time.monotonic() < deadline + 60, "cmdb never went stale again after its heartbeat"
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    finally:
        worker.kill()
    assert worker.returncode == 0, err
    seen = statuses(kafka_broker.bootstrap, status_topic)
    assert "fresh" in seen[seen.index("stale") + 1:], f"the next heartbeat makes it fresh again: {seen}"
    assert all(a != b for a, b in pairwise(seen)), f"each flip is published once: {seen}"
