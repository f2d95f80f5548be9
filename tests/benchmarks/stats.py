"""The one percentile every benchmark reports with."""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float:
    """Nearest-rank percentile, ``q`` in [0, 1]: the smallest value with at least ``q`` of them at or
    below it (``nan`` for no values)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered), max(1, math.ceil(q * len(ordered)))) - 1]
