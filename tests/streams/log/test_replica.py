"""A replica that cannot follow the log says so: a lost broker ends it within its bound."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from streams.kafka.broker import EmbeddedBroker
from streams.kafka.liveness import BrokerUnreachable
from streams.kafka.topics import ensure_topics
from streams.log.replica import run_replica
from tests.support.pipeline import fresh_topics
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration


def test_a_replica_whose_broker_is_gone_stops_within_its_bound(tmp_path: Path) -> None:
    topics = fresh_topics()
    outcome: list[BaseException | int] = []
    broker = EmbeddedBroker().start()
    try:
        ensure_topics(broker.bootstrap, topics)
        bootstrap = broker.bootstrap

        def follow() -> None:
            try:
                outcome.append(run_replica(tmp_path / "replica", bootstrap, topics, broker_timeout=3))
            except BaseException as error:
                outcome.append(error)

        thread = threading.Thread(target=follow)
        thread.start()
        wait_until(lambda: (tmp_path / "replica" / "CURRENT").exists(), "the replica opened its state", 30)
    finally:
        broker.stop()
    gone_at = time.monotonic()
    thread.join(30)
    assert not thread.is_alive(), "the replica outlived its bound"
    assert isinstance(outcome[0], BrokerUnreachable), outcome
    assert bootstrap in str(outcome[0])
    assert time.monotonic() - gone_at < 20
