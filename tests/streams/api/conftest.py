"""The ledger the API tests read: the demo's events, loaded once per module, and a client of a private copy."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from streams.api.http import create_app
from streams.cli.load import load_into
from tests.support.api import DEMO


@pytest.fixture(scope="module")
def demo_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    state = tmp_path_factory.mktemp("demo") / "ledger"
    load_into(state, [DEMO], simulated_clock=True, ontology_path=None)
    return state


@pytest.fixture
def state(demo_ledger: Path, tmp_path: Path) -> Path:
    """A private copy of the demo ledger (loading it costs more than copying it)."""
    return Path(shutil.copytree(demo_ledger, tmp_path / "ledger"))


@pytest.fixture
def client(state: Path, tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(state, cache_dir=tmp_path / "cache", refresh_interval_s=0)) as client:
        yield client
