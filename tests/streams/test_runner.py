"""`edgeledger run` with several workers: every worker process gets the options the command was given."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from streams import runner


class _Finished:
    def __init__(self, command: list[str]) -> None:
        self.command = command

    def wait(self, timeout: float | None = None) -> int:
        return 0


def test_worker_processes_take_the_slo_ontology_and_timer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[list[str]] = []

    def popen(command: list[str]) -> _Finished:
        started.append(command)
        return _Finished(command)

    monkeypatch.setattr(subprocess, "Popen", popen)
    shared = [*runner._file_option("--slo", tmp_path / "slo.json"),
              *runner._file_option("--ontology", tmp_path / "ontology.json"), "--freshness-interval", "2.5"]
    runner.run_worker_processes(tmp_path, "127.0.0.1:9092", 2, "group", "p.", None, {}, 9108, shared)
    assert len(started) == 2
    for index, command in enumerate(started):
        assert command[command.index("--state") + 1] == str(tmp_path / f"worker-{index}")
        assert command[command.index("--slo") + 1] == str((tmp_path / "slo.json").resolve())
        assert command[command.index("--ontology") + 1] == str((tmp_path / "ontology.json").resolve())
        assert command[command.index("--freshness-interval") + 1] == "2.5"


def test_no_file_no_option() -> None:
    assert runner._file_option("--slo", None) == []
