"""The commands that write or run: load, the streaming pipeline, the replica, the HTTP API, the demo."""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from processors.batch import BATCH_EVENTS
from schemas.slo import slo_or_default
from streams.cli.load import load_into
from streams.cli.options import CliError, OntologyFile, StateDir, emit, given_bootstrap, ontology_from


def load(
    files: Annotated[list[Path], typer.Argument(help="JSONL event files, one event per line.")],
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
        help="Kafka bootstrap servers. Default: start the embedded (memory-only) broker.")] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Worker processes in one consumer group.")] = 1,
    group: Annotated[str, typer.Option("--group", help="Consumer group id.")] = "edgeledger-ledger",
    topic_prefix: Annotated[str, typer.Option("--topic-prefix")] = "edgeledger.",
    exit_when_idle: Annotated[float | None, typer.Option(
        "--exit-when-idle", help="Stop after this many idle seconds (backfills and tests).")] = None,
    consumer_option: Annotated[list[str] | None, typer.Option(
        "--consumer-option", help="librdkafka consumer setting KEY=VALUE (repeatable).")] = None,
    metrics_port: Annotated[int, typer.Option(
        "--metrics-port", min=0, help="Serve /metrics on PORT (0: off; worker N uses PORT+N).")] = 9108,
    metrics_host: Annotated[str, typer.Option(
        "--metrics-host", help="Interface /metrics listens on: 0.0.0.0 where Prometheus scrapes from another "
                               "host or container.")] = "127.0.0.1",
    slo: Annotated[Path | None, typer.Option("--slo", help="Source SLO file (default: the bundled one).")] = None,
    freshness_interval: Annotated[float, typer.Option(
        "--freshness-interval", min=0.1, help="Seconds between freshness checks.")] = 5.0,
    ontology: Annotated[Path | None, typer.Option("--ontology", help="Replace the default ontology.")] = None,
) -> None:
    """Run the streaming pipeline: consume the input topics, apply them, emit edge-versions and corrections."""
    from streams.worker.runner import run_pipeline

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides = {}
    for option in consumer_option or []:
        key, separator, value = option.partition("=")
        if not separator:
            raise CliError(f"--consumer-option {option!r}: expected KEY=VALUE")
        overrides[key.strip()] = value.strip()

    totals = run_pipeline(state, bootstrap, workers, group, topic_prefix, exit_when_idle,
                          consumer_overrides=overrides, metrics_port=metrics_port, metrics_host=metrics_host,
                          slo_path=slo, freshness_interval=freshness_interval, ontology_path=ontology)
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
) -> None:
    """Follow the whole edge-versions log into a read model for `serve` and the read commands."""
    from streams.kafka.topics import TopicSettings
    from streams.log.replica import run_replica

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    emit({"log_records": run_replica(state, given_bootstrap(bootstrap), TopicSettings(prefix=topic_prefix),
                                      idle_exit_after=exit_when_idle, until_caught_up=exit_when_caught_up)})


def produce(
    files: Annotated[list[Path], typer.Argument(help="JSONL event files.")],
    bootstrap: Annotated[str, typer.Option("--bootstrap", envvar="EDGELEDGER_KAFKA_BOOTSTRAP",
                                           help="Kafka bootstrap servers.")],
    topic_prefix: Annotated[str, typer.Option("--topic-prefix")] = "edgeledger.",
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Send event files to the input topics (idempotent producer, keyed by tenant)."""
    from streams.kafka.produce import produce_files
    from streams.kafka.topics import TopicSettings, ensure_topics

    bootstrap = given_bootstrap(bootstrap)
    topics = TopicSettings(prefix=topic_prefix)
    ensure_topics(bootstrap, topics)
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
