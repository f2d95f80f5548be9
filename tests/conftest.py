import pytest

from tests.support.harness import Ledger


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()
