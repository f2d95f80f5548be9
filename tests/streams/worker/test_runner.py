"""`edgeledger run` with several workers: every worker process gets the options the command was given."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from schemas.ontology import default_ontology
from schemas.slo import default_slo
from streams.worker import runner


class _Finished:
    def __init__(self, command: list[str]) -> None:
        self.command = command

    def wait(self, timeout: float | None = None) -> int:
        return 0


def test_worker_processes_take_the_slo_ontology_timer_and_metrics_host(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[list[str]] = []

    def popen(command: list[str]) -> _Finished:
        started.append(command)
        return _Finished(command)

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(runner, "resolve_bootstrap", lambda bootstrap: (bootstrap, None))
    monkeypatch.setattr(runner, "ensure_topics", lambda address, topics: None)
    slo, ontology = tmp_path / "slo.json", tmp_path / "ontology.json"
    slo.write_text(json.dumps(default_slo().model_dump(mode="json")))
    ontology.write_text(json.dumps(default_ontology().model_dump(mode="json")))
    runner.run_pipeline(tmp_path, "127.0.0.1:9092", workers=2, slo_path=slo, freshness_interval=2.5,
                        ontology_path=ontology, metrics_host="0.0.0.0")
    assert len(started) == 2
    for index, command in enumerate(started):
        assert command[command.index("--state") + 1] == str(tmp_path / f"worker-{index}")
        assert command[command.index("--slo") + 1] == str(slo.resolve())
        assert command[command.index("--ontology") + 1] == str(ontology.resolve())
        assert command[command.index("--freshness-interval") + 1] == "2.5"
        assert command[command.index("--metrics-host") + 1] == "0.0.0.0"


def test_no_file_no_option() -> None:
    assert runner._file_option("--slo", None) == []
