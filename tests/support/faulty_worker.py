"""A ledger worker that fails where a test says: ``LedgerWorker(..., faults=...)`` with the faults below.

``Crashes`` ends the process as kill -9 would (``os._exit``), for tests that need a process to die
or to be paused (SIGSTOP) from outside; ``python -m tests.support.faulty_worker --state S
--bootstrap B --group G --topic-prefix P --crash-after-commit 1`` runs one and prints its summary as
`edgeledger run` does. Without a fault option it is the worker `edgeledger run` hosts, bare: no
faust app, whose own group join holds every start and stop up by seconds on the embedded broker.
A crash is always a process's end: raised in the test's own process instead, it would unwind through
the worker's ``close``, which leaves the group and flushes, as kill -9 never does.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from processors.outbox import OutRecord, is_marker
from schemas.topics import Topic
from streams.kafka.topics import TopicSettings
from streams.worker.faults import Faults
from streams.worker.loop import CRASH_EXIT_CODE, LedgerWorker, WorkerConfig

log = logging.getLogger(__name__)


def without_first_version(records: list[OutRecord]) -> list[OutRecord]:
    """A send that lost a record: all but the first edge version record."""
    for index, record in enumerate(records):
        if record.topic == Topic.EDGE_VERSIONS and record.value.startswith(b'{"kind":"edge_version"'):
            return records[:index] + records[index + 1:]
    return records


def through_first_marker(records: list[OutRecord]) -> list[OutRecord]:
    """A send cut short: the records up to and including the first batch marker on the log (all of
    them if there is none). One tenant's part of the batch is whole on the log, the others' are not."""
    for index, record in enumerate(records):
        if record.topic == Topic.EDGE_VERSIONS and is_marker(record.value):
            return records[:index + 1]
    return records


@dataclass
class Hold:
    """Holds batch ``batch`` until the file ``until`` exists (a test pauses the process there)."""

    batch: int
    until: Path

    @classmethod
    def parse(cls, text: str) -> Hold:
        batch, _, until = text.partition(":")
        return cls(int(batch), Path(until))

    def __call__(self, batch: int) -> None:
        if batch != self.batch:
            return
        log.warning("the worker holds batch %d until %s exists (a fault)", batch, self.until)
        while not self.until.exists():
            time.sleep(0.05)


@dataclass
class Crashes(Faults):
    """Dies at the chosen point of the chosen batch (0: never), or in its first rebuild."""

    after_commit_of: int = 0
    """Dies once batch N is committed, before it is sent."""
    mid_send_of: int = 0
    """Sends batch N through its first tenant's marker (``through_first_marker``), then dies."""
    lose_record_of: int = 0
    """Sends batch N without its first edge version record (a delivery that timed out), then dies:
    a worker stops on a failed delivery."""
    after_send_of: int = 0
    """Dies once batch N is sent, before the group commits its offsets."""
    in_rebuild: bool = False
    """Dies as its first rebuild of a partition from the log begins."""
    rebuild_record_delay: float = 0.0
    """Seconds added to the replay of each log record in a rebuild (a long log)."""
    hold_before_send: Hold | None = None
    """Holds a batch committed to the state, not yet checked or sent (as a long stall would)."""
    hold_after_check: Hold | None = None
    """Holds a batch the group has confirmed the worker a member for, right before it is sent."""

    def crash(self) -> None:
        os._exit(CRASH_EXIT_CODE)

    def after_commit(self, batch: int) -> None:
        if batch == self.after_commit_of:
            self.crash()
        if self.hold_before_send is not None:
            self.hold_before_send(batch)

    def after_membership_check(self, batch: int) -> None:
        if self.hold_after_check is not None:
            self.hold_after_check(batch)

    def to_send(self, batch: int, records: list[OutRecord]) -> list[OutRecord]:
        if batch == self.mid_send_of:
            return through_first_marker(records)
        if batch == self.lose_record_of:
            return without_first_version(records)
        return records

    def after_send(self, batch: int) -> None:
        if batch in (self.mid_send_of, self.lose_record_of, self.after_send_of):
            self.crash()

    def rebuild_starting(self, partition: int) -> None:
        if self.in_rebuild:
            self.crash()

    def rebuild_record_replayed(self, partition: int) -> None:
        if self.rebuild_record_delay:
            time.sleep(self.rebuild_record_delay)


def fault_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--crash-after-commit", type=int, default=0, metavar="N")
    parser.add_argument("--crash-mid-send", type=int, default=0, metavar="N")
    parser.add_argument("--lose-record", type=int, default=0, metavar="N")
    parser.add_argument("--crash-after-send", type=int, default=0, metavar="N")
    parser.add_argument("--crash-in-rebuild", action="store_true")
    parser.add_argument("--slow-rebuild", type=float, default=0.0, metavar="SECONDS", help="per log record")
    parser.add_argument("--hold-before-send", type=Hold.parse, metavar="N:PATH")
    parser.add_argument("--hold-after-check", type=Hold.parse, metavar="N:PATH")


def faults_from(args: argparse.Namespace) -> Crashes:
    return Crashes(args.crash_after_commit, args.crash_mid_send, args.lose_record, args.crash_after_send,
                   args.crash_in_rebuild, args.slow_rebuild, args.hold_before_send, args.hold_after_check)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.faulty_worker")
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic-prefix", required=True)
    parser.add_argument("--exit-when-idle", type=float)
    parser.add_argument("--consumer-option", action="append", default=[], metavar="KEY=VALUE")
    fault_options(parser)
    args = parser.parse_args(argv)

    from streams.cli.options import emit

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides: dict[str, str | int] = dict(option.split("=", 1) for option in args.consumer_option)
    config = WorkerConfig(args.state, args.bootstrap, args.group, TopicSettings(prefix=args.topic_prefix),
                          consumer_overrides=overrides)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    totals = LedgerWorker(config, faults=faults_from(args)).run(stop, args.exit_when_idle)
    emit({**asdict(totals), "balanced": totals.balanced()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
