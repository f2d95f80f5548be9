"""Who states a believed piece, and what is left of it when a statement is withdrawn.

A fact's first statement is the provenance its pieces carry (record, version, event): it covers every
piece of the fact, which all lie within the interval it asserted. Every other statement is filed
(``Filing``): a later version of the same record asserting the fact again unchanged, or another record
of the same source asserting the same edge (it *joins* the fact), each over the interval it asserted.
A revocation withdraws what a version (or every version) of a record stated before it; a snapshot that
omits the edge ends what its record stated from the snapshot's effective time. A piece is believed
where some statement still holds, so withdrawing one leaves what the others state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from processors.intervals import Interval, covered_parts, cut_from, overlaps
from processors.model import EdgeVersion, Filing
from processors.ports import StatementReader

Kept = list[tuple[EdgeVersion, list[Interval]]]
"""Believed versions and the parts of each that are still stated."""


class Statement(NamedTuple):
    """One statement of (part of) a piece: ``valid`` is the part it states, None once nothing is left."""

    record: str
    version: str | None
    event_id: str
    tx: int
    valid: Interval | None
    withdrawn_at: int | None
    evidence: str


class RecordStatements:
    """One record's filings, indexed once: restatements and ends by lineage, revocations by version."""

    def __init__(self, record: str, filings: list[Filing]) -> None:
        self.record = record
        self.restated: dict[str, list[tuple[Filing, Interval]]] = {}
        self.revocations: dict[str | None, list[int]] = {}
        self.ended: dict[str, list[tuple[int, int | None]]] = {}
        for filing in filings:
            if filing.revoked:
                self.revocations.setdefault(filing.version, []).append(filing.tx)
            for lineage, valid_from, valid_to in filing.restated:
                self.restated.setdefault(lineage, []).append((filing, (valid_from, valid_to)))
            for lineage, stopped_at in filing.ended:
                self.ended.setdefault(lineage, []).append((filing.tx, stopped_at))

    def withdrawn(self, version: str | None, stated_at: int, until: int | None = None) -> int | None:
        """When a statement by ``version`` made at ``stated_at`` was withdrawn: the first revocation of
        that version, or of every version, after it (before ``until``, when given)."""
        revoked = [*self.revocations.get(version, ()), *(self.revocations.get(None, ()) if version is not None else ())]
        return min((at for at in revoked if at > stated_at and (until is None or at < until)), default=None)

    def _cut(self, lineage: str, stated_at: int, valid: Interval, until: int | None) -> Interval | None:
        """What is left of a statement made at ``stated_at`` once the record's later ends cut it."""
        for at, stopped_at in self.ended.get(lineage, ()):
            if at > stated_at and (until is None or at < until):
                if stopped_at is None or (valid[0] is not None and valid[0] >= stopped_at):
                    return None
                if valid[1] is None or valid[1] > stopped_at:
                    valid = (valid[0], stopped_at)
        return valid

    def of(self, piece: EdgeVersion, first_tx: int, until: int | None = None) -> list[Statement]:
        """This record's statements of ``piece``, oldest first: its first statement when the record made
        the fact (``first_tx``: when, the lineage's ``tx_from``), then what it filed; with ``until`` (a
        closed version's ``tx_to``), only what was filed before it."""
        whole = (piece.valid_from, piece.valid_to)
        found: list[Statement] = []
        if (piece.source_record or "") == self.record:
            first = piece.source_version
            found.append(self._statement(piece.origin, first, piece.event_id, first_tx, whole, whole, until,
                                         piece.evidence))
        for filing, stated in self.restated.get(piece.origin, ()):
            if overlaps(stated, whole) and (until is None or filing.tx < until):
                # A record that joined the fact gave its own evidence; a later version repeats the first's.
                evidence = dict(filing.joined).get(piece.origin, piece.evidence)
                found.append(self._statement(piece.origin, filing.version, filing.event_id, filing.tx, stated,
                                             whole, until, evidence))
        return found

    def _statement(self, lineage: str, version: str | None, event_id: str, tx: int, stated: Interval,
                   whole: Interval, until: int | None, evidence: str) -> Statement:
        cut = self._cut(lineage, tx, stated, until)
        valid = covered_parts(whole, [cut])[0] if cut is not None and overlaps(cut, whole) else None
        return Statement(self.record, version, event_id, tx, valid, self.withdrawn(version, tx, until), evidence)


class StatementIndex:
    """The statements of pieces, by every record that states them; each record's filings read once."""

    def __init__(self, ledger: StatementReader, tenant: str) -> None:
        self.ledger = ledger
        self.tenant = tenant
        self._records: dict[tuple[str, str], RecordStatements] = {}

    def record(self, system: str, record: str) -> RecordStatements:
        key = (system, record)
        if key not in self._records:
            self._records[key] = RecordStatements(record, self.ledger.record_filings(self.tenant, system, record))
        return self._records[key]

    def records_of(self, piece: EdgeVersion) -> list[str]:
        """The records that state or stated the piece: the one that made it, then those that joined it."""
        first = piece.source_record or ""
        return [first, *(r for r in self.ledger.lineage_joins(self.tenant, piece.origin) if r != first)]

    def of(self, piece: EdgeVersion, until: int | None = None) -> list[Statement]:
        origin = self.ledger.version(self.tenant, piece.origin)
        first_tx = origin.tx_from if origin is not None else piece.tx_from
        return [s for record in self.records_of(piece)
                for s in self.record(piece.authority, record).of(piece, first_tx, until)]


def still_stated(piece: EdgeVersion, statements: list[Statement]) -> list[Interval]:
    """The parts of ``piece`` some statement still states."""
    return covered_parts((piece.valid_from, piece.valid_to),
                         [s.valid for s in statements if s.withdrawn_at is None and s.valid is not None])


def withdrawing(pieces: list[EdgeVersion], index: StatementIndex,
                change: Callable[[Statement], Interval | None]) -> tuple[Kept, list[tuple[EdgeVersion, str]]]:
    """What withdrawing statements does to believed ``pieces``: ``change`` gives what is left of each
    statement it touches (None: nothing) and the statement itself otherwise. Returns each piece that
    loses some part, with the parts it keeps, and (piece, record) for each record whose statements of
    a piece it changed."""
    changed: Kept = []
    touched: list[tuple[EdgeVersion, str]] = []
    for piece in pieces:
        statements = index.of(piece)
        live = [s for s in statements if s.withdrawn_at is None and s.valid is not None]
        after = [s._replace(valid=change(s)) for s in live]
        records = list(dict.fromkeys(s.record for s, a in zip(live, after, strict=True) if a.valid != s.valid))
        if not records:
            continue
        touched += [(piece, record) for record in records]
        left = still_stated(piece, after)
        if left != [(piece.valid_from, piece.valid_to)]:
            changed.append((piece, left))
    return changed, touched


def withdrawn_by(record: str) -> Callable[[Statement], Interval | None]:
    """A ``withdrawing`` change: every statement of ``record`` goes."""
    return lambda statement: None if statement.record == record else statement.valid


def ended_from(record: str, stopped_at: int | None) -> Callable[[Statement], Interval | None]:
    """A ``withdrawing`` change: ``record``'s statements end at ``stopped_at`` in valid time."""
    def cut(statement: Statement) -> Interval | None:
        if statement.record != record or statement.valid is None:
            return statement.valid
        affected, remainder = cut_from(statement.valid, stopped_at)
        return remainder if affected else statement.valid
    return cut


def carried_filings(index: StatementIndex, replaced: list[EdgeVersion], lineage: str, interval: Interval,
                    tx: int) -> list[Filing]:
    """The other records' live statements of the pieces a record replaced by wording its fact otherwise,
    over the new fact's ``interval``, as filings that join the new fact's ``lineage`` (each under its
    own record, version, event and evidence)."""
    by_record: dict[tuple[str, str | None, str, str], list[tuple[str, int | None, int | None]]] = {}
    for old in replaced:
        for statement in index.of(old):
            if statement.record == (old.source_record or "") or statement.withdrawn_at is not None:
                continue
            if statement.valid is None or not overlaps(statement.valid, interval):
                continue
            part = covered_parts(interval, [statement.valid])[0]
            named = (statement.record, statement.version, statement.event_id, statement.evidence)
            by_record.setdefault(named, []).append((lineage, part[0], part[1]))
    return [Filing(replaced[0].tenant, replaced[0].authority, record, tx, version, event_id, tuple(restated),
                   joined=((lineage, evidence),))
            for (record, version, event_id, evidence), restated in by_record.items()]  # a filing has one of each
