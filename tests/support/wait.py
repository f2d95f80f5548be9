"""Waiting in tests for a condition, never for a length of time."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], what: str, timeout: float = 30.0, every: float = 0.02) -> None:
    """Return as soon as ``condition()`` holds; fail naming ``what`` if it still does not after ``timeout`` s
    (a bound for a broken run, not a wait: a passing run never reaches it)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(every)
