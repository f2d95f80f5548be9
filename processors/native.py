"""The compiled core: the hot path's modules built with mypyc, used only while they match the sources.

The per-event work is spread over many small functions (no one of them above 3 % of a load), so
the interpreter's own overhead is what a faster core must remove. mypyc compiles these modules,
unchanged typed Python, to C extensions: a load's thread CPU per event fell by 14-24 % (README,
performance). The build goes to ``.native/`` beside the packages, with a manifest of
the hashes of the sources it was built from; ``processors`` and ``state`` put it first on their
``__path__`` only while every compiled source still has its recorded hash, so an edited module
runs as the Python it now is until the next build, never as a stale extension.

    python -m streams.native_build          # compile (a no-op while the build is current)
    python -m streams.native_build status   # which core a process would run, and why

``EDGELEDGER_NATIVE=0`` runs the pure modules even when a current build exists (the reference).
Without mypy or a C compiler the build fails with its reason and everything runs as Python.
"""

from __future__ import annotations

import hashlib
import json
import os
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
"""What one event's processing and commit run through, and what a worker's batch emits (``state.pipeline_store``'s
outbox rows, ``streams.log.outbox``'s records and the ``Replay`` of ``streams.log.records`` that reads them back);
the query paths stay Python."""

BUILD_DIR = ".native"
MANIFEST = "manifest.json"
ROOT = Path(__file__).resolve().parent.parent

_decision: tuple[bool, str] | None = None


def source_hashes(root: Path) -> dict[str, str]:
    return {path: hashlib.sha256((root / path).read_bytes()).hexdigest() for path in COMPILED}


def interpreter() -> str:
    """The interpreter build a compiled core is for: its ABI tag and its build (version, date and
    compiler). A core built by another 3.11 would load, but it was compiled with that interpreter's
    headers and flags; ``./dev`` makes ``.venv`` again when it picks another interpreter, and the
    core is then built again too."""
    return f"{sys.implementation.cache_tag} {sys.version}"


def build_is_current(root: Path) -> tuple[bool, str]:
    try:
        manifest = json.loads((root / BUILD_DIR / MANIFEST).read_text())
    except FileNotFoundError:
        return False, f"no build in {root / BUILD_DIR} (python -m streams.native_build)"
    except (OSError, ValueError) as error:
        return False, f"unreadable build manifest: {error}"
    if manifest.get("python") != interpreter():
        return False, f"built for {manifest.get('python')}, this is {interpreter()}"
    try:
        current = source_hashes(root)
    except OSError as error:
        return False, f"cannot read the sources: {error}"
    built = manifest.get("sources", {})
    if set(built) != set(current):
        # Every module in the build is loaded if present, so it must be exactly the listed ones.
        return False, "the build holds other modules than processors.native.COMPILED lists"
    changed = sorted(path for path, digest in current.items() if built[path] != digest)
    if changed:
        return False, f"sources changed since the build: {', '.join(changed)}"
    return True, f"compiled core from {root / BUILD_DIR}"


def decide() -> tuple[bool, str]:
    """Whether this process runs the compiled core, and why (decided once per process)."""
    global _decision
    if _decision is None:
        if os.environ.get("EDGELEDGER_NATIVE", "1") == "0":
            _decision = (False, "EDGELEDGER_NATIVE=0: pure Python")
        else:
            _decision = build_is_current(ROOT)
    return _decision


def prefer_compiled(package_path: list[str], package: str) -> None:
    """Called by a package's ``__init__``: look for its modules in the build first, if it is current."""
    if not decide()[0]:
        return
    build = ROOT / BUILD_DIR
    if str(build) not in sys.path:
        sys.path.append(str(build))  # the group's shared runtime module is imported by top-level name
    package_path.insert(0, str(build / package))


def active() -> bool:
    """Whether the compiled core is running: the versioning module was loaded from an extension."""
    import processors.versioning

    return not processors.versioning.__file__.endswith(".py")
