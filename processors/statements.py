"""Which versions of a source record state a believed piece, and what is left of it when one is revoked.

A fact's first statement is the provenance its pieces carry (record, version, event): it covers every
piece of the fact, which all lie within the interval it asserted. A later version of the same record
that asserts the fact again, unchanged, files a restatement (``Filing.restated``) of the fact's lineage
over the interval it asserted; a revocation of a version (``Filing.revoked``) withdraws every statement
that version made before it. A piece is believed where some statement not withdrawn covers it, so
revoking one version of a record leaves what its other versions state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from processors.intervals import Interval, covered_parts, overlaps
from processors.model import EdgeVersion, Filing

_WHOLE: Interval = (None, None)


class Statement(NamedTuple):
    """One version of the record stating (part of) a piece: ``valid`` is the part it states."""

    version: str | None
    event_id: str
    tx: int
    valid: Interval
    withdrawn_at: int | None


def statements_of(piece: EdgeVersion, first_tx: int, filings: list[Filing]) -> list[Statement]:
    """Every statement of ``piece`` by its record, oldest first, with when each was withdrawn (if it was):
    ``first_tx`` is when the fact was first stated (its lineage's ``tx_from``), ``filings`` the record's."""
    whole = (piece.valid_from, piece.valid_to)
    revocations = [(filing.version, filing.tx) for filing in filings if filing.revoked]

    def withdrawn(version: str | None, stated_at: int) -> int | None:
        return min((at for revoked, at in revocations if revoked == version and at > stated_at), default=None)

    first = piece.source_version
    found = [Statement(first, piece.event_id, first_tx, whole, withdrawn(first, first_tx))]
    for filing in filings:
        for lineage, valid_from, valid_to in filing.restated:
            if lineage == piece.origin and overlaps((valid_from, valid_to), whole):
                part = covered_parts(whole, [(valid_from, valid_to)])[0]
                found.append(Statement(filing.version, filing.event_id, filing.tx, part,
                                       withdrawn(filing.version, filing.tx)))
    return found


def left_after_revoking(piece: EdgeVersion, first_tx: int, filings: list[Filing], version: str | None,
                        tx: int) -> list[Interval] | None:
    """The parts of ``piece`` still stated once ``version`` of its record is revoked at ``tx``; None when
    that version states no part of it (the piece is not the revocation's business)."""
    statements = statements_of(piece, first_tx, [*filings, Filing(piece.tenant, piece.authority,
                                                                 piece.source_record or "", tx, version, "",
                                                                 revoked=True)])
    if not any(s.version == version and s.withdrawn_at == tx for s in statements):
        return None
    return covered_parts((piece.valid_from, piece.valid_to), [s.valid for s in statements if s.withdrawn_at is None])


Kept = list[tuple[EdgeVersion, list[Interval]]]
"""Believed versions and the parts of each that are still stated."""


def revoke_version(pieces: list[EdgeVersion], version: str | None, tx: int, filings_of: Callable[[str], list[Filing]],
                   first_tx_of: Callable[[EdgeVersion], int]) -> tuple[Kept, list[str]]:
    """What revoking ``version`` at ``tx`` does to the believed ``pieces`` of a source: (each piece that
    loses some part, with the parts it keeps; the records that version stated something of, for which
    the revocation is filed). ``filings_of`` reads a record's filings, ``first_tx_of`` a piece's lineage's
    first ``tx_from``."""
    changed: Kept = []
    records: list[str] = []
    for piece in pieces:
        record = piece.source_record or ""
        left = left_after_revoking(piece, first_tx_of(piece), filings_of(record), version, tx)
        if left is None:
            continue
        if record not in records:
            records.append(record)
        if left != [(piece.valid_from, piece.valid_to)]:
            changed.append((piece, left))
    return changed, records
