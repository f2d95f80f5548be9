"""The commands that write or run: load, the streaming pipeline, the replica, the HTTP API, the demo."""

from __future__ import annotations

import logging
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from processors.batch import BATCH_EVENTS
from schemas.slo import slo_or_default
from streams.cli.broker_command import BrokerStorage, BrokerStorageOption
from streams.cli.load import load_into
from streams.cli.options import (
    BrokerTimeout,
    CliError,
    ConsumerOptions,
    OntologyFile,
    StateDir,
    consumer_settings,
    emit,
    given_bootstrap,
    ontology_from,
)


def load(
    files: Annotated[list[Path], typer.Argument(help="JSONL event files, one event per line; - for standard input.")],
    state: StateDir,
    simulated_clock: Annotated[
        bool, typer.Option("--simulated-clock", help="Accept `clock` events (tests and deterministic backfills).")
    ] = False,
    ontology: Annotated[Path | None, typer.Option("--ontology", help="Replace the default ontology.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Events per atomic write.")] = BATCH_EVENTS,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar (it shows only on a terminal).")] = False,
) -> None:
    """Apply event files to the ledger in-process (no broker); print one JSON summary."""
    summary = load_into(state, files, simulated_clock, ontology, batch_size, progress=not quiet)
    emit(summary)


def run(
    state: StateDir,
    bootstrap: Annotated[str | None, typer.Option(
        "--bootstrap", envvar="EDGELEDGER_KAFKA_BOOTSTRAP",
        help="Kafka bootstrap servers. Default: start the embedded broker, its data in --broker-dir.")] = None,
    broker_dir: Annotated[Path | None, typer.Option(
        "--broker-dir", help="Where the embedded broker keeps topics, records and offsets across restarts. "
                             "Default: STATE.broker beside --state.")] = None,
    broker_storage: BrokerStorageOption = BrokerStorage.disk,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Worker processes in one consumer group.")] = 1,
    group: Annotated[str, typer.Option("--group", help="Consumer group id.")] = "edgeledger-ledger",
    topic_prefix: Annotated[str, typer.Option("--topic-prefix")] = "edgeledger.",
    exit_when_idle: Annotated[float | None, typer.Option(
        "--exit-when-idle", help="Stop after this many idle seconds (backfills and tests).")] = None,
    consumer_option: ConsumerOptions = None,
    metrics_port: Annotated[int, typer.Option(
        "--metrics-port", min=0, help="Serve /metrics on PORT (0: off; worker N uses PORT+N).")] = 9108,
    metrics_host: Annotated[str, typer.Option(
        "--metrics-host", help="Interface /metrics listens on: 0.0.0.0 where Prometheus scrapes from another "
                               "host or container.")] = "127.0.0.1",
    slo: Annotated[Path | None, typer.Option("--slo", help="Source SLO file (default: the bundled one).")] = None,
    freshness_interval: Annotated[float, typer.Option(
        "--freshness-interval", min=0.1, help="Seconds between freshness checks.")] = 5.0,
    ontology: Annotated[Path | None, typer.Option("--ontology", help="Replace the default ontology.")] = None,
    broker_timeout: BrokerTimeout = 60.0,
    assignment_timeout: Annotated[float, typer.Option(
        "--assignment-timeout", min=1.0,
        help="Seconds to wait for the group's first assignment: a warning naming the group and state, then, "
             "with --exit-when-idle, exit non-zero.")] = 60.0,
    replication_factor: Annotated[int, typer.Option(
        "--replication-factor", min=1, help="Replicas of each topic `run` creates (3 on a production cluster).")] = 1,
    min_insync_replicas: Annotated[int | None, typer.Option(
        "--min-insync-replicas", min=1,
        help="min.insync.replicas of each topic `run` creates (2 with 3 replicas). Default: the cluster's.")] = None,
) -> None:
    """Run the streaming pipeline: consume the input topics, apply them, emit edge-versions and corrections."""
    from streams.kafka.broker import default_broker_dir
    from streams.worker.runner import run_pipeline

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides = consumer_settings(consumer_option)
    if min_insync_replicas is not None and min_insync_replicas > replication_factor:
        raise CliError(f"--min-insync-replicas {min_insync_replicas} exceeds --replication-factor "
                       f"{replication_factor}")
    totals = run_pipeline(state, bootstrap, workers, group, topic_prefix, exit_when_idle,
                          consumer_overrides=overrides, metrics_port=metrics_port, metrics_host=metrics_host,
                          slo_path=slo, freshness_interval=freshness_interval, ontology_path=ontology,
                          broker_dir=broker_dir if broker_dir is not None else default_broker_dir(state),
                          broker_storage=broker_storage.value, broker_timeout=broker_timeout,
                          assignment_timeout=assignment_timeout, replication_factor=replication_factor,
                          min_insync_replicas=min_insync_replicas)
    if totals is not None:
        summary = dict(asdict(totals))
        summary["balanced"] = totals.balanced()
        emit(summary)


def serve(
    state: StateDir,
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535)] = 8080,
    slo: Annotated[Path | None, typer.Option("--slo", help="Source SLOs for coverage (default: bundled).")] = None,
    ontology_file: OntologyFile = None,
    bootstrap: Annotated[str | None, typer.Option(
        "--bootstrap", envvar="EDGELEDGER_KAFKA_BOOTSTRAP",
        help="Kafka bootstrap servers: publish each cache invalidation to the cache-invalidations topic "
             "(keyed by tenant). Default: do not publish.")] = None,
    topic_prefix: Annotated[str, typer.Option(
        "--topic-prefix", help="Prefix of the topic names (used with --bootstrap).")] = "edgeledger.",
    cache_entries: Annotated[int, typer.Option(
        "--cache-entries", min=1, help="Answers the cache keeps (in its own RocksDB).")] = 50_000,
    cache_memory_entries: Annotated[int, typer.Option(
        "--cache-memory-entries", min=0,
        help="Answers kept decoded in memory; hits beyond them read RocksDB (about 3x slower at p99). "
             "Size it to the working set of questions.")] = 2_000,
) -> None:
    """HTTP API for agents (one endpoint per traversal, OpenAPI at /openapi.json) and /metrics."""
    from streams.api.cache_invalidations import PublisherSetupError
    from streams.api.http import serve as serve_http
    from streams.kafka.topics import TopicSettings

    if bootstrap is not None:
        bootstrap = given_bootstrap(bootstrap, ", or leave it out to not publish")
        try:
            TopicSettings(prefix=topic_prefix)  # checks every topic name the prefix makes
        except ValueError as error:
            raise CliError(f"--topic-prefix: {error}") from None
    slos = slo_or_default(slo)
    ontology = ontology_from(ontology_file)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        serve_http(state, host=host, port=port, slo=slos, ontology=ontology,
                   bootstrap=bootstrap, topic_prefix=topic_prefix,
                   max_cache_entries=cache_entries, memory_cache_entries=cache_memory_entries)
    except PublisherSetupError as error:
        raise CliError(f"--bootstrap: {error}") from None


def replica(
    state: StateDir,
    bootstrap: Annotated[str, typer.Option("--bootstrap", envvar="EDGELEDGER_KAFKA_BOOTSTRAP",
                                           help="Kafka bootstrap servers.")],
    topic_prefix: Annotated[str, typer.Option("--topic-prefix")] = "edgeledger.",
    exit_when_idle: Annotated[float | None, typer.Option("--exit-when-idle")] = None,
    exit_when_caught_up: Annotated[bool, typer.Option(
        "--exit-when-caught-up", help="Stop once every partition of the log is read to its end (backfills).")] = False,
    broker_timeout: BrokerTimeout = 60.0,
    consumer_option: ConsumerOptions = None,
) -> None:
    """Follow the whole edge-versions log into a read model for `serve` and the read commands; SIGTERM or
    Ctrl-C stops it after the record in hand."""
    from streams.kafka.liveness import BrokerUnreachable
    from streams.kafka.topics import TopicSettings
    from streams.log.replica import run_replica, stop_on_signals

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides = consumer_settings(consumer_option)
    try:
        applied = run_replica(state, given_bootstrap(bootstrap), TopicSettings(prefix=topic_prefix),
                              stop=stop_on_signals(), idle_exit_after=exit_when_idle,
                              until_caught_up=exit_when_caught_up, broker_timeout=broker_timeout,
                              consumer_overrides=overrides)
    except BrokerUnreachable as error:
        raise CliError(str(error)) from None
    emit({"log_records": applied})


def produce(
    files: Annotated[list[Path], typer.Argument(help="JSONL event files; - for standard input.")],
    bootstrap: Annotated[str, typer.Option("--bootstrap", envvar="EDGELEDGER_KAFKA_BOOTSTRAP",
                                           help="Kafka bootstrap servers.")],
    topic_prefix: Annotated[str, typer.Option("--topic-prefix")] = "edgeledger.",
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Send event files to the input topics (idempotent producer, keyed by tenant)."""
    from streams.kafka.produce import produce_files, produce_lines
    from streams.kafka.topics import TopicSettings, ensure_topics

    bootstrap = given_bootstrap(bootstrap)
    topics = TopicSettings(prefix=topic_prefix)
    ensure_topics(bootstrap, topics)
    if files == [Path("-")]:  # events piped in (`edgeledger adapt ... | edgeledger produce -`)
        sent = produce_lines(sys.stdin.buffer, bootstrap, topics, progress=not quiet)
    elif Path("-") in files:
        raise CliError("- (standard input) cannot be mixed with files: produce them in two runs")
    else:
        sent = produce_files(files, bootstrap, topics, progress=not quiet)
    emit({"sent": sent})


def demo(
    state: Annotated[Path, typer.Option("--state", help="Where to keep the demo ledger.")] = Path("demo-state"),
    offline: Annotated[bool, typer.Option(
        "--offline", help="Load in-process with the simulated clock instead of streaming through a broker.")] = False,
    bootstrap: Annotated[str | None, typer.Option(
        "--bootstrap", envvar="EDGELEDGER_KAFKA_BOOTSTRAP",
        help="Use this Kafka cluster instead of the embedded broker.")] = None,
) -> None:
    """Stream a CMDB + HR + policy scenario with a late correction through the pipeline; answer the questions."""
    from streams.cli.demo import run_demo

    run_demo(state, offline=offline, bootstrap=bootstrap)
