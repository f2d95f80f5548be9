"""What every benchmark reports with: percentiles from an HDR histogram (``hdrh``, as the freshness
report's), and the machine's load average."""

from __future__ import annotations

import os
from collections.abc import Iterable

from hdrh.histogram import HdrHistogram

SIGNIFICANT_DIGITS = 3
SCALE = 1_000_000_000
"""Values are recorded as integer multiples of 1/``SCALE`` of their unit: a benchmark's values, in
whatever unit it reports (seconds, milliseconds, counts), keep three significant digits down to 1e-6."""
HIGHEST = 1 << 62
"""The largest recordable integer: values up to about 4.6e9 units (larger ones are recorded as this)."""


def percentile(values: Iterable[float], q: float) -> float:
    """The value at quantile ``q`` in [0, 1] of ``values`` (non-negative), to three significant digits
    (``nan`` for no values)."""
    histogram = HdrHistogram(1, HIGHEST, SIGNIFICANT_DIGITS)
    for value in values:
        histogram.record_value(min(round(value * SCALE), HIGHEST))
    if not histogram.get_total_count():
        return float("nan")
    return histogram.get_value_at_percentile(q * 100) / SCALE


def load_average() -> str:
    """The 1- and 5-minute load averages as ``1.0/0.8``: the machine is shared, and runs say how busy it was."""
    return "{:.1f}/{:.1f}".format(*os.getloadavg()[:2])
