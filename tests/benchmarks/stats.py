"""What every benchmark reports with: one percentile, and the machine's load average."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float:
    """Nearest-rank percentile, ``q`` in [0, 1]: the smallest value with at least ``q`` of them at or
    below it (``nan`` for no values)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered), max(1, math.ceil(q * len(ordered)))) - 1]


def load_average() -> str:
    """The 1- and 5-minute load averages as ``1.0/0.8``: the machine is shared, and runs say how busy it was."""
    return "{:.1f}/{:.1f}".format(*os.getloadavg()[:2])
