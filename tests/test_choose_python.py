"""``.ci/choose-python.sh``: the interpreter ``./dev`` makes ``.venv`` from."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / ".ci" / "choose-python.sh"
BASH = shutil.which("bash") or "/bin/bash"


def choose(path: str, **environment: str) -> str:
    env = {"PATH": path, "HOME": os.environ.get("HOME", "/tmp"), **environment}
    done = subprocess.run([BASH, str(SCRIPT)], env=env, capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.strip()


def test_python_when_set_is_taken_as_it_is(tmp_path: Path) -> None:
    assert choose(str(tmp_path), PYTHON="/opt/some/python3.11") == "/opt/some/python3.11"


def test_without_the_distributions_interpreter_python3_11_on_path_is_next(tmp_path: Path) -> None:
    fake = tmp_path / "python3.11"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    assert choose(str(tmp_path), EDGELEDGER_SYSTEM_PYTHON="0") == "python3.11"


def test_with_no_python3_11_at_all_python3_is_last(tmp_path: Path) -> None:
    assert choose(str(tmp_path), EDGELEDGER_SYSTEM_PYTHON="0") == "python3"
