"""Which interpreter build a benchmark runs on, for its report: on a build with profile-guided and
link-time optimisation the load took 12-16 % less loading-thread CPU than on one without
(docs/performance.md)."""

from __future__ import annotations

import os
import sys


def interpreter_in_use() -> str:
    """The interpreter behind this process (a virtual environment's base), and its version line."""
    base = getattr(sys, "_base_executable", sys.executable)
    return f"{os.path.realpath(base)}: Python {sys.version}"
