"""Fixtures of the worker tests: topics of a test's own, and workers started and killed with the test."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streams.kafka.broker import EmbeddedBroker
from streams.kafka.topics import TopicSettings, ensure_topics
from tests.support.failover import StartLogged, StartWorker
from tests.support.logpipe import LogPipe
from tests.support.pipeline import fresh_topics, start_worker


@pytest.fixture
def topics(kafka_broker: EmbeddedBroker) -> TopicSettings:
    """Topics of this test's own on the session's broker."""
    settings = fresh_topics()
    ensure_topics(kafka_broker.bootstrap, settings)
    return settings


@pytest.fixture
def running() -> Iterator[StartWorker]:
    """``start_worker`` for workers a test stops itself; any still running when the test ends is killed."""
    started: list[subprocess.Popen] = []

    def start(state: Path, bootstrap: str, topics: TopicSettings, group: str) -> subprocess.Popen:
        started.append(start_worker(state, bootstrap, topics, group, faults=[]))
        return started[-1]

    yield start
    for worker in started:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()


@pytest.fixture
def logged() -> Iterator[StartLogged]:
    """``start_worker`` with its output drained into a ``LogPipe``; any worker still running when the
    test ends is killed."""
    started: list[LogPipe] = []

    def start(state: Path, bootstrap: str, topics: TopicSettings, group: str, **options: Any) -> LogPipe:
        started.append(LogPipe(start_worker(state, bootstrap, topics, group, **{"faults": [], **options})))
        return started[-1]

    yield start
    for worker in started:
        if worker.process.poll() is None:
            worker.process.kill()
        worker.close()
