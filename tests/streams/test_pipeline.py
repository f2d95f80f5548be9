"""The streaming pipeline on the embedded broker: same state as `load`, dead letters, counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streams.demo import DEMO_EVENTS
from streams.kafka_config import FAST_GROUP_OVERRIDES
from streams.ledger_files import load_into
from streams.pipeline import LedgerWorker, WorkerConfig
from streams.produce import produce_files
from streams.topics import Topic, ensure_topics
from tests.streams.pipeline_support import comparable_state, finish, fresh_topics, read_topic, start_worker

pytestmark = pytest.mark.integration


def test_produced_events_reach_the_same_state_as_load(kafka_broker, tmp_path: Path) -> None:
    topics = fresh_topics()
    ensure_topics(kafka_broker.bootstrap, topics)
    produce_files([Path(str(DEMO_EVENTS))], kafka_broker.bootstrap, topics, progress=False)
    worker = start_worker(tmp_path / "run", kafka_broker.bootstrap, topics, "g-same", exit_when_idle=3)
    out, err = finish(worker, 120)
    assert worker.returncode == 0, err
    summary = json.loads(out)
    loaded = load_into(tmp_path / "load", [Path(str(DEMO_EVENTS))], simulated_clock=False, ontology_path=None)
    assert summary == loaded, "the same processors give the same counts"
    assert comparable_state(tmp_path / "run") == comparable_state(tmp_path / "load")


def test_poison_messages_are_dead_lettered_and_the_stream_goes_on(kafka_broker, tmp_path: Path) -> None:
    topics = fresh_topics()
    ensure_topics(kafka_broker.bootstrap, topics)
    good = {"kind": "change", "event_id": "ok-1", "tenant": "acme", "source": {"system": "cmdb"},
            "detected_at": "2026-05-01T00:00:00Z",
            "assert": [{"src": {"type": "Service", "id": "cmdb:S1"}, "rel": "depends_on",
                        "dst": {"type": "Host", "id": "cmdb:H1"}}]}
    poison = ["{not json", json.dumps({"kind": "teleport", "event_id": "x", "tenant": "acme"}),
              json.dumps({**good, "event_id": "bad-rel", "assert": [{**good["assert"][0], "rel": "likes"}]})]
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join([*poison, json.dumps(good)]) + "\n")
    produce_files([events], kafka_broker.bootstrap, topics, progress=False)
    worker = start_worker(tmp_path / "state", kafka_broker.bootstrap, topics, "g-poison", exit_when_idle=3)
    out, err = finish(worker, 120)
    assert worker.returncode == 0, err
    summary = json.loads(out)
    assert (summary["events_read"], summary["applied"], summary["dead_lettered"]) == (4, 1, 3)
    assert summary["balanced"]
    letters = read_topic(kafka_broker.bootstrap, topics.name(Topic.DEAD_LETTER))
    assert sorted(letter["stage"] for letter in letters) == ["apply", "decode", "validate"]
    assert {letter["original"] for letter in letters} == set(poison)
    assert all(letter["reason"] for letter in letters)


def test_the_worker_reports_consumer_lag_from_its_fetches(kafka_broker, tmp_path: Path) -> None:
    topics = fresh_topics()
    ensure_topics(kafka_broker.bootstrap, topics)
    produce_files([Path(str(DEMO_EVENTS))], kafka_broker.bootstrap, topics, progress=False)
    reports: list[tuple[str, int, int]] = []
    config = WorkerConfig(tmp_path / "state", kafka_broker.bootstrap, group_id="g-lag", topics=topics,
                          consumer_overrides=dict(FAST_GROUP_OVERRIDES))
    worker = LedgerWorker(config, on_consumer_lag=lambda *report: reports.append(report), lag_interval=0.0)
    totals = worker.run(idle_exit_after=2)
    assert totals.applied > 0
    fed = {(topic, partition) for topic, partition, _ in reports}
    assert fed and all(topic.startswith(topics.prefix) for topic, _ in fed)
    last = {(topic, partition): lag for topic, partition, lag in reports}
    assert set(last.values()) == {0}, "caught up: nothing left behind the watermark"
