"""The compiled core: the modules one event runs through, compiled by mypyc when the package is built.

mypyc compiles these modules, unchanged typed Python, into C extensions that sit beside their
sources and load in their place (``setup.py``): a load's thread CPU per event falls by about a
quarter (docs/performance.md). ``pip install .`` builds them (it needs a C compiler);
``EDGELEDGER_COMPILE=0`` installs pure Python. In a checkout, ``./dev`` builds them in place and
again whenever one of their sources changes (``stale_build``).

    python -c 'from processors.native import describe; print(describe())'   # which core runs
    python processors/native.py stamp|folders   # for ./dev: what a build is made from, where it goes

In a checkout, importing ``processors`` refuses extensions older than their sources
(``refuse_stale_build``): every entry point, the CLI, a worker process, a test or a benchmark,
fails with one line rather than run other code than the checkout's.
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
    "processors/feeds/debezium.py",
    "processors/feeds/envelope.py",
    "processors/feeds/holding.py",
    "processors/feeds/output.py",
    "processors/feeds/rules.py",
    "processors/feeds/snapshots.py",
    "processors/feeds/statements.py",
    "processors/heap.py",
    "processors/identity.py",
    "processors/identity_map.py",
    "processors/intervals.py",
    "processors/matching.py",
    "processors/ledger.py",
    "processors/model.py",
    "processors/outbox.py",
    "processors/pending.py",
    "processors/versioning.py",
    "processors/vocabulary.py",
    "state/blocking.py",
    "state/codec.py",
    "state/keys.py",
    "state/layout.py",
    "state/pipeline_store.py",
    "state/reads.py",
    "state/store.py",
    "streams/log/records.py",
)
"""What one event's processing and commit run through, what a worker's batch emits and a replica
reads back, and what a feed adapter runs each row through; the query paths stay Python.
``setup.py`` reads this tuple."""

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


def folders() -> list[str]:
    """Where the extensions go: beside each compiled source; the group's shared runtime is in ``processors``."""
    return sorted({str(Path(path).parent) for path in COMPILED} | {"processors"})


def stale_build(root: Path = ROOT) -> str | None:
    """Why the extensions in a checkout would run other code than its sources, or None. A checkout
    with no extension beside its sources runs pure Python and is never stale."""
    built = sorted(str(path.relative_to(root)) for folder in folders() for path in (root / folder).glob("*.so"))
    if not built:
        return None
    try:
        recorded = (root / STAMP).read_text().strip()
    except OSError:
        return f"{len(built)} compiled extensions and no {STAMP} saying what they were built from"
    current = stamp(root)
    if recorded != current and not recorded.startswith(current + " "):  # ./dev adds the C compiler it used
        return "the compiled core was built from other sources (or another interpreter) than these"
    return None


def refuse_stale_build(root: Path = ROOT) -> None:
    """In a checkout (``setup.py`` beside the packages; an installed package has none), refuse to
    import a compiled core built from other sources: it would run code the checkout no longer says."""
    if not (root / "setup.py").is_file():
        return
    stale = stale_build(root)
    if stale is not None:
        raise ImportError(f"edgeledger: {stale}; rebuild it (./dev does, before every command) or delete "
                          f"the *.so files in {', '.join(folders())}")


def describe() -> str:
    compiled = compiled_modules()
    core = "compiled" if len(compiled) == len(COMPILED) else ("partly compiled" if compiled else "pure Python")
    return f"{core}: {len(compiled)} of {len(COMPILED)} core modules are C extensions"


if __name__ == "__main__":
    # As a script (``python processors/native.py stamp``), ./dev reads these without importing the
    # package, whose import refuses a stale build.
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "stamp":
        print(stamp())
    elif command == "folders":
        print(" ".join(folders()))
    else:
        sys.exit("usage: python processors/native.py stamp|folders")
