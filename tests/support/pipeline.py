"""Helpers for pipeline integration tests: comparable ledger state, topic contents, worker processes."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections import defaultdict
from pathlib import Path

import orjson
from confluent_kafka import Consumer, TopicPartition

from state import codec
from state.kv import RocksKV
from streams.kafka.config import FAST_GROUP_OVERRIDES, consumer_config
from streams.kafka.topics import Topic, TopicSettings
from streams.log.records import decode_logged_version
from tests.benchmarks.pipeline_load import LogPipe


def comparable_state(state_dir: Path) -> set[tuple]:
    """Every edge version without its transaction times (the clocks of two runs differ)."""
    kv = RocksKV(state_dir, read_only=True)
    try:
        versions = [codec.decode_version(value) for _, value in kv.scan(b"V")]
    finally:
        kv.close()
    return {(v.tenant, v.edge_id, v.src, v.rel, v.dst, v.valid_from, v.valid_to, v.tx_to is None, v.supersedes,
             v.origin, v.evidence) for v in versions}


def read_topic(bootstrap: str, topic: str, quiet_for: float = 1.5) -> list[dict]:
    """Every record on every partition of ``topic``, decoded from JSON, read until quiet, partition by partition.

    Not up to the high watermark: the embedded broker reports one per produced record *batch*,
    so a watermark-bounded read stops early.
    """
    return [record for records in read_partitions(bootstrap, topic, quiet_for).values() for record in records]


def read_partitions(bootstrap: str, topic: str, quiet_for: float = 1.5) -> dict[int, list[dict]]:
    """``read_topic``, each partition's records apart, in their order there."""
    consumer = Consumer(consumer_config(bootstrap, f"reader-{uuid.uuid4().hex[:6]}"))
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        consumer.assign([TopicPartition(topic, partition, 0) for partition in metadata.partitions])
        records: dict[int, list[dict]] = {partition: [] for partition in metadata.partitions}
        while True:
            message = consumer.poll(quiet_for)
            if message is None:
                return records
            if not message.error():
                records[message.partition()].append(orjson.loads(message.value()))
    finally:
        consumer.close()


def batch_records(bootstrap: str, topics: TopicSettings) -> list[dict]:
    """The ``edge-versions`` records that batches wrote: those of the log without its fences and probes."""
    return [record for record in read_topic(bootstrap, topics.name(Topic.EDGE_VERSIONS))
            if record.get("kind") not in ("fence", "probe")]


def fresh_topics() -> TopicSettings:
    return TopicSettings(prefix=f"t{uuid.uuid4().hex[:8]}.")


def start_worker(state: Path, bootstrap: str, topics: TopicSettings, group: str,
                 exit_when_idle: float | None = None, consumer_options: dict[str, str | int] | None = None,
                 failpoints: dict[str, str] | None = None) -> subprocess.Popen:
    """``edgeledger run`` in a child process; ``failpoints`` are set in its environment only."""
    command = [sys.executable, "-m", "streams.cli.main", "run", "--state", str(state), "--bootstrap", bootstrap,
               "--group", group, "--topic-prefix", topics.prefix, "--metrics-port", "0"]
    if exit_when_idle is not None:
        command += ["--exit-when-idle", str(exit_when_idle)]
    for key, value in {**FAST_GROUP_OVERRIDES, **(consumer_options or {})}.items():
        command += ["--consumer-option", f"{key}={value}"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(failpoints or {})})


def finish(worker: subprocess.Popen, timeout: float = 180) -> tuple[str, str]:
    """Wait for a worker to exit; kill it if it overruns, so a failing test leaves nothing running."""
    try:
        return worker.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.communicate()
        raise


def expected_records(expected: Path) -> tuple[dict[str, bool], set[str]]:
    """Each edge version's final state (closed or not) and the correction ids a complete run emits."""
    kv = RocksKV(expected, read_only=True)
    try:
        versions = [codec.decode_version(v) for _, v in kv.scan(b"V")]
        corrections = {c.correction_id for _, v in kv.scan(b"K") for c in codec.decode_corrections(v)}
    finally:
        kv.close()
    return {f"{v.tenant}/{v.edge_id}": v.tx_to is not None for v in versions}, corrections


def assert_exactly_once_effect(bootstrap: str, topics, expected: Path) -> None:
    final_states, correction_ids = expected_records(expected)
    log = [r for r in read_topic(bootstrap, topics.name(Topic.EDGE_VERSIONS)) if r["kind"] == "edge_version"]
    copies: dict[str, list[dict]] = defaultdict(list)
    for record in log:
        copies[record["record_id"]].append(record)
    assert all(all(c == same[0] for c in same) for same in copies.values()), "a re-sent record is the same record"
    seen: dict[str, bool] = {}
    for record in log:
        version = decode_logged_version(record)
        key = f"{version.tenant}/{version.edge_id}"
        seen[key] = seen.get(key, False) or version.tx_to is not None
    assert seen == final_states, "no edge version missing or extra, each in its final state"
    corrections = read_topic(bootstrap, topics.name(Topic.EDGE_CORRECTIONS))
    assert {c["correction_id"] for c in corrections} == correction_ids, "every correction emitted (after dedupe)"


def holds_partitions(worker: LogPipe) -> bool:
    """The worker's latest assignment (its ``assigned [...]`` log line) names partitions."""
    assignments = [line for _, line in list(worker.stderr) if " assigned [" in line]
    return bool(assignments) and not assignments[-1].endswith("assigned []")
