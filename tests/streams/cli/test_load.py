"""`edgeledger load`'s file side: every line read in order, progress counted in bytes, and the bar kept
off standard output (and off a standard error that is not a terminal)."""

import fcntl
import io
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

from tqdm import tqdm

from state.open import open_writer
from streams.cli.demo import DEMO_EVENTS
from streams.cli.load import _REPORT_EVERY, load_files, read_lines


def test_read_lines_reports_every_byte_and_changes_no_line(tmp_path: Path) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_bytes(b"".join(b'{"n": %d}\n' % n for n in range(_REPORT_EVERY * 2 + 7)))
    second.write_bytes(b'{"last": true}')  # no final newline
    reported: list[int] = []

    lines = list(read_lines([first, second], reported.append))

    assert lines == list(read_lines([first, second]))
    assert sum(reported) == first.stat().st_size + second.stat().st_size
    assert len(reported) == 4  # two full reports and the rest of the first file, then the second file


def test_load_files_moves_the_bar_to_the_whole_size(tmp_path: Path) -> None:
    store = open_writer(tmp_path / "state", bulk=True)
    bar = tqdm(total=DEMO_EVENTS.stat().st_size, file=io.StringIO(), disable=False)
    try:
        counts = load_files([DEMO_EVENTS], store, simulated_clock=True, progress=bar)
    finally:
        store.close()
    assert counts.balanced() and counts.applied > 0
    assert bar.n == DEMO_EVENTS.stat().st_size
    assert bar.postfix == "compacted"


def _load_with_terminal_stderr(state: Path, *options: str) -> tuple[str, str]:
    """Run `edgeledger load` with standard error on a pseudo-terminal; (stdout, what the terminal got)."""
    controller, terminal = pty.openpty()
    # A new pseudo-terminal is 0 columns wide, and a bar that fits in 0 columns is empty.
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "streams.cli.main", "load", str(DEMO_EVENTS), "--state", str(state), "--simulated-clock",
         *options],
        stdout=subprocess.PIPE, stderr=terminal, cwd=Path(__file__).resolve().parents[3],
    )
    os.close(terminal)
    shown = b""
    while True:
        ready, _, _ = select.select([controller], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    stdout, _ = process.communicate(timeout=60)
    os.close(controller)
    assert process.returncode == 0, shown.decode(errors="replace")
    return stdout.decode(), shown.decode(errors="replace")


def test_load_shows_a_bar_on_a_terminal_and_keeps_stdout_to_the_summary(tmp_path: Path) -> None:
    stdout, terminal = _load_with_terminal_stderr(tmp_path / "with-bar")
    assert json.loads(stdout)["balanced"] is True
    assert "load: 100%" in terminal and "compacted" in terminal

    stdout, terminal = _load_with_terminal_stderr(tmp_path / "quiet", "--quiet")
    assert json.loads(stdout)["balanced"] is True
    assert "100%" not in terminal
