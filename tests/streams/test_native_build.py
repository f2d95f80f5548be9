"""The compiled core: a compiled and a pure load write the same rows; a failed build is remembered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from processors import native
from state.kv import RocksKV
from streams import native_build
from tests.support.generate import generate_events

# Builds with mypyc (a failing build takes seconds) and compares the build with the pure modules: in
# `./dev test`, which builds the compiled core first; `./dev test --fast` builds nothing and deselects these.
pytestmark = pytest.mark.compiled

BAD_LINES = ['{"kind": "change", "tenant": ', '{"kind": "gossip", "tenant": "acme", "event_id": "x"}', "[]"]


def _load(events: Path, state: Path, compiled: bool) -> tuple[dict, str]:
    """``edgeledger load`` in a process of its own; returns its summary and whether it ran compiled."""
    env = {**os.environ, "EDGELEDGER_NATIVE": "1" if compiled else "0"}
    loaded = subprocess.run(
        [sys.executable, "-m", "streams.cli.main", "load", "--simulated-clock", "--quiet", "--state", str(state),
         str(events)], env=env, capture_output=True, text=True, check=True, timeout=300)
    core = subprocess.run([sys.executable, "-c", "from processors import native; print(native.active())"],
                          env=env, capture_output=True, text=True, check=True, timeout=60)
    return json.loads(loaded.stdout), core.stdout.strip()


def _rows(state: Path) -> list[tuple[bytes, bytes]]:
    kv = RocksKV(state, read_only=True)
    try:
        return list(kv.scan(b""))
    finally:
        kv.close()


def test_compiled_and_pure_loads_write_the_same_rows(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    lines = list(generate_events(6_000, 1_500, seed=3))
    lines[100:100] = BAD_LINES
    events.write_text("\n".join(lines) + "\n")

    pure_summary, pure_core = _load(events, tmp_path / "pure", compiled=False)
    compiled_summary, compiled_core = _load(events, tmp_path / "compiled", compiled=True)

    assert pure_core == "False"
    # Compiled whenever this checkout has a current build (whatever EDGELEDGER_NATIVE this process was
    # given); CI (.ci/run) fails unless it does.
    assert compiled_core == str(native.build_is_current(native.ROOT)[0])
    assert pure_summary == compiled_summary
    assert pure_summary["dead_lettered"] == len(BAD_LINES) and pure_summary["balanced"]
    assert pure_summary["corrections"] > 0
    assert _rows(tmp_path / "pure") == _rows(tmp_path / "compiled")


def test_a_failed_build_is_not_tried_again_for_the_same_sources(tmp_path: Path) -> None:
    for path in native.COMPILED:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes((native.ROOT / path).read_bytes())
    with open(tmp_path / "processors/clock.py", "a") as source:
        source.write('\nnot_a_number: int = "seven"\n')

    built, message = native_build.build(tmp_path)
    assert not built and message.startswith("mypyc build failed")

    built, message = native_build.build(tmp_path)
    assert not built and "failed to build from these sources before" in message
    stamp = native_build._stamp(native.source_hashes(tmp_path))
    assert native_build._failed_before(tmp_path, stamp)

    with open(tmp_path / "processors/clock.py", "a") as source:
        source.write("\n# edited\n")
    assert not native_build._failed_before(tmp_path, native_build._stamp(native.source_hashes(tmp_path)))
