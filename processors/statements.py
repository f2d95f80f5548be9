"""Which versions of a source record state a believed piece, and what is left of it when one is revoked.

A fact's first statement is the provenance its pieces carry (record, version, event): it covers every
piece of the fact, which all lie within the interval it asserted. A later version of the same record
that asserts the fact again unchanged files a restatement (``Filing.restated``) of the fact's lineage
over the interval it asserted; a revocation of a version (``Filing.revoked``) withdraws every statement
that version made before it. A piece is believed where some statement not withdrawn covers it, so
revoking one version of a record leaves what its other versions state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from processors.intervals import Interval, covered_parts, overlaps
from processors.model import EdgeVersion, Filing

Kept = list[tuple[EdgeVersion, list[Interval]]]
"""Believed versions and the parts of each that are still stated."""


class Statement(NamedTuple):
    """One version of the record stating (part of) a piece: ``valid`` is the part it states."""

    version: str | None
    event_id: str
    tx: int
    valid: Interval
    withdrawn_at: int | None


class RecordStatements:
    """One record's filings, indexed once: its restatements by lineage, its revocations by version."""

    def __init__(self, filings: list[Filing]) -> None:
        self.restated: dict[str, list[tuple[Filing, Interval]]] = {}
        self.revocations: dict[str | None, list[int]] = {}
        for filing in filings:
            if filing.revoked:
                self.revocations.setdefault(filing.version, []).append(filing.tx)
            for lineage, valid_from, valid_to in filing.restated:
                self.restated.setdefault(lineage, []).append((filing, (valid_from, valid_to)))

    def withdrawn(self, version: str | None, stated_at: int, until: int | None = None) -> int | None:
        """When a statement ``version`` made at ``stated_at`` was withdrawn: its first revocation after
        (before ``until``, when given)."""
        return min((at for at in self.revocations.get(version, ())
                    if at > stated_at and (until is None or at < until)), default=None)

    def of(self, piece: EdgeVersion, first_tx: int, until: int | None = None) -> list[Statement]:
        """Every statement of ``piece`` by its record, oldest first, with when each was withdrawn:
        ``first_tx`` is when the fact was first stated (its lineage's ``tx_from``); with ``until`` (a
        closed version's ``tx_to``), only what was filed before it."""
        whole = (piece.valid_from, piece.valid_to)
        first = piece.source_version
        found = [Statement(first, piece.event_id, first_tx, whole, self.withdrawn(first, first_tx, until))]
        for filing, stated in self.restated.get(piece.origin, ()):
            if overlaps(stated, whole) and (until is None or filing.tx < until):
                found.append(Statement(filing.version, filing.event_id, filing.tx, covered_parts(whole, [stated])[0],
                                       self.withdrawn(filing.version, filing.tx, until)))
        return found


def revoke_version(pieces: list[EdgeVersion], version: str | None, tx: int, filings_of: Callable[[str], list[Filing]],
                   first_tx_of: Callable[[EdgeVersion], int]) -> tuple[Kept, list[str]]:
    """What revoking ``version`` at ``tx`` does to the believed ``pieces`` of a source: (each piece that
    loses some part, with the parts it keeps; the records that version stated something of, for which
    the revocation is filed). ``filings_of`` reads a record's filings, ``first_tx_of`` a piece's lineage's
    first ``tx_from``."""
    indexed: dict[str, RecordStatements] = {}
    changed: Kept = []
    records: list[str] = []
    for piece in pieces:
        record = piece.source_record or ""
        if record not in indexed:
            revocation = Filing(piece.tenant, piece.authority, record, tx, version, "", revoked=True)
            indexed[record] = RecordStatements([*filings_of(record), revocation])
        statements = indexed[record].of(piece, first_tx_of(piece))
        if not any(s.version == version and s.withdrawn_at == tx for s in statements):
            continue  # that version states no part of it, or stated it only before an earlier revocation
        if record not in records:
            records.append(record)
        whole = (piece.valid_from, piece.valid_to)
        left = covered_parts(whole, [s.valid for s in statements if s.withdrawn_at is None])
        if left != [whole]:
            changed.append((piece, left))
    return changed, records
