"""`edgeledger adapt`: real feeds (Debezium change events, CSV exports) into contract events.

Events go to standard output as JSON lines, for ``edgeledger load -`` or ``produce -``; dead letters
to ``--dead-letters FILE`` (else to standard error, one JSON object a line); the counts, one JSON
object, last on standard error. Streaming (``adapt debezium --bootstrap``) produces both to Kafka.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated, BinaryIO

import orjson
import typer

from processors.feeds.output import FeedCounts
from schemas.bounds import TENANT_PATTERN
from schemas.feed_mapping import FeedMapping, load_mapping
from schemas.ontology import Ontology
from schemas.times import parse_micros
from streams.cli.options import BrokerTimeout, CliError, ConsumerOptions, OntologyFile, ontology_from
from streams.feeds.files import JsonLines, Sinks, modified_micros

adapt_app = typer.Typer(no_args_is_help=True, help=(
    "Turn a source's feed into contract events (JSON lines on standard output), through its mapping "
    "file (deploy/feeds/). Pipe them into `edgeledger load - --state DIR` or `edgeledger produce -`."))

MappingFile = Annotated[Path, typer.Option("--mapping", help="The source's feed mapping (YAML; deploy/feeds/).")]


def _tenant(tenant: str) -> str:
    if not re.match(TENANT_PATTERN, tenant):
        raise typer.BadParameter("a tenant is 1 to 128 letters, digits and . _ : @ + -, starting with a letter "
                                 "or digit")
    return tenant


FeedTenant = Annotated[str, typer.Option("--tenant", help="Tenant the events belong to.", callback=_tenant)]
DeadLetters = Annotated[Path | None, typer.Option(
    "--dead-letters", help="Append rows that cannot be mapped here (JSON lines: row, rule, reason). "
                           "Default: standard error.")]


def _mapping(path: Path, ontology_file: Path | None) -> tuple[FeedMapping, Ontology]:
    ontology = ontology_from(ontology_file)
    return load_mapping(path, ontology), ontology


def _report(counts: FeedCounts) -> None:
    sys.stderr.write(orjson.dumps(counts.summary()).decode() + "\n")


def _sinks(dead_letters: Path | None) -> tuple[Sinks, BinaryIO | None]:
    handle = dead_letters.open("ab") if dead_letters is not None else None
    return Sinks(JsonLines(sys.stdout.buffer), JsonLines(handle or sys.stderr.buffer)), handle


def debezium(
    mapping: MappingFile,
    tenant: FeedTenant,
    files: Annotated[list[Path] | None, typer.Argument(
        help="Files of Debezium records, one JSON object a line (the Kafka record values).")] = None,
    dead_letters: DeadLetters = None,
    ontology: OntologyFile = None,
    bootstrap: Annotated[str | None, typer.Option(
        "--bootstrap", help="Consume the Debezium topics (--topic) of this Kafka cluster instead of files, and "
                            "produce to source-changes, source-heartbeats and dead-letter.")] = None,
    topic: Annotated[list[str] | None, typer.Option(
        "--topic", help="A Debezium topic to consume (repeatable).")] = None,
    group: Annotated[str | None, typer.Option(
        "--group", help="Consumer group (its committed offsets say where to resume). Default: "
                        "edgeledger-adapt-<system>.")] = None,
    topic_prefix: Annotated[str, typer.Option("--topic-prefix", help="Prefix of the ledger's topics.")] = "edgeledger.",
    heartbeat_interval: Annotated[float, typer.Option(
        "--heartbeat-interval", min=0.1, help="Seconds between heartbeats while streaming.")] = 30.0,
    exit_when_idle: Annotated[float | None, typer.Option(
        "--exit-when-idle", help="Stop after this many seconds with nothing to read (backfills, tests).")] = None,
    consumer_option: ConsumerOptions = None,
    broker_timeout: BrokerTimeout = 60.0,
) -> None:
    """Debezium change events (c/u/d/r, with or without the schema wrapper) into change events."""
    from processors.feeds.debezium import DebeziumAdapter
    from streams.feeds.files import adapt_debezium_files

    feed, vocabulary = _mapping(mapping, ontology)
    adapter = DebeziumAdapter(feed, tenant, vocabulary)
    if bootstrap is not None:
        if files:
            raise typer.BadParameter("give files or --bootstrap, not both", param_hint="FILES")
        if not topic:
            raise typer.BadParameter("--bootstrap needs at least one --topic", param_hint="'--topic'")
        from streams.cli.options import consumer_settings, given_bootstrap
        from streams.feeds.stream import StreamSettings, adapt_stream
        from streams.kafka.liveness import BrokerUnreachable

        settings = StreamSettings(
            bootstrap=given_bootstrap(bootstrap), topics=tuple(topic), group=group or f"edgeledger-adapt-{feed.system}",
            topic_prefix=topic_prefix, heartbeat_interval=heartbeat_interval, exit_when_idle=exit_when_idle,
            consumer_overrides=consumer_settings(consumer_option), broker_timeout=broker_timeout)
        try:
            counts = adapt_stream(adapter, settings)
        except BrokerUnreachable as error:
            raise CliError(str(error)) from None
        _report(counts)
        return
    if not files:
        raise typer.BadParameter("give the Debezium files to read, or --bootstrap and --topic", param_hint="FILES")
    for path in files:
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {path}")
    sinks, handle = _sinks(dead_letters)
    try:
        counts = adapt_debezium_files(adapter, files, sinks)
    finally:
        if handle is not None:
            handle.close()
    _report(counts)


def csv(
    new: Annotated[Path, typer.Argument(help="The latest export (CSV with a header).")],
    mapping: MappingFile,
    tenant: FeedTenant,
    previous: Annotated[Path | None, typer.Option(
        "--previous", help="The export before it: only the differences are sent. Without it, each record "
                           "is sent whole, as a snapshot of itself.")] = None,
    table: Annotated[str | None, typer.Option(
        "--table", help="The mapping's table the export holds. Default: the mapping's only table.")] = None,
    exported_at: Annotated[str | None, typer.Option(
        "--exported-at", help="When the latest export was taken (ISO-8601): its changes' detected_at, and when "
                              "a record that disappeared stopped holding. Default: its modification time.")] = None,
    dead_letters: DeadLetters = None,
    ontology: OntologyFile = None,
) -> None:
    """A CSV export, diffed against the previous one, into change events."""
    from processors.feeds.snapshots import SnapshotAdapter
    from streams.feeds.files import adapt_csv_files

    feed, vocabulary = _mapping(mapping, ontology)
    if table is None:
        if len(feed.tables) != 1:
            raise typer.BadParameter(f"the mapping has several tables: name one ({', '.join(feed.tables)})",
                                     param_hint="'--table'")
        table = next(iter(feed.tables))
    elif table not in feed.tables:
        raise typer.BadParameter(f"{table!r} is not a table of the mapping ({', '.join(feed.tables)})",
                                 param_hint="'--table'")
    for path in (new, previous):
        if path is not None and not path.is_file():
            raise FileNotFoundError(f"no such file: {path}")
    taken = parse_micros(exported_at) if exported_at is not None else modified_micros(new)
    adapter = SnapshotAdapter(feed, table, tenant, vocabulary)
    sinks, handle = _sinks(dead_letters)
    try:
        counts = adapt_csv_files(adapter, previous, new, taken, sinks)
    finally:
        if handle is not None:
            handle.close()
    _report(counts)


adapt_app.command("debezium")(debezium)
adapt_app.command("csv")(csv)
