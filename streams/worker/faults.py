"""Where a test may make a worker fail: the points of its batch and rebuild protocol a fault can hit.

``LedgerWorker(..., faults=...)`` calls these methods at the named points; the default does nothing.
A test's subclass dies there (as from kill -9), holds the worker (as a long stall would), cuts a send
short or slows a rebuild (``tests.support.faulty_worker``). Production code reads no failpoint of its own.
"""

from __future__ import annotations

from processors.outbox import OutRecord


class Faults:
    """No faults: every point passes."""

    def after_commit(self, batch: int) -> None:
        """Batch ``batch`` (counted from 1) is committed to the state and its outbox, not yet checked or sent."""

    def after_membership_check(self, batch: int) -> None:
        """The group has confirmed the worker a member, right before the batch is sent: the window
        the log's fences close."""

    def to_send(self, batch: int, records: list[OutRecord]) -> list[OutRecord]:
        """What of the batch's records goes out: all of them, unless a fault loses some."""
        return records

    def after_send(self, batch: int) -> None:
        """The batch is delivered, its outbox not yet trimmed nor its offsets committed to the group."""

    def rebuild_starting(self, partition: int) -> None:
        """A rebuild of ``partition`` from the log begins (its rebuild mark and claim are written)."""

    def rebuild_record_replayed(self, partition: int) -> None:
        """One log record of ``partition``'s rebuild was replayed: a delay here stands in for a long log."""


NO_FAULTS = Faults()
