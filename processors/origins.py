"""The origins of a believed version: every statement that states it, and valid-time coverage.

A statement is one assertion of a source record at a version (``Origin``). A version records each
statement over the stretch of it that the statement states, with the transaction time the ledger
held that: an entry is ended (``tx_to`` set), never edited, so a read as of a past ``known_at`` sees
the origins of its time. A version is believed while its live entries cover it; what they leave
uncovered is no longer stated (``processors.versioning`` closes it and appends the rest).

A version's statements are kept apart from it (``LedgerReader.statements``), and only once they differ
from the one it was appended for over all of it (``explicit`` empty): most versions have one origin and
cost nothing more, and a restatement adds a statement without changing a version.
"""

from __future__ import annotations

from typing import Final

from processors.intervals import Interval, cut_from
from processors.model import EdgeVersion, Origin

_LOW: Final = -(1 << 64)
"""An unknown start (``None``) as a number below every instant, to sort and compare bounds."""
_HIGH: Final = 1 << 64
"""No known end (``None``) as a number above every instant."""


Statements = tuple[Origin, ...]
"""A version's statements, in the order they were recorded, the one it was appended for first: entry
``i`` is stored as row ``i``."""
Stored = tuple[Origin | None, ...]
"""``Statements`` as stored (``LedgerReader.statements``): the first is ``None`` while it is the one the
version was appended for, as it was, which needs no row."""


def own_statement(version: EdgeVersion) -> Origin:
    """The statement ``version`` was appended for, over all of it since it was appended."""
    return origin_of(version.origin, version.source_record, version.source_version, version.event_id,
                     version.evidence, version.confidence, version.detected_at, version.valid_from,
                     version.valid_to, version.tx_from, None)


def origins_of(version: EdgeVersion, stored: Stored) -> Statements:
    """Every statement of ``version``, ended ones included: its ``stored`` statements, or else the one it
    was appended for."""
    if not stored:
        return (own_statement(version),)
    first = stored[0]
    if first is None:
        return (own_statement(version), *[origin for origin in stored[1:] if origin is not None])
    return tuple([origin for origin in stored if origin is not None])


def explicit_of(version: EdgeVersion, stored: Stored) -> Statements:
    """``version``'s statements if it has any stored (``origins_of``), else ``()``."""
    return origins_of(version, stored) if stored else ()


def origin_of(origin: str, record: str | None, version: str | None, event_id: str, evidence: str,
              confidence: float, detected_at: int | None, valid_from: int | None, valid_to: int | None,
              tx_from: int, tx_to: int | None) -> Origin:
    """An ``Origin``. Speed: built as a tuple, as ``state.codec`` does (the NamedTuple's own ``__new__``
    runs interpreted even in the compiled core)."""
    return tuple.__new__(Origin, (origin, record, version, event_id, evidence, confidence, detected_at,  # type: ignore[arg-type]
                                  valid_from, valid_to, tx_from, tx_to))


def live(origins: Statements | list[Origin]) -> list[Origin]:
    """The statements that still state the version."""
    return [origin for origin in origins if origin.tx_to is None]


def states_from(version: EdgeVersion, stored: Stored, record: str | None, source_version: str | None) -> bool:
    """Whether a live statement of ``version`` comes from ``record`` at ``source_version`` (``None``: any)."""
    if not stored:
        return (record is None or version.source_record == record) and (
            source_version is None or version.source_version == source_version)
    return any(origin.tx_to is None and (record is None or origin.record == record)
               and (source_version is None or origin.version == source_version)
               for origin in origins_of(version, stored))


def stating_records(version: EdgeVersion, explicit: Statements) -> set[str | None]:
    """The source records of ``version``'s live statements."""
    if not explicit:
        return {version.source_record}
    return {origin.record for origin in explicit if origin.tx_to is None}


def known_origins(origins: Statements, known_at: int) -> list[Origin]:
    """``origins`` as the ledger held them at ``known_at``: those recorded by then, an ending recorded later
    not yet happened."""
    return [origin if origin.tx_to is None or origin.tx_to <= known_at else origin._replace(tx_to=None)
            for origin in origins if origin.tx_from <= known_at]


def span(origin: Origin) -> Interval:
    return (origin.valid_from, origin.valid_to)


def clipped(origins: list[Origin], stretch: Interval, tx: int) -> list[Origin]:
    """The live ``origins`` over ``stretch`` (those that state some of it), as entries of a piece
    appended at ``tx``."""
    kept: list[Origin] = []
    for origin in origins:
        part = intersection(span(origin), stretch)
        if part is not None:
            kept.append(origin_of(origin.origin, origin.record, origin.version, origin.event_id, origin.evidence,
                                  origin.confidence, origin.detected_at, part[0], part[1], tx, None))
    return kept


def ended(origin: Origin, tx: int) -> Origin:
    """``origin`` no longer stating its version from ``tx``. Never dropped, even if recorded at ``tx``: a
    statement keeps its position, which is its row."""
    return origin_of(origin.origin, origin.record, origin.version, origin.event_id, origin.evidence,
                     origin.confidence, origin.detected_at, origin.valid_from, origin.valid_to, origin.tx_from, tx)


def without(origins: Statements, tx: int, origin: str | None, record: str | None,
            version: str | None) -> list[Origin] | None:
    """``origins`` with the live statement ``origin``, or else those from ``record`` at ``version``
    (``None``: any), ended at ``tx``; ``None`` when none of them is there."""
    kept: list[Origin] = []
    changed = False
    for stated in origins:
        if stated.tx_to is None and (stated.origin == origin if origin is not None else (
                (record is None or stated.record == record) and (version is None or stated.version == version))):
            changed = True
            kept.append(ended(stated, tx))
        else:
            kept.append(stated)
    return kept if changed else None


def cut_from_on(origins: Statements, record: str, stopped_at: int | None, tx: int) -> list[Origin] | None:
    """``origins`` with ``record``'s live statements ending at ``stopped_at`` in valid time, from ``tx``:
    each affected one ended, and what it states before ``stopped_at`` a statement of its own from ``tx``,
    added after the others (a statement keeps its position); ``None`` when none is affected."""
    kept: list[Origin] = []
    added: list[Origin] = []
    changed = False
    for stated in origins:
        if stated.tx_to is None and stated.record == record:
            affected, before = cut_from(span(stated), stopped_at)
            if affected:
                changed = True
                kept.append(ended(stated, tx))
                if before is not None:
                    added.append(origin_of(stated.origin, stated.record, stated.version, stated.event_id,
                                           stated.evidence, stated.confidence, stated.detected_at, before[0],
                                           before[1], tx, None))
                continue
        kept.append(stated)
    return kept + added if changed else None


# -- coverage in valid time ------------------------------------------------------------------------------------
def _low(start: int | None) -> int:
    return _LOW if start is None else start


def _high(end: int | None) -> int:
    return _HIGH if end is None else end


def _interval(low: int, high: int) -> Interval:
    return (None if low == _LOW else low, None if high == _HIGH else high)


def intersection(a: Interval, b: Interval) -> Interval | None:
    """Where ``a`` and ``b`` overlap, or None."""
    low, high = max(_low(a[0]), _low(b[0])), min(_high(a[1]), _high(b[1]))
    return _interval(low, high) if low < high else None


def _merged(whole: Interval, parts: list[Interval]) -> list[tuple[int, int]]:
    """The parts within ``whole``, overlapping and touching ones merged, in order, as number pairs."""
    low, high = _low(whole[0]), _high(whole[1])
    merged: list[tuple[int, int]] = []
    for start, end in sorted((max(_low(a), low), min(_high(b), high)) for a, b in parts):
        if start >= end:
            continue
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def covered(whole: Interval, parts: list[Interval]) -> list[Interval]:
    """The maximal stretches of ``whole`` that ``parts`` cover, in order."""
    return [_interval(start, end) for start, end in _merged(whole, parts)]


def uncovered(whole: Interval, parts: list[Interval]) -> list[Interval]:
    """The stretches of ``whole`` that ``parts`` leave uncovered, in order."""
    gaps: list[Interval] = []
    at, high = _low(whole[0]), _high(whole[1])
    for start, end in _merged(whole, parts):
        if start > at:
            gaps.append(_interval(at, start))
        at = end
    if at < high:
        gaps.append(_interval(at, high))
    return gaps
