"""The replay agent on the embedded broker: the worker applies a late correction and a late new
dependency; the faust agent publishes the touched traces' replays to replay-results; killed with
SIGKILL and restarted, every expected replay is there once after de-duplication by record id."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from schemas.topics import Topic
from state.open import reading
from streams.kafka.produce import produce_files
from streams.kafka.topics import TopicSettings, ensure_topics
from tests.state.test_replays import TRACES, late_changes, organisation
from tests.support.harness import Ledger
from tests.support.pipeline import fresh_topics, read_topic, start_worker
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration

EXPECTED = {"dep-c-ext": "changed", "appr-c": "changed", "own-c-ext": "changed", "own-c-tight": "now_unknown",
            "own-c-march": "same", "own-c-none": "changed"}


def events_of(build) -> list[dict]:
    """The events a harness scenario sends, without its simulated clock (the pipeline keeps its own)."""
    ledger = Ledger()
    build(ledger)
    return [json.loads(line) for line in ledger.lines if json.loads(line)["kind"] != "clock"]


def produce(bootstrap: str, topics: TopicSettings, tmp_path: Path, name: str, events: list[dict]) -> None:
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(event) + "\n" for event in events))
    produce_files([path], bootstrap, topics, progress=False)


def start_agent(state: Path, bootstrap: str, topics: TopicSettings) -> subprocess.Popen:
    log = (state.parent / "agent.log").open("a")
    return subprocess.Popen([sys.executable, "-m", "streams.cli.main", "replay-agent", "--state", str(state),
                             "--bootstrap", bootstrap, "--topic-prefix", topics.prefix, "--group",
                             f"{topics.prefix}replay"], stdout=log, stderr=subprocess.STDOUT, text=True)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
    process.communicate(timeout=30)


def test_the_agent_publishes_each_replay_once_after_deduplication_across_a_kill(kafka_broker, tmp_path) -> None:
    bootstrap, topics, state = kafka_broker.bootstrap, fresh_topics(), tmp_path / "state"
    ensure_topics(bootstrap, topics)
    worker = start_worker(state, bootstrap, topics, f"{topics.prefix}ledger")
    # The agent reads the worker's state as a secondary: it refuses a directory the worker has not made yet.
    wait_until(lambda: (state / "CURRENT").exists(), "the worker's state", timeout=60)
    agent = start_agent(state, bootstrap, topics)
    try:
        produce(bootstrap, topics, tmp_path, "org", events_of(organisation))

        def applied(count: int) -> bool:
            if not (state / "CURRENT").exists():
                return False
            with reading(state) as store:
                return sum(1 for _ in store.versions_in_tx_order("acme")) >= count

        wait_until(lambda: applied(9), "the organisation applied", timeout=60)
        now = datetime.now(UTC).isoformat()  # answers as of what the ledger knew once it was applied
        produce(bootstrap, topics, tmp_path, "traces", [{**t, "known_at": now} for t in TRACES])
        wait_until(lambda: reading_traces(state) == len(TRACES), "the traces applied", timeout=60)
        ownership_fix, new_dependency = events_of(late_changes)
        produce(bootstrap, topics, tmp_path, "fix", [ownership_fix])
        results = topics.name(Topic.REPLAY_RESULTS)
        wait_until(lambda: {r["trace_id"] for r in read_topic(bootstrap, results)} >= {
            "own-c-ext", "own-c-none", "own-c-march", "own-c-tight"}, "the correction's replays", timeout=90)
        agent.send_signal(signal.SIGKILL)
        stop(agent)
        produce(bootstrap, topics, tmp_path, "dep", [new_dependency])
        agent = start_agent(state, bootstrap, topics)
        wait_until(lambda: {r["trace_id"] for r in read_topic(bootstrap, results)} == set(EXPECTED),
                   "every replay after the restart", timeout=90)
    finally:
        stop(agent)
        sys.stderr.write((tmp_path / "agent.log").read_text()[-4000:])
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    records = read_topic(bootstrap, results)
    unique = {r["record_id"]: r for r in records}
    assert {r["trace_id"]: r["verdict"] for r in unique.values()} == EXPECTED
    assert len(unique) == len(EXPECTED), "one record per (trace, change batch), each trace touched by one batch"
    assert all(r["tenant"] == "acme" for r in records)
    assert unique[next(k for k in unique if k.endswith("/dep-c-ext"))]["added"] == ["Service:cmdb:S9"]


def reading_traces(state: Path) -> int:
    with reading(state) as store:
        return sum(1 for _ in store.traces("acme"))
