import pytest

from tests.harness import Ledger


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()
