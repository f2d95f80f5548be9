"""A subprocess's output, drained on two threads as it comes, each line with its arrival time."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import IO


class LogPipe:
    """Drains a process's stdout and stderr on two threads, keeping ``(arrival time, line)``."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.stdout: list[tuple[float, str]] = []
        self.stderr: list[tuple[float, str]] = []
        self._threads = [threading.Thread(target=self._drain, args=(process.stdout, self.stdout), daemon=True),
                         threading.Thread(target=self._drain, args=(process.stderr, self.stderr), daemon=True)]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _drain(stream: IO[str], into: list[tuple[float, str]]) -> None:
        for line in iter(stream.readline, ""):
            into.append((time.time(), line.rstrip("\n")))

    def close(self) -> None:
        for thread in self._threads:
            thread.join(10)

    def first(self, needle: str, stream: str = "stderr") -> float | None:
        for at, line in list(getattr(self, stream)):
            if needle in line:
                return at
        return None

    def json_events(self) -> list[dict]:
        out = []
        for _, line in list(self.stdout):
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):
                    out.append(json.loads(line))
        return out

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            if self.process.poll() is not None:
                return predicate()
            time.sleep(0.01)
        return False

    def tail(self, lines: int = 30) -> str:
        return "\n".join(line for _, line in self.stderr[-lines:])

    def summary(self) -> dict:
        """The JSON summary a worker prints on stdout as it ends."""
        return json.loads("\n".join(line for _, line in self.stdout))

    def stop(self, timeout: float = 60) -> dict:
        """Stop the process as an operator does (SIGTERM); its summary, once it exited cleanly."""
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(timeout) == 0, self.tail(40)
        self.close()
        return self.summary()
