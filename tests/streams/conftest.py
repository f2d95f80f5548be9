"""Shared fixtures for the stream-layer integration tests. A test that uses either broker fixture is
marked ``integration`` by tests/conftest.py, and so left out of ``./dev test --fast``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streams.kafka.broker import EmbeddedBroker


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[EmbeddedBroker]:
    """One embedded Tansu broker for the whole test session, stopped at the end."""
    broker = EmbeddedBroker().start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def own_broker() -> Iterator[EmbeddedBroker]:
    """A broker for one test, for records too large to leave in the shared one: its memory-only
    storage never frees, and every later test would run beside them."""
    broker = EmbeddedBroker().start()
    try:
        yield broker
    finally:
        broker.stop()
