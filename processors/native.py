"""The compiled core: the modules one event runs through, compiled by mypyc when the package is built.

mypyc compiles these modules, unchanged typed Python, into C extensions that sit beside their
sources and load in their place (``setup.py``): a load's thread CPU per event falls by about a
quarter (docs/performance.md). ``pip install .`` builds them (it needs a C compiler);
``EDGELEDGER_COMPILE=0`` installs pure Python. In a checkout, ``./dev`` builds them in place and
again whenever one of their sources changes (``stale_build``).

    python -m processors.native      # which core this process runs, and whether a build is stale
"""

from __future__ import annotations

import hashlib
import importlib
import sys
from pathlib import Path

COMPILED = (
    "processors/apply.py",
    "processors/batch.py",
    "processors/clock.py",
    "processors/commit_summary.py",
    "processors/heap.py",
    "processors/identity.py",
    "processors/intervals.py",
    "processors/ledger.py",
    "processors/model.py",
    "processors/pending.py",
    "processors/versioning.py",
    "processors/vocabulary.py",
    "state/codec.py",
    "state/keys.py",
    "state/layout.py",
    "state/pipeline_store.py",
    "state/reads.py",
    "state/store.py",
    "streams/log/outbox.py",
    "streams/log/records.py",
)
"""What one event's processing and commit run through, and what a worker's batch emits and a
replica reads back; the query paths stay Python. ``setup.py`` reads this tuple."""

ROOT = Path(__file__).resolve().parent.parent
STAMP = ".core-build"
"""In a checkout: the interpreter and source hashes the in-place build was made from (``./dev``)."""


def module_name(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def compiled_modules() -> list[str]:
    """The modules of ``COMPILED`` that this process loaded from an extension."""
    return [name for name in map(module_name, COMPILED)
            if not (importlib.import_module(name).__file__ or "").endswith(".py")]


def stamp(root: Path = ROOT) -> str:
    """The interpreter and the hash of every compiled source: a build is current while this is unchanged."""
    digest = hashlib.sha256()
    for path in COMPILED:
        digest.update(path.encode() + b"\0" + (root / path).read_bytes())
    return f"{sys.implementation.cache_tag} {sys.version.split()[0]} {digest.hexdigest()}"


def stale_build(root: Path = ROOT) -> str | None:
    """Why the extensions in a checkout would run other code than its sources, or None. A checkout
    with no extension beside its sources runs pure Python and is never stale."""
    built = sorted(str(path.relative_to(root)) for package in ("processors", "state", "streams/log")
                   for path in (root / package).glob("*.so"))
    if not built:
        return None
    try:
        recorded = (root / STAMP).read_text().strip()
    except OSError:
        return f"{len(built)} compiled extensions and no {STAMP} saying what they were built from"
    if recorded != stamp(root):
        return "the compiled core was built from other sources (or another interpreter) than these"
    return None


def describe() -> str:
    compiled = compiled_modules()
    core = "compiled" if len(compiled) == len(COMPILED) else (
        "partly compiled" if compiled else "pure Python")
    stale = stale_build() if (ROOT / "setup.py").exists() else None
    return f"{core}: {len(compiled)} of {len(COMPILED)} core modules are C extensions" + (
        f"; STALE: {stale}" if stale else "")


if __name__ == "__main__":
    print(describe())
