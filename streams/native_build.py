"""Build the compiled core (``processors.native``): mypyc over ``COMPILED`` into ``.native/``.

    python -m streams.native_build [build] [--force]   # a no-op while the build is current
    python -m streams.native_build status              # which core a process runs, and why
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from processors.native import BUILD_DIR, COMPILED, MANIFEST, ROOT, build_is_current, decide, interpreter, source_hashes

GROUP = "edgeledger_core"
"""mypyc's shared runtime for the group: the top-level module ``edgeledger_core__mypyc`` in the build."""

CURRENT = "the compiled core is current"

_SETUP = """
import sys
from setuptools import setup
from mypyc.build import mypycify
output, temp, group, *paths = sys.argv[1:]
setup(name="edgeledger-native", script_args=["build_ext", "--build-lib", output, "--build-temp", temp],
      ext_modules=mypycify(paths, group_name=group, opt_level="3"))
"""


FAILED = ".native-failed.json"
"""The sources and interpreter a build last failed for: ``./dev`` runs ``build`` before every command,
and without a C compiler each attempt would spend seconds type-checking only to fail again."""


def _stamp(hashes: dict[str, str]) -> dict[str, object]:
    return {"python": interpreter(), "sources": hashes}


def _failed_before(root: Path, stamp: dict[str, object]) -> bool:
    try:
        recorded = json.loads((root / FAILED).read_text())
    except (OSError, ValueError):
        return False
    return {key: recorded.get(key) for key in stamp} == stamp


def build(root: Path = ROOT, force: bool = False) -> tuple[bool, str]:
    """Compile ``COMPILED`` into ``root/.native``; returns (the build is current now, what happened).
    A build that failed is not tried again for the same sources and interpreter unless ``force``."""
    stamp = _stamp(source_hashes(root))
    if not force and build_is_current(root)[0]:
        return True, CURRENT
    if not force and _failed_before(root, stamp):
        return False, ("the compiled core failed to build from these sources before, so the pure modules run "
                       "(python -m streams.native_build --force to try again)")
    target = root / BUILD_DIR
    with tempfile.TemporaryDirectory(prefix="edgeledger-native-") as scratch:
        output, temp = Path(scratch) / "lib", Path(scratch) / "temp"
        # Run from the scratch folder: setuptools would otherwise read the project's pyproject.toml.
        process = subprocess.run(
            [sys.executable, "-c", _SETUP, str(output), str(temp), GROUP, *(str(root / path) for path in COMPILED)],
            cwd=scratch, capture_output=True, text=True, check=False,
        )
        if process.returncode != 0:
            lines = [line for line in (process.stdout + process.stderr).splitlines() if line.strip()]
            (root / FAILED).write_text(json.dumps(stamp, indent=1) + "\n")
            return False, "mypyc build failed, the pure modules will run:\n" + "\n".join(lines[-15:])
        if _stamp(source_hashes(root)) != stamp:
            return False, "the sources changed during the build; run it again"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(output, target)
    (target / MANIFEST).write_text(json.dumps(stamp, indent=1) + "\n")
    (root / FAILED).unlink(missing_ok=True)
    return True, f"built the compiled core into {target}"


def main(argv: list[str]) -> int:
    command = next((arg for arg in argv if not arg.startswith("-")), "build")
    if command == "build":
        ok, message = build(force="--force" in argv)
        if message != CURRENT:  # quiet when there is nothing to do: ``./dev`` runs this before every command
            print(message, file=sys.stderr)
        return 0 if ok else 1
    if command == "status":
        use, reason = decide()
        print(("compiled" if use else "pure Python") + f": {reason}")
        return 0
    print("usage: python -m streams.native_build [build [--force] | status]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
