"""Which malloc this process runs on, for the benchmarks' reports (``./dev`` preloads tcmalloc where installed)."""

from __future__ import annotations

from pathlib import Path

KNOWN = {"libtcmalloc": "tcmalloc", "libjemalloc": "jemalloc", "libmimalloc": "mimalloc"}


def allocator_in_use(maps: Path = Path("/proc/self/maps")) -> str:
    """The allocator library mapped into this process, or the C library's malloc."""
    try:
        mapped = maps.read_text()
    except OSError:
        return "unknown (no /proc/self/maps)"
    for library, name in KNOWN.items():
        if library in mapped:
            return f"{name} (preloaded)"
    return "the C library's malloc"
