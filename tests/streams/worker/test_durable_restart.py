"""The embedded broker keeps its log on disk: `run` and its broker killed with kill -9 mid-stream, then
`run` started again on the same directories, end with the state `load` reaches on the same events, and
a replica started afterwards, from the log alone, reaches it too."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from streams.cli.load import load_into
from streams.kafka.broker import EmbeddedBroker, default_broker_dir
from streams.kafka.produce import produce_files
from streams.kafka.topics import TopicSettings
from tests.support.generate import tenants_interleaved
from tests.support.logpipe import LogPipe
from tests.support.pipeline import comparable_state, count_applied, holds_partitions
from tests.support.wait import wait_until
from tests.support.workers import replicate

pytestmark = pytest.mark.integration
TENANTS = ("acme", "globex", "initech")
BROKER_LINE = re.compile(r"embedded broker at (\S+) \(data in ")


def start_run(state: Path) -> tuple[LogPipe, str]:
    """`edgeledger run` on its own disk-backed embedded broker; the process, and the broker's address."""
    command = [sys.executable, "-m", "streams.cli.main", "run", "--state", str(state), "--metrics-port", "0"]
    run = LogPipe(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    found: list[str] = []

    def announced() -> bool:
        found.extend(m.group(1) for _, line in list(run.stderr) if (m := BROKER_LINE.search(line)))
        return bool(found) or run.process.poll() is not None

    wait_until(announced, "run announces its broker", 60)
    assert found, run.tail(40)
    return run, found[0]


def applied_at_least(state: Path, count: int, run: LogPipe) -> bool:
    assert run.process.poll() is None, run.tail(40)
    return (state / "CURRENT").exists() and count_applied(state) >= count


def test_run_and_its_broker_killed_mid_stream_carry_on_from_the_disk(tmp_path: Path) -> None:
    lines = tenants_interleaved(1000, 200, TENANTS)
    first, rest = tmp_path / "first.jsonl", tmp_path / "rest.jsonl"
    first.write_text("\n".join(lines[:1000]) + "\n")
    rest.write_text("\n".join(lines[1000:]) + "\n")
    expected = tmp_path / "expected"
    load_into(expected, [first, rest], simulated_clock=False, ontology_path=None)
    state, topics = tmp_path / "state", TopicSettings()

    run, bootstrap = start_run(state)
    try:
        produce_files([first], bootstrap, topics, progress=False)
        wait_until(lambda: applied_at_least(state, 1000, run), "the first events applied", 120)
        produce_files([rest], bootstrap, topics, progress=False)  # acknowledged: on the broker's disk
        run.process.send_signal(signal.SIGKILL)
        run.process.wait(10)
    finally:
        if run.process.poll() is None:
            run.process.kill()
        run.close()
    applied_before = count_applied(state)
    assert 1000 <= applied_before <= len(lines)
    wait_until(lambda: _refused(bootstrap), "the killed run's broker exits with it", 10)

    restarted, bootstrap = start_run(state)
    try:
        wait_until(lambda: applied_at_least(state, len(lines), restarted), "every event applied after the restart",
                   180)
        wait_until(lambda: holds_partitions(restarted), "the restarted run holds its partitions", 60)
        summary = restarted.stop()
    finally:
        if restarted.process.poll() is None:
            restarted.process.kill()
            restarted.process.wait()
    assert summary["balanced"] is True
    assert count_applied(state) == len(lines)
    assert comparable_state(state) == comparable_state(expected)

    replica = tmp_path / "replica"
    with EmbeddedBroker(storage="disk", data_dir=default_broker_dir(state)) as broker:
        replicate(replica, broker.bootstrap, topics)
    assert comparable_state(replica) == comparable_state(expected)


def _refused(bootstrap: str) -> bool:
    """Whether nothing listens at ``host:port`` any more."""
    host, port = bootstrap.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return True
    return False
