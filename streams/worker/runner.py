"""`edgeledger run`: the streaming pipeline, on a real cluster or on the embedded broker."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from pathlib import Path

from processors.pending import BatchCounts
from schemas.ontology import Ontology, default_ontology, load_ontology
from schemas.slo import SloConfig, default_slo, load_slo
from streams.kafka.broker import resolve_bootstrap
from streams.kafka.config import FAST_GROUP_OVERRIDES
from streams.kafka.topics import TopicSettings, ensure_topics
from streams.metrics import LedgerMetrics, serve_metrics
from streams.processor import wall_clock_micros
from streams.worker.app import run_app
from streams.worker.loop import CommitObserver, LedgerWorker, WorkerConfig
from streams.worker.monitoring import FreshnessTicker

log = logging.getLogger(__name__)


def run_pipeline(state: Path, bootstrap: str | None, workers: int = 1, group_id: str = "edgeledger-ledger",
                 prefix: str = "edgeledger.", idle_exit_after: float | None = None,
                 observers: list[CommitObserver] | None = None,
                 consumer_overrides: dict[str, str | int] | None = None, metrics_port: int = 9108,
                 metrics_host: str = "127.0.0.1", slo_path: Path | None = None, freshness_interval: float = 5.0,
                 ontology_path: Path | None = None) -> BatchCounts | None:
    """Run ``workers`` ledger workers in one consumer group until interrupted (or idle, for backfills).
    ``slo_path`` and ``ontology_path`` replace the bundled files, in every worker process."""
    # Read both before starting anything, so a bad file is refused before a broker or worker starts.
    slo = load_slo(slo_path) if slo_path is not None else default_slo()
    ontology = load_ontology(ontology_path) if ontology_path is not None else default_ontology()
    address, broker = resolve_bootstrap(bootstrap)
    topics = TopicSettings(prefix=prefix)
    try:
        if broker is not None:
            log.warning("no --bootstrap or EDGELEDGER_KAFKA_BOOTSTRAP: started the embedded broker at %s; its "
                        "storage is memory-only, so topics and offsets vanish when this process exits", address)
            sys.stderr.write(f"edgeledger: embedded broker at {address} (memory-only); produce with "
                             f"`edgeledger produce FILE --bootstrap {address}`\n")
        ensure_topics(address, topics)
        overrides = dict(consumer_overrides or {})
        if broker is not None:
            overrides = {**FAST_GROUP_OVERRIDES, **overrides}
        if workers == 1:
            config = WorkerConfig(state, address, group_id, topics, consumer_overrides=overrides)
            return run_monitored_worker(config, idle_exit_after, observers, metrics_port, slo, freshness_interval,
                                        ontology, metrics_host)
        run_worker_processes(state, address, workers, group_id, prefix, idle_exit_after, overrides, metrics_port,
                             [*_file_option("--slo", slo_path), *_file_option("--ontology", ontology_path),
                              "--freshness-interval", str(freshness_interval), "--metrics-host", metrics_host])
        return None
    finally:
        if broker is not None:
            broker.stop()


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
    ``shared_options`` are ``run`` options every worker takes as given (SLO, ontology, timers)."""
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
    processes = [subprocess.Popen(command) for command in commands]
    try:
        for process in processes:
            process.wait()
    except KeyboardInterrupt:
        for process in processes:
            process.send_signal(signal.SIGINT)
        for process in processes:
            process.wait(30)


def _file_option(flag: str, path: Path | None) -> list[str]:
    return [flag, str(path.resolve())] if path is not None else []
