"""The options of `run` and `replica` reach what they configure, and bad ones are refused in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from streams.cli.main import app
from streams.kafka.liveness import BrokerUnreachable


@pytest.fixture
def pipeline_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    from streams.worker import runner

    given: list[dict[str, Any]] = []
    monkeypatch.setattr(runner, "run_pipeline", lambda *args, **kwargs: given.append(kwargs))
    return given


def test_run_passes_the_bounds_and_the_replication_of_its_topics(tmp_path: Path, pipeline_calls) -> None:
    state = str(tmp_path / "s")
    cli = CliRunner()
    assert cli.invoke(app, ["run", "--state", state]).exit_code == 0
    assert cli.invoke(app, ["run", "--state", state, "--broker-timeout", "5", "--assignment-timeout", "7",
                            "--replication-factor", "3", "--min-insync-replicas", "2",
                            "--consumer-option", "fetch.wait.max.ms=100"]).exit_code == 0
    chosen = [{key: call[key] for key in ("broker_timeout", "assignment_timeout", "replication_factor",
                                          "min_insync_replicas", "consumer_overrides")} for call in pipeline_calls]
    assert chosen == [
        {"broker_timeout": 60.0, "assignment_timeout": 60.0, "replication_factor": 1, "min_insync_replicas": None,
         "consumer_overrides": {}},
        {"broker_timeout": 5.0, "assignment_timeout": 7.0, "replication_factor": 3, "min_insync_replicas": 2,
         "consumer_overrides": {"fetch.wait.max.ms": "100"}},
    ]


@pytest.mark.parametrize(("args", "says"), [
    (["--replication-factor", "1", "--min-insync-replicas", "2"], "--min-insync-replicas 2 exceeds"),
    (["--consumer-option", "fetch.wait.max.ms"], "expected KEY=VALUE"),
    (["--broker-timeout", "0"], "--broker-timeout"),
])
def test_run_refuses_options_that_cannot_hold(tmp_path: Path, pipeline_calls, args: list[str], says: str) -> None:
    done = CliRunner().invoke(app, ["run", "--state", str(tmp_path / "s"), *args])
    assert done.exit_code != 0 and not pipeline_calls
    assert says in done.output + str(done.exception)


def test_replica_passes_its_bound_and_consumer_options_and_reports_a_lost_broker_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.log import replica

    given: list[dict[str, Any]] = []

    def run_replica(*args: object, **kwargs: Any) -> int:
        given.append(kwargs)
        raise BrokerUnreachable("127.0.0.1:1", kwargs["broker_timeout"], "Connection refused")

    monkeypatch.setattr(replica, "run_replica", run_replica)
    done = CliRunner().invoke(app, ["replica", "--state", str(tmp_path / "r"), "--bootstrap", "127.0.0.1:1",
                                    "--broker-timeout", "4", "--consumer-option", "fetch.wait.max.ms=100"])
    assert given[0]["broker_timeout"] == 4.0
    assert given[0]["consumer_overrides"] == {"fetch.wait.max.ms": "100"}
    assert done.exit_code != 0
    assert "could not reach the Kafka broker at 127.0.0.1:1 for 4 s" in str(done.exception)
