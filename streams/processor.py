"""The pure ledger processor as the shell runs it: with the wall clock injected as transaction time.

``load``, the worker and the demo all build their processor here, so that the three apply events alike."""

from __future__ import annotations

import time

from processors.clock import TransactionClock
from processors.ledger import LedgerProcessor
from schemas.ontology import Ontology


def wall_clock_micros() -> int:
    return time.time_ns() // 1000


def make_processor(ontology: Ontology, simulated_clock: bool) -> LedgerProcessor:
    """``simulated_clock``: the ``clock`` events of a file set transaction time (``load --simulated-clock``)."""
    return LedgerProcessor(ontology, TransactionClock(wall_clock_micros, simulated=simulated_clock))
