"""Suite-wide configuration: the hypothesis profiles, the markers that split the lanes, the ``ledger`` fixture.

Lanes (``./dev test`` runs every test; ``./dev test --fast`` deselects three markers):

- ``integration``: the test starts the embedded Kafka broker. Set here for every test that uses the
  ``kafka_broker`` or ``own_broker`` fixture, and by ``pytestmark`` in the modules that start one
  another way (an ``EmbeddedBroker`` of their own, an ``edgeledger`` subprocess that starts one).
- ``compiled``: the test compares the compiled core with the pure modules (it needs no broker, but
  loads twice in subprocesses; ``./dev test --fast`` runs the pure modules only).
- ``promtool``: the test needs promtool (the ``promtool`` fixture installs it when it is missing, with
  apt, as root). ``./dev test --fast`` deselects these only where promtool is not installed.

Hypothesis profiles: ``ci`` (derandomised, no example database, failing examples printed as blobs to
reproduce with ``@reproduce_failure``) when ``CI`` is set, as it is on CI; ``dev`` otherwise (random,
failures kept in ``.hypothesis/`` and tried first on the next run). ``HYPOTHESIS_PROFILE`` picks
either. Tests set only ``max_examples``, ``deadline`` and health checks, never the randomness or the
database, so the profile decides those.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase

from tests.support.harness import Ledger

ROOT = Path(__file__).resolve().parent.parent

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("dev", derandomize=False, print_blob=True,
                          database=DirectoryBasedExampleDatabase(ROOT / ".hypothesis" / "examples"))
ON_CI = os.environ.get("CI", "").lower() not in ("", "0", "false")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if ON_CI else "dev"))

BROKER_FIXTURES = frozenset({"kafka_broker", "own_broker"})


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & BROKER_FIXTURES:
            item.add_marker(pytest.mark.integration)
        if "promtool" in fixtures:
            item.add_marker(pytest.mark.promtool)


@pytest.fixture(autouse=True)
def _a_broker_only_where_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test not marked ``integration`` that starts an embedded broker in this process fails, naming the
    marker it lacks, rather than slowing the fast lane down. (One started in a subprocess is not seen
    here: such modules say ``pytestmark = pytest.mark.integration`` themselves.)"""
    if request.node.get_closest_marker("integration") is not None:
        return
    from streams.kafka.broker import EmbeddedBroker

    def refuse(self: EmbeddedBroker) -> EmbeddedBroker:
        raise AssertionError("this test starts the embedded broker: mark it pytest.mark.integration")

    monkeypatch.setattr(EmbeddedBroker, "start", refuse)


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()
