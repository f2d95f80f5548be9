"""The compiled core is used only while it was built from exactly the sources beside it."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from processors import native


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the compiled modules' sources with a build manifest that matches them."""
    for path in native.COMPILED:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(native.ROOT / path, tmp_path / path)
    build = tmp_path / native.BUILD_DIR
    build.mkdir()
    manifest = {"python": native.interpreter(), "sources": native.source_hashes(tmp_path)}
    (build / native.MANIFEST).write_text(json.dumps(manifest))
    return tmp_path


def _edit_manifest(project: Path, **changes: object) -> None:
    manifest_path = project / native.BUILD_DIR / native.MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest.update(changes)
    manifest_path.write_text(json.dumps(manifest))


def test_a_build_of_the_current_sources_is_used(project: Path) -> None:
    assert native.build_is_current(project)[0]


def test_an_edited_module_runs_as_python_until_the_next_build(project: Path) -> None:
    with open(project / "processors/versioning.py", "a") as source:
        source.write("\n# edited\n")
    current, reason = native.build_is_current(project)
    assert not current
    assert "processors/versioning.py" in reason


def test_a_build_for_another_interpreter_is_not_used(project: Path) -> None:
    _edit_manifest(project, python="cpython-312")
    assert native.build_is_current(project) == (False, f"built for cpython-312, this is {native.interpreter()}")


def test_a_build_by_another_build_of_the_same_python_is_not_used(project: Path) -> None:
    """Same ABI tag, another interpreter build (another patch release, or the distribution's)."""
    _edit_manifest(project, python=f"{sys.implementation.cache_tag} 3.11.0 (main, Jan  1 2023, 00:00:00) [GCC 9]")
    assert not native.build_is_current(project)[0]


def test_a_build_of_other_modules_than_the_list_is_not_used(project: Path) -> None:
    _edit_manifest(project, sources={**native.source_hashes(project), "streams/worker/loop.py": "0" * 64})
    assert not native.build_is_current(project)[0]


def test_no_build_or_an_unreadable_manifest_means_python(project: Path) -> None:
    (project / native.BUILD_DIR / native.MANIFEST).write_text("{not json")
    assert not native.build_is_current(project)[0]
    shutil.rmtree(project / native.BUILD_DIR)
    assert "no build" in native.build_is_current(project)[1]


def test_this_process_runs_the_core_it_decided_on() -> None:
    assert native.active() == native.decide()[0]
