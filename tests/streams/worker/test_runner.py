"""`edgeledger run` with several workers: every worker process gets the options the command was given, both
signals reach every one of them, and one that fails stops the others and fails the run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.ontology import default_ontology
from schemas.slo import default_slo
from streams.worker import runner
from tests.support.wait import wait_until


class _Finished:
    def __init__(self, command: list[str]) -> None:
        self.command = command

    def wait(self, timeout: float | None = None) -> int:
        return 0

    def poll(self) -> int:
        return 0


def test_worker_processes_take_the_slo_ontology_timer_and_metrics_host(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[list[str]] = []

    def popen(command: list[str]) -> _Finished:
        started.append(command)
        return _Finished(command)

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(runner, "resolve_bootstrap", lambda bootstrap, **_: (bootstrap, None))
    monkeypatch.setattr(runner, "ensure_topics_within", lambda address, topics, broker_timeout: None)
    slo, ontology = tmp_path / "slo.json", tmp_path / "ontology.json"
    slo.write_text(json.dumps(default_slo().model_dump(mode="json")))
    ontology.write_text(json.dumps(default_ontology().model_dump(mode="json")))
    runner.run_pipeline(tmp_path, "127.0.0.1:9092", workers=2, slo_path=slo, freshness_interval=2.5,
                        ontology_path=ontology, metrics_host="0.0.0.0", broker_timeout=7.5, assignment_timeout=12.0)
    assert len(started) == 2
    for index, command in enumerate(started):
        assert command[command.index("--state") + 1] == str(tmp_path / f"worker-{index}")
        assert command[command.index("--slo") + 1] == str(slo.resolve())
        assert command[command.index("--ontology") + 1] == str(ontology.resolve())
        assert command[command.index("--freshness-interval") + 1] == "2.5"
        assert command[command.index("--metrics-host") + 1] == "0.0.0.0"
        assert command[command.index("--broker-timeout") + 1] == "7.5"
        assert command[command.index("--assignment-timeout") + 1] == "12.0"


def test_no_file_no_option() -> None:
    assert runner._file_option("--slo", None) == []


CHILD = """
import pathlib, signal, sys, time
state = pathlib.Path(sys.argv[sys.argv.index("--state") + 1])
state.mkdir(parents=True)

def stop(signum, frame):
    (state / "signal").write_text(signal.Signals(signum).name)
    sys.exit(0)

for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, stop)
(state / "ready").touch()
if state.name == "worker-1" and "--fail" in sys.argv[-1]:
    # Fail only once the others can note the signal: one still starting would die of it unrecorded.
    siblings = [state.parent / name / "ready" for name in ("worker-0", "worker-2")]
    while not all(path.exists() for path in siblings):
        time.sleep(0.01)
    sys.exit(3)
while True:
    signal.pause()
"""
"""A worker process that notes which signal stopped it, or (worker 1, told to) fails once the others are up."""

PARENT = """
import subprocess, sys
from pathlib import Path
from streams.worker import runner

started = subprocess.Popen
subprocess.Popen = lambda command: started([sys.executable, "-c", sys.argv[2], *command[1:], sys.argv[3]])
try:
    runner.run_worker_processes(Path(sys.argv[1]), "127.0.0.1:9", 3, "g", "p.", None, {}, 0, [])
except runner.WorkerProcessFailed as error:
    sys.stderr.write(f"failed: {error}\\n")
    sys.exit(2)
"""
"""``run_worker_processes`` with ``CHILD`` for its workers, in a process of its own to signal."""


def _parent(tmp_path: Path, fail: bool = False) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path), CHILD, "--fail" if fail else "--run"],
                            stderr=subprocess.PIPE, text=True)


def _all_ready(tmp_path: Path) -> bool:
    return all((tmp_path / f"worker-{index}" / "ready").exists() for index in range(3))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_the_parent_of_several_workers_passes_either_signal_on_and_ends_with_them(tmp_path: Path,
                                                                                   sig: signal.Signals) -> None:
    parent = _parent(tmp_path)
    try:
        wait_until(lambda: _all_ready(tmp_path), "every worker process started", 30)
        parent.send_signal(sig)
        _, err = parent.communicate(timeout=10)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.communicate()
    assert parent.returncode == 0, err
    assert [(tmp_path / f"worker-{index}" / "signal").read_text() for index in range(3)] == [sig.name] * 3


def test_a_worker_process_that_fails_stops_the_others_and_fails_the_run(tmp_path: Path) -> None:
    parent = _parent(tmp_path, fail=True)
    try:
        _, err = parent.communicate(timeout=20)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.communicate()
    assert parent.returncode == 2, err
    assert f"worker 1 (state {tmp_path / 'worker-1'}) exited with code 3" in err
    assert [(tmp_path / f"worker-{index}" / "signal").read_text() for index in (0, 2)] == ["SIGTERM"] * 2
