"""The ledger the API tests read: the demo's events, loaded once per module."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.cli.load import load_into
from tests.support.api import DEMO


@pytest.fixture(scope="module")
def demo_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    state = tmp_path_factory.mktemp("demo") / "ledger"
    load_into(state, [DEMO], simulated_clock=True, ontology_path=None)
    return state
