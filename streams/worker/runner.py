"""`edgeledger run`: the streaming pipeline, on a real cluster or on the embedded broker.

A run stops on SIGTERM or SIGINT within seconds in every state (``streams.worker.app``), fails once
the broker has been out of reach for ``broker_timeout`` seconds, and, when it exits once idle, fails
if the group has not assigned it its partitions within ``assignment_timeout`` seconds. With several
workers, the parent forwards both signals to every worker process, and stops them all when one fails.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from confluent_kafka.admin import AdminClient

from processors.pending import BatchCounts
from schemas.ontology import Ontology, default_ontology, load_ontology
from schemas.slo import SloConfig, default_slo, load_slo
from streams.kafka.broker import default_broker_dir, resolve_bootstrap
from streams.kafka.config import ADMIN_DEFAULTS, FAST_GROUP_OVERRIDES, LIBRDKAFKA_LOG
from streams.kafka.liveness import BrokerWatch
from streams.kafka.topics import TopicSettings, ensure_topics
from streams.metrics import LedgerMetrics, serve_metrics
from streams.processor import wall_clock_micros
from streams.worker.app import SIGNALS, STOP_GRACE, run_app
from streams.worker.loop import CommitObserver, LedgerWorker, WorkerConfig
from streams.worker.monitoring import FreshnessTicker

log = logging.getLogger(__name__)

CHILD_POLL = 0.1
"""Seconds between two looks at the worker processes of a multi-worker run."""


class WorkerProcessFailed(RuntimeError):
    """A worker process of a multi-worker run exited with an error (the others are stopped)."""


def run_pipeline(state: Path, bootstrap: str | None, workers: int = 1, group_id: str = "edgeledger-ledger",
                 prefix: str = "edgeledger.", idle_exit_after: float | None = None,
                 observers: list[CommitObserver] | None = None,
                 consumer_overrides: dict[str, str | int] | None = None, metrics_port: int = 9108,
                 metrics_host: str = "127.0.0.1", slo_path: Path | None = None, freshness_interval: float = 5.0,
                 ontology_path: Path | None = None, *, broker_dir: Path | None = None, broker_storage: str = "disk",
                 broker_timeout: float = 60.0, assignment_timeout: float = 60.0, replication_factor: int = 1,
                 min_insync_replicas: int | None = None) -> BatchCounts | None:
    """Run ``workers`` ledger workers in one consumer group until interrupted (or idle, for backfills).
    ``slo_path`` and ``ontology_path`` replace the bundled files, in every worker process. Without a
    bootstrap the embedded broker starts, keeping its data in ``broker_dir`` (by default beside the
    state) when ``broker_storage`` is "disk"."""
    # Read both before starting anything, so a bad file is refused before a broker or worker starts.
    slo = load_slo(slo_path) if slo_path is not None else default_slo()
    ontology = load_ontology(ontology_path) if ontology_path is not None else default_ontology()
    with _terminate_as_interrupt():
        address, broker = resolve_bootstrap(bootstrap, broker_dir=broker_dir or default_broker_dir(state),
                                            storage=broker_storage)
        topics = TopicSettings(prefix=prefix, replication_factor=replication_factor,
                               min_insync_replicas=min_insync_replicas)
        try:
            # A broker started here has said where it is and what it keeps (``resolve_bootstrap``).
            if broker is not None and broker_storage != "disk":
                log.warning("the embedded broker at %s is memory-only: its topics and offsets vanish when this "
                            "process exits", address)
            ensure_topics_within(address, topics, broker_timeout)
            overrides = dict(consumer_overrides or {})
            if broker is not None:
                # A disk-backed broker answers an empty fetch only after its wait: see ``consumer_overrides``.
                overrides = {**FAST_GROUP_OVERRIDES, **broker.consumer_overrides, **overrides}
            if workers == 1:
                config = WorkerConfig(state, address, group_id, topics, consumer_overrides=overrides,
                                      broker_timeout=broker_timeout, assignment_timeout=assignment_timeout)
                return run_monitored_worker(config, idle_exit_after, observers, metrics_port, slo,
                                            freshness_interval, ontology, metrics_host)
            run_worker_processes(state, address, workers, group_id, prefix, idle_exit_after, overrides, metrics_port,
                                 [*_file_option("--slo", slo_path), *_file_option("--ontology", ontology_path),
                                  "--freshness-interval", str(freshness_interval), "--metrics-host", metrics_host,
                                  "--broker-timeout", str(broker_timeout),
                                  "--assignment-timeout", str(assignment_timeout),
                                  "--replication-factor", str(replication_factor),
                                  *_value_option("--min-insync-replicas", min_insync_replicas)])
            return None
        finally:
            if broker is not None:
                broker.stop()


def ensure_topics_within(address: str, topics: TopicSettings, broker_timeout: float) -> None:
    """``ensure_topics``, tried again while the cluster is out of reach, for up to ``broker_timeout``
    seconds (then ``BrokerUnreachable``); each try is bounded, so an interrupt is seen within seconds."""
    watch = BrokerWatch(address, broker_timeout)
    # Its log lines go through the quiet logger, served by ``poll`` (an admin client serves them nowhere else).
    settings: dict[str, Any] = {**ADMIN_DEFAULTS, "bootstrap.servers": address, "logger": LIBRDKAFKA_LOG}
    admin = AdminClient(settings)

    def attempt() -> None:
        try:
            ensure_topics(admin, topics, timeout=min(5.0, max(1.0, broker_timeout / 3)))
        finally:
            admin.poll(0)

    watch.reach(attempt, lambda: False)  # an interrupt ends it: SIGTERM is a KeyboardInterrupt here


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM as SIGINT while the run starts or ends (``run_app`` handles both while it runs): the
    ``finally`` blocks run, and a broker this run started is stopped, not left behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_monitored_worker(config: WorkerConfig, idle_exit_after: float | None,
                         observers: list[CommitObserver] | None, metrics_port: int,
                         slo: SloConfig | None, freshness_interval: float = 5.0,
                         ontology: Ontology | None = None, metrics_host: str = "127.0.0.1") -> BatchCounts:
    """A worker with its metrics observer, ``/metrics`` on ``metrics_host:metrics_port`` (port 0: none) and the
    freshness timer."""
    slo = slo or default_slo()
    metrics = LedgerMetrics()
    metrics.set_slo(slo)
    server = serve_metrics(metrics.registry, metrics_port, metrics_host)[0] if metrics_port else None
    worker = LedgerWorker(config, ontology, observers=[metrics.observe_commit, *(observers or [])],
                          on_consumer_lag=metrics.set_consumer_lag, on_rebuild=metrics.observe_rebuild)
    worker.assignment.positions.on_reset = metrics.observe_offset_reset
    ticker = FreshnessTicker(worker.store, slo, metrics, config.bootstrap, config.topics, wall_clock_micros)
    try:
        return run_app(config.bootstrap, config.state_dir, worker, idle_exit_after,
                       [(freshness_interval, ticker)])
    finally:
        if server is not None:
            server.shutdown()


def run_worker_processes(state: Path, bootstrap: str, workers: int, group_id: str, prefix: str,
                         idle_exit_after: float | None, consumer_overrides: dict[str, str | int],
                         metrics_port: int, shared_options: list[str]) -> None:
    """One process per worker, each with its own state directory (``STATE/worker-N``), one group;
    ``shared_options`` are ``run`` options every worker takes as given (SLO, ontology, timers, bounds).

    SIGTERM and SIGINT are passed on to every worker; a worker that fails stops the others, and the
    run raises ``WorkerProcessFailed``. Each worker ends within ``STOP_GRACE`` seconds of its signal;
    one that has not is killed."""
    commands = []
    for index in range(workers):
        command = [sys.executable, "-m", "streams.cli.main", "run", "--state", str(state / f"worker-{index}"),
                   "--bootstrap", bootstrap, "--group", group_id, "--topic-prefix", prefix,
                   "--metrics-port", str(metrics_port + index if metrics_port else 0), *shared_options]
        if idle_exit_after is not None:
            command += ["--exit-when-idle", str(idle_exit_after)]
        for key, value in consumer_overrides.items():
            command += ["--consumer-option", f"{key}={value}"]
        commands.append(command)
    received: list[signal.Signals] = []
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, lambda signum, _: received.append(signal.Signals(signum)))
                for sig in SIGNALS} if on_main_thread else {}
    processes = [subprocess.Popen(command) for command in commands]
    try:
        failed = _watch(processes, received)
    except BaseException:
        _stop(processes, signal.SIGTERM)
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if failed:
        raise WorkerProcessFailed("; ".join(f"worker {index} (state {state / f'worker-{index}'}) exited with "
                                            f"code {code}" for index, code in failed))


def _watch(processes: list[subprocess.Popen], received: list[signal.Signals]) -> list[tuple[int, int]]:
    """Wait until every worker has exited; on a signal, or once one fails, stop the others. Returns the
    workers that failed, by index, with their exit codes."""
    stopped = False
    while True:
        codes = [process.poll() for process in processes]
        if all(code is not None for code in codes):
            return [(index, code) for index, code in enumerate(codes) if code]
        failed = [(index, code) for index, code in enumerate(codes) if code]
        if not stopped and (received or failed):
            stopped = True
            if received:
                log.warning("%s: stopping %d worker processes", received[0].name, len(processes))
            else:
                log.error("worker %d exited with code %d: stopping the others", *failed[0])
            _stop(processes, received[0] if received else signal.SIGTERM)
        time.sleep(CHILD_POLL)


def _stop(processes: list[subprocess.Popen], sig: signal.Signals) -> None:
    """Signal every worker still running, wait for them for ``STOP_GRACE`` seconds and a little, and
    kill those still running then."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(sig)
    ends_at = time.monotonic() + STOP_GRACE + 0.5
    for index, process in enumerate(processes):
        try:
            process.wait(max(0.0, ends_at - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.error("worker %d (pid %d) did not stop within %.1f s of %s: killed", index, process.pid,
                      STOP_GRACE + 0.5, sig.name)
            process.kill()
            process.wait()


def _value_option(flag: str, value: int | None) -> list[str]:
    return [flag, str(value)] if value is not None else []


def _file_option(flag: str, path: Path | None) -> list[str]:
    return [flag, str(path.resolve())] if path is not None else []
