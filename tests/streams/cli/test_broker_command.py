"""`edgeledger broker` as a user runs it (a process of its own), and the broker options of `run`."""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from typer.testing import CliRunner

from streams.cli.main import app
from streams.kafka.broker import default_broker_dir
from streams.kafka.config import ADMIN_DEFAULTS


def start_broker_command(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "streams.cli.main", "broker", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def first_line(proc: subprocess.Popen[str], timeout: float = 30.0) -> dict[str, Any]:
    """The JSON line the command prints once its broker answers (failing if it exits or never prints)."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        assert selector.select(timeout), f"no line within {timeout} s"
    line = proc.stdout.readline()
    assert line, f"exited with {proc.wait(5)} before printing: {proc.stderr.read() if proc.stderr else ''}"
    return dict(json.loads(line))


def refuses_connections(bootstrap: str) -> bool:
    host, port = bootstrap.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return False
    except OSError:
        return True


@pytest.mark.integration
@pytest.mark.parametrize(("stop_with", "storage"), [pytest.param(signal.SIGTERM, "disk", id="SIGTERM-disk"),
                                                    pytest.param(signal.SIGINT, "memory", id="SIGINT-memory")])
def test_the_broker_command_serves_until_signalled_then_stops_within_ten_seconds(
        tmp_path: Path, stop_with: signal.Signals, storage: str) -> None:
    proc = start_broker_command("--dir", str(tmp_path / "broker"), "--storage", storage)
    try:
        line = first_line(proc)
        assert line["storage"] == storage and line["dir"] == str(tmp_path / "broker")
        assert line["consumer_options"] == ({"fetch.wait.max.ms": 100} if storage == "disk" else {})
        assert AdminClient({**ADMIN_DEFAULTS, "bootstrap.servers": line["bootstrap"]}).list_topics(timeout=5).brokers
        proc.send_signal(stop_with)
        started = time.monotonic()
        assert proc.wait(10) == 0
        assert time.monotonic() - started < 10
        assert refuses_connections(line["bootstrap"])
        assert (tmp_path / "broker" / "logs" / "tansu.log").is_file()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.integration
def test_a_second_broker_command_on_the_same_dir_fails_in_one_line(tmp_path: Path) -> None:
    directory = tmp_path / "broker"
    first = start_broker_command("--dir", str(directory))
    try:
        first_line(first)
        second = subprocess.run([sys.executable, "-m", "streams.cli.main", "broker", "--dir", str(directory)],
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 2 and second.stdout == ""
        assert second.stderr.splitlines()[-1] == (f"edgeledger: error: broker directory {directory} is in use by "
                                                  f"another broker (pid {first.pid})")
        assert first.poll() is None
    finally:
        first.terminate()
        first.wait(10)


@pytest.mark.integration
def test_the_broker_command_keeps_its_data_across_restarts(tmp_path: Path) -> None:
    """A topic created through one run of the command is there in the next."""
    directory = tmp_path / "broker"
    for run in range(2):
        proc = start_broker_command("--dir", str(directory))
        try:
            admin = AdminClient({**ADMIN_DEFAULTS, "bootstrap.servers": first_line(proc)["bootstrap"]})
            if run == 0:
                from confluent_kafka.admin import NewTopic

                for future in admin.create_topics([NewTopic("kept", 2, 1)]).values():
                    future.result(timeout=10)
            assert "kept" in admin.list_topics(timeout=5).topics
        finally:
            proc.terminate()
            assert proc.wait(10) == 0


def test_run_passes_the_broker_directory_and_storage_to_the_pipeline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.worker import runner

    given: list[dict[str, Any]] = []

    def run_pipeline(*args: object, **kwargs: Any) -> None:
        given.append(kwargs)

    monkeypatch.setattr(runner, "run_pipeline", run_pipeline)
    monkeypatch.delenv("EDGELEDGER_KAFKA_BOOTSTRAP", raising=False)
    state = tmp_path / "live"
    cli = CliRunner()
    assert cli.invoke(app, ["run", "--state", str(state)]).exit_code == 0
    assert cli.invoke(app, ["run", "--state", str(state), "--broker-dir", str(tmp_path / "b"),
                            "--broker-storage", "memory"]).exit_code == 0
    refused = cli.invoke(app, ["run", "--state", str(state), "--broker-storage", "tape"])
    assert refused.exit_code != 0
    assert [(g["broker_dir"], g["broker_storage"]) for g in given] == [
        (default_broker_dir(state), "disk"), (tmp_path / "b", "memory")]
    assert os.fspath(default_broker_dir(state)) == os.fspath(tmp_path / "live.broker")
