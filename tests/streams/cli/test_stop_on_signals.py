"""SIGTERM and Ctrl-C stop `serve` and `replica` within 10 s, with their broker there or gone, and a
replica whose broker stays gone exits non-zero within its bound, in one line."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from streams.kafka.broker import EmbeddedBroker, free_port
from streams.kafka.topics import ensure_topics
from tests.support.api import cmdb_change, edge, load
from tests.support.logpipe import LogPipe
from tests.support.pipeline import fresh_topics
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration
STOP_WITHIN = 10.0


def edgeledger(*args: str) -> LogPipe:
    command = [sys.executable, "-m", "streams.cli.main", *args]
    return LogPipe(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))


def stopped_within(process: LogPipe, sig: signal.Signals) -> tuple[int, float]:
    """Send ``sig``; the exit code, and the seconds it took (the process is killed past the bound)."""
    sent = time.monotonic()
    process.process.send_signal(sig)
    try:
        code = process.process.wait(STOP_WITHIN)
    except subprocess.TimeoutExpired:
        process.process.kill()
        process.process.wait()
        raise AssertionError(f"still running {STOP_WITHIN} s after {sig.name}:\n{process.tail(30)}") from None
    process.close()
    return code, time.monotonic() - sent


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_stops_on_a_signal_within_ten_seconds(tmp_path: Path, sig: signal.Signals) -> None:
    state = tmp_path / "state"
    load(state, cmdb_change("c-1", "svc/a", edge(("Component", "cmdb:A"), "depends_on", ("Component", "cmdb:B"))))
    port = free_port()
    serve = edgeledger("serve", "--state", str(state), "--port", str(port))
    wait_until(lambda: answers(port) or serve.process.poll() is not None, "serve answers", 60)
    code, _ = stopped_within(serve, sig)
    # uvicorn ends by raising the signal it caught again, once its shutdown is complete.
    assert code in (0, 130, -sig.value), serve.tail(30)
    assert serve.first("Application shutdown complete") is not None, serve.tail(30)


def test_serve_whose_broker_is_gone_stops_on_sigterm_within_ten_seconds(tmp_path: Path) -> None:
    state, topics, port = tmp_path / "state", fresh_topics(), free_port()
    load(state, cmdb_change("c-1", "svc/a", edge(("Component", "cmdb:A"), "depends_on", ("Component", "cmdb:B"))))
    with EmbeddedBroker() as broker:
        ensure_topics(broker.bootstrap, topics)
        serve = edgeledger("serve", "--state", str(state), "--port", str(port), "--bootstrap", broker.bootstrap,
                           "--topic-prefix", topics.prefix)
        wait_until(lambda: answers(port) or serve.process.poll() is not None, "serve answers", 60)
    stopped_within(serve, signal.SIGTERM)


def test_replica_stops_on_sigterm_following_the_log_and_with_its_broker_gone(tmp_path: Path) -> None:
    topics = fresh_topics()
    with EmbeddedBroker() as broker:
        ensure_topics(broker.bootstrap, topics)
        following = edgeledger("replica", "--state", str(tmp_path / "a"), "--bootstrap", broker.bootstrap,
                               "--topic-prefix", topics.prefix)
        abandoned = edgeledger("replica", "--state", str(tmp_path / "b"), "--bootstrap", broker.bootstrap,
                               "--topic-prefix", topics.prefix)
        for replica in (following, abandoned):
            wait_until(lambda r=replica: r.first("following") is not None or r.process.poll() is not None,
                       "the replica follows the log", 60)
            assert replica.process.poll() is None, replica.tail(30)
        code, _ = stopped_within(following, signal.SIGTERM)
        assert code == 0, following.tail(30)
        assert '"log_records": 0' in "\n".join(line for _, line in following.stdout)
    code, _ = stopped_within(abandoned, signal.SIGTERM)
    assert code == 0, abandoned.tail(30)


def test_a_replica_whose_broker_stays_gone_fails_in_one_line_within_its_bound(tmp_path: Path) -> None:
    topics = fresh_topics()
    with EmbeddedBroker() as broker:
        ensure_topics(broker.bootstrap, topics)
        replica = edgeledger("replica", "--state", str(tmp_path / "r"), "--bootstrap", broker.bootstrap,
                             "--topic-prefix", topics.prefix, "--broker-timeout", "3")
        wait_until(lambda: replica.first("following") is not None or replica.process.poll() is not None,
                   "the replica follows the log", 60)
        address = broker.bootstrap
    wait_until(lambda: replica.process.poll() is not None, "the replica gives up", 3 + STOP_WITHIN)
    replica.close()
    assert replica.process.returncode == 2
    last = replica.stderr[-1][1]
    assert last.startswith("edgeledger: error: could not reach the Kafka broker at " + address), replica.tail(10)
