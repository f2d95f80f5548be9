"""The compiled core runs only as the sources beside it say, and writes what they write."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from processors import native
from state.kv import RocksKV
from tests.support.generate import generate_events

BAD_LINES = ['{"kind": "change", "tenant": ', '{"kind": "gossip", "tenant": "acme", "event_id": "x"}', "[]"]
PACKAGES = ("schemas", "processors", "state", "streams")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the compiled modules' sources, with no extension beside them."""
    for path in native.COMPILED:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(native.ROOT / path, tmp_path / path)
    return tmp_path


def _pretend_built(checkout: Path) -> None:
    (checkout / "processors" / "versioning.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    (checkout / native.STAMP).write_text(native.stamp(checkout) + "\n")


def test_a_checkout_without_extensions_runs_its_sources_and_is_never_stale(checkout: Path) -> None:
    assert native.stale_build(checkout) is None


def test_a_build_of_these_sources_is_current(checkout: Path) -> None:
    _pretend_built(checkout)
    assert native.stale_build(checkout) is None


def test_an_edited_source_makes_the_build_stale(checkout: Path) -> None:
    _pretend_built(checkout)
    with open(checkout / "processors/versioning.py", "a") as source:
        source.write("\n# edited\n")
    assert "other sources" in (native.stale_build(checkout) or "")


def test_extensions_nobody_recorded_are_stale(checkout: Path) -> None:
    _pretend_built(checkout)
    (checkout / native.STAMP).unlink()
    assert f"no {native.STAMP}" in (native.stale_build(checkout) or "")


def test_a_build_by_another_interpreter_is_stale(checkout: Path) -> None:
    _pretend_built(checkout)
    recorded = (checkout / native.STAMP).read_text()
    (checkout / native.STAMP).write_text(recorded.replace(sys.version.split()[0], "3.11.0", 1))
    assert native.stamp(checkout).startswith(f"{sys.implementation.cache_tag} {sys.version.split()[0]} ")
    assert native.stale_build(checkout) is not None


def test_an_extension_beside_any_compiled_source_counts(checkout: Path) -> None:
    """Extensions are looked for in every folder a compiled source is in, not a fixed list."""
    (checkout / native.STAMP).write_text(native.stamp(checkout) + "\n")
    (checkout / "streams" / "log" / "records.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    assert native.stale_build(checkout) is None
    with open(checkout / "streams/log/records.py", "a") as source:
        source.write("\n# edited\n")
    assert native.stale_build(checkout) is not None


def test_a_checkout_refuses_to_import_a_stale_build(checkout: Path) -> None:
    _pretend_built(checkout)
    with open(checkout / "processors/versioning.py", "a") as source:
        source.write("\n# edited\n")
    native.refuse_stale_build(checkout)  # no setup.py: an installed package, never refused
    (checkout / "setup.py").write_text("")
    with pytest.raises(ImportError, match="other sources"):
        native.refuse_stale_build(checkout)


def _load(tree: Path, events: Path, state: Path) -> tuple[dict, str]:
    """``edgeledger load`` run from ``tree``'s packages; its summary and the core it ran."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    loaded = subprocess.run(
        [sys.executable, "-m", "streams.cli.main", "load", "--simulated-clock", "--quiet", "--state", str(state),
         str(events)], cwd=tree, env=env, capture_output=True, text=True, check=True, timeout=300)
    core = subprocess.run([sys.executable, "-c", "from processors.native import describe; print(describe())"],
                          cwd=tree, env=env, capture_output=True, text=True, check=True, timeout=60)
    return json.loads(loaded.stdout), core.stdout.strip()


def _rows(state: Path) -> list[tuple[bytes, bytes]]:
    kv = RocksKV(state, read_only=True)
    try:
        return list(kv.scan(b""))
    finally:
        kv.close()


@pytest.mark.compiled
def test_compiled_and_pure_loads_write_the_same_rows(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    lines = list(generate_events(6_000, 1_500, seed=3))
    lines[100:100] = BAD_LINES
    events.write_text("\n".join(lines) + "\n")
    pure_tree = tmp_path / "pure"
    for package in PACKAGES:
        shutil.copytree(native.ROOT / package, pure_tree / package,
                        ignore=shutil.ignore_patterns("*.so", "__pycache__"))

    pure_summary, pure_core = _load(pure_tree, events, tmp_path / "pure-state")
    this_summary, this_core = _load(native.ROOT, events, tmp_path / "this-state")

    assert pure_core.startswith("pure Python"), pure_core
    built = any((native.ROOT / "processors").glob("*.so"))
    # CI requires the compiled core (.ci/run): there this test must compare it with the pure modules.
    assert built or os.environ.get("EDGELEDGER_REQUIRE_NATIVE") != "1", "no compiled core to compare"
    assert this_core.startswith("compiled" if built else "pure Python"), this_core
    assert pure_summary == this_summary
    assert pure_summary["dead_lettered"] == len(BAD_LINES) and pure_summary["balanced"]
    assert pure_summary["corrections"] > 0
    assert _rows(tmp_path / "pure-state") == _rows(tmp_path / "this-state")
