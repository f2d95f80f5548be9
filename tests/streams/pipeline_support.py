"""Helpers for pipeline integration tests: comparable ledger state, topic contents, worker processes."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import orjson
from confluent_kafka import Consumer, TopicPartition

from state import codec
from state.kv import RocksKV
from streams.kafka_config import FAST_GROUP_OVERRIDES, consumer_config
from streams.topics import TopicSettings


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
    """Every record on every partition of ``topic``, decoded from JSON, read until quiet.

    Not up to the high watermark: the embedded broker reports one per produced record *batch*,
    so a watermark-bounded read stops early.
    """
    consumer = Consumer(consumer_config(bootstrap, f"reader-{uuid.uuid4().hex[:6]}"))
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        consumer.assign([TopicPartition(topic, partition, 0) for partition in metadata.partitions])
        records = []
        while True:
            message = consumer.poll(quiet_for)
            if message is None:
                return records
            if not message.error():
                records.append(orjson.loads(message.value()))
    finally:
        consumer.close()


def fresh_topics() -> TopicSettings:
    return TopicSettings(prefix=f"t{uuid.uuid4().hex[:8]}.")


def start_worker(state: Path, bootstrap: str, topics: TopicSettings, group: str,
                 exit_when_idle: float | None = None) -> subprocess.Popen:
    command = [sys.executable, "-m", "streams.cli", "run", "--state", str(state), "--bootstrap", bootstrap,
               "--group", group, "--topic-prefix", topics.prefix, "--metrics-port", "0"]
    if exit_when_idle is not None:
        command += ["--exit-when-idle", str(exit_when_idle)]
    for key, value in FAST_GROUP_OVERRIDES.items():
        command += ["--consumer-option", f"{key}={value}"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(worker: subprocess.Popen, timeout: float = 180) -> tuple[str, str]:
    """Wait for a worker to exit; kill it if it overruns, so a failing test leaves nothing running."""
    try:
        return worker.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.communicate()
        raise
