"""The embedded broker's subprocesses and its directory lock.

Each subprocess leads its own session, so a terminal's Ctrl-C reaches only the process that started it,
which then stops them in order. On Linux each also asks the kernel for SIGKILL when its parent dies, so
a parent killed with ``kill -9`` leaves no broker or store behind holding a port or a directory.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
StopSteps = Sequence[tuple[signal.Signals, float | None]]


def die_with_parent_hook() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking for SIGKILL when the parent dies (Linux only; None elsewhere).

    The kernel signals when the *thread* that forked the child exits, so start subprocesses from a
    thread that lives as long as they should (the main thread, in every command). The hook runs between
    fork and exec, so it only calls a function resolved here, before the fork.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()

    def hook() -> None:
        # A parent that died before prctl took effect would never send the signal: exit instead.
        if prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != parent:
            os._exit(127)

    return hook


def spawn(argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    """Start ``argv`` in its own session, dying with this process, stdout and stderr appended to ``log_path``."""
    log_file = log_path.open("ab")
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
            close_fds=True,
            preexec_fn=die_with_parent_hook(),
        )
    except BaseException:
        log_file.close()
        raise
    log.debug("spawned %s (pid %s)", " ".join(argv), proc.pid)
    return proc, log_file


def stop_group(proc: subprocess.Popen[bytes] | None, steps: StopSteps, what: str) -> None:
    """Signal ``proc``'s process group with each step's signal until it exits within that step's wait."""
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in steps:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            log.warning("%s pid %s still running %.1fs after %s", what, proc.pid, wait or 0.0, sig.name)


def wait_for_port(proc: subprocess.Popen[bytes], host: str, port: int, deadline: float) -> str | None:
    """Wait until ``host:port`` accepts a connection; why not (the process exited, or time ran out), or None."""
    while True:
        code = proc.poll()
        if code is not None:
            return f"exited with code {code}"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return f"did not listen on {host}:{port} in time"
        try:
            with socket.create_connection((host, port), timeout=min(0.5, remaining)):
                return None
        except OSError:
            time.sleep(0.02)


class DirectoryLock:
    """An exclusive ``flock`` on a file in a directory, naming its holder's pid; released when the holder
    exits, however it exits. The descriptor is close-on-exec, so a subprocess never keeps it."""

    def __init__(self, directory: Path, name: str = "broker.lock") -> None:
        self.path = directory / name
        self._fd: int | None = None

    def acquire(self) -> str | None:
        """Take the lock: None when taken, else what the file says of the holder (its pid, or "")."""
        if self._fd is not None:
            return None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode("ascii", errors="replace").strip()
            os.close(fd)
            return holder
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor releases the flock
