"""Helpers for pipeline integration tests: comparable ledger state, topic contents, worker processes."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections import defaultdict
from pathlib import Path

import orjson

from schemas.topics import Topic
from state import codec
from state.kv import RocksKV
from streams.kafka.config import FAST_GROUP_OVERRIDES
from streams.kafka.topics import TopicSettings
from streams.log.records import decode_logged_version
from tests.support.kafka import read_to_eof
from tests.support.logpipe import LogPipe


def comparable_state(state_dir: Path) -> set[tuple]:
    """Every edge version without its transaction times (the clocks of two runs differ)."""
    kv = RocksKV(state_dir, read_only=True)
    try:
        versions = [codec.decode_version(value) for _, value in kv.scan(b"V")]
    finally:
        kv.close()
    return {(v.tenant, v.edge_id, v.src, v.rel, v.dst, v.valid_from, v.valid_to, v.tx_to is None, v.supersedes,
             v.origin, v.evidence) for v in versions}


def read_topic(bootstrap: str, topic: str) -> list[dict]:
    """Every record on every partition of ``topic``, decoded from JSON, partition by partition."""
    return [record for records in read_partitions(bootstrap, topic).values() for record in records]


def read_partitions(bootstrap: str, topic: str, timeout: float = 60) -> dict[int, list[dict]]:
    """``read_topic``, each partition's records apart, in their order there."""
    records, _ = read_to_eof(bootstrap, [topic], timeout)
    return {partition: [orjson.loads(message.value()) for message in messages]
            for (_, partition), messages in records.items()}


def batch_records(bootstrap: str, topics: TopicSettings) -> list[dict]:
    """The ``edge-versions`` records that batches wrote: those of the log without its fences and probes."""
    return [record for record in read_topic(bootstrap, topics.name(Topic.EDGE_VERSIONS))
            if record.get("kind") not in ("fence", "probe")]


def fresh_topics() -> TopicSettings:
    return TopicSettings(prefix=f"t{uuid.uuid4().hex[:8]}.")


def start_worker(state: Path, bootstrap: str, topics: TopicSettings, group: str,
                 exit_when_idle: float | None = None, consumer_options: dict[str, str | int] | None = None,
                 faults: list[str] | None = None) -> subprocess.Popen:
    """``edgeledger run`` in a child process; with ``faults`` (``tests.support.faulty_worker``'s options,
    e.g. ``["--crash-after-commit", "1"]``), a worker that fails there instead."""
    if faults is None:
        command = [sys.executable, "-m", "streams.cli.main", "run", "--state", str(state), "--bootstrap", bootstrap,
                   "--group", group, "--topic-prefix", topics.prefix, "--metrics-port", "0"]
    else:
        command = [sys.executable, "-m", "tests.support.faulty_worker", "--state", str(state), "--bootstrap",
                   bootstrap, "--group", group, "--topic-prefix", topics.prefix, *faults]
    if exit_when_idle is not None:
        command += ["--exit-when-idle", str(exit_when_idle)]
    for key, value in {**FAST_GROUP_OVERRIDES, **(consumer_options or {})}.items():
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


def count_applied(state: Path) -> int:
    """Events recorded as seen in a state directory (its ``I`` table), read as a secondary instance."""
    kv = RocksKV(state, read_only=True)
    try:
        return sum(1 for _ in kv.scan(b"I"))
    finally:
        kv.close()
