"""The adapters on files: Debezium records (one JSON object per line) and CSV exports in; contract
events (JSON lines) and dead letters out, each to its own stream; a heartbeat after each file."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import orjson

from processors.feeds.debezium import DebeziumAdapter
from processors.feeds.output import EventWriter, FeedCounts, Origin, Output
from processors.feeds.snapshots import Export, SnapshotAdapter
from schemas.times import format_micros

FLUSH_EVERY = 1 << 16
"""Bytes gathered before a write: one system call per few hundred events, not one per event."""


class JsonLines:
    """JSON objects written one a line to a binary stream, in large writes."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self._pending: list[bytes] = []
        self._size = 0

    def write(self, document: object) -> None:
        line = orjson.dumps(document) + b"\n"
        self._pending.append(line)
        self._size += len(line)
        if self._size >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            self.stream.write(b"".join(self._pending))
            self._pending, self._size = [], 0
        self.stream.flush()


class Sinks:
    """Where an adapter's events and dead letters go."""

    def __init__(self, events: JsonLines, dead_letters: JsonLines) -> None:
        self.events = events
        self.dead_letters = dead_letters

    def write(self, outputs: Iterable[Output]) -> None:
        for kind, document in outputs:
            (self.events if kind == "event" else self.dead_letters).write(document)

    def flush(self) -> None:
        self.events.flush()
        self.dead_letters.flush()


def modified_micros(path: Path) -> int:
    """A file's modification time: when an export was taken, when nothing better is known."""
    return path.stat().st_mtime_ns // 1000


def heartbeat(counts: FeedCounts, writer: EventWriter, micros: int) -> dict[str, object]:
    """The source's heartbeat as of ``micros``, counted."""
    counts.heartbeats += 1
    text = format_micros(micros)
    assert text is not None
    return writer.heartbeat(micros, text)


def records(path: Path) -> Iterator[tuple[int, bytes]]:
    """A Debezium file's records with their line numbers; blank lines are not records."""
    with path.open("rb") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                yield number, line


def adapt_debezium_files(adapter: DebeziumAdapter, paths: list[Path], sinks: Sinks) -> FeedCounts:
    """Every file's records through ``adapter``, a heartbeat after each file (as of its newest change,
    else its modification time); rows still waiting for a row no file gave are dead-lettered at the end."""
    for path in paths:
        adapter.latest_ts_ms = None
        name = str(path)
        for number, line in records(path):
            sinks.write(adapter.take(line, Origin(name, None, number)))
        newest = adapter.latest_ts_ms
        micros = newest * 1000 if newest is not None else modified_micros(path)
        sinks.events.write(heartbeat(adapter.counts, adapter.writer, micros))
    sinks.write(adapter.finish())
    sinks.flush()
    return adapter.counts


def read_export(path: Path, exported_at: int) -> tuple[Export, io.TextIOBase]:
    """An export's header and rows (read as they are diffed), and the open file to close afterwards."""
    handle = path.open(newline="", encoding="utf-8-sig")  # a BOM from a spreadsheet is not part of the first column
    reader = csv.reader(handle)
    try:
        header = tuple(column.strip() for column in next(reader))
    except StopIteration:
        handle.close()
        raise ValueError(f"{path} is empty: an export starts with its header") from None
    except (csv.Error, UnicodeDecodeError) as error:
        handle.close()
        raise ValueError(f"{path}: cannot read the header: {error}") from None

    def rows() -> Iterator[tuple[int, list[str]]]:
        try:
            for values in reader:
                if values:
                    yield reader.line_num, values
        except (csv.Error, UnicodeDecodeError) as error:
            raise ValueError(f"{path}, line {reader.line_num}: {error}") from None

    return Export(str(path), header, rows(), exported_at), handle


def adapt_csv_files(adapter: SnapshotAdapter, previous: Path | None, current: Path, exported_at: int,
                    sinks: Sinks) -> FeedCounts:
    """The events taking ``previous`` to ``current`` (every record of ``current`` without it), then a heartbeat."""
    opened = []
    try:
        old = None
        if previous is not None:
            old, handle = read_export(previous, exported_at)
            opened.append(handle)
            _check_header(adapter, old)
        new, handle = read_export(current, exported_at)
        opened.append(handle)
        _check_header(adapter, new)
        sinks.write(adapter.diff(old, new))
    finally:
        for handle in opened:
            handle.close()
    sinks.events.write(heartbeat(adapter.counts, adapter.writer, exported_at))
    sinks.flush()
    return adapter.counts


def _check_header(adapter: SnapshotAdapter, export: Export) -> None:
    missing = adapter.missing_columns(export.header)
    if missing:
        raise ValueError(f"{export.name}: the header lacks {', '.join(missing)}, which the mapping reads "
                         f"(tables.{adapter.table})")
