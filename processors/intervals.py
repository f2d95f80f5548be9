"""Half-open valid-time intervals ``[start, end)`` where ``None`` is an open bound."""

from __future__ import annotations

Interval = tuple[int | None, int | None]


def overlaps(a: Interval, b: Interval) -> bool:
    a_start, a_end = a
    b_start, b_end = b
    starts_before_b_ends = a_start is None or b_end is None or a_start < b_end
    ends_after_b_starts = a_end is None or b_start is None or b_start < a_end
    return starts_before_b_ends and ends_after_b_starts


def subtract(whole: Interval, cut: Interval) -> list[Interval]:
    """The parts of ``whole`` outside ``cut``: at most one on each side."""
    if not overlaps(whole, cut):
        return [whole]
    start, end = whole
    cut_start, cut_end = cut
    remainders: list[Interval] = []
    if cut_start is not None and (start is None or start < cut_start):
        remainders.append((start, cut_start))
    if cut_end is not None and (end is None or cut_end < end):
        remainders.append((cut_end, end))
    return remainders


def cut_from(whole: Interval, stopped_at: int | None) -> tuple[bool, Interval | None]:
    """Retract ``whole`` from ``stopped_at`` on: (affected, what remains before it)."""
    start, end = whole
    if stopped_at is None:
        return True, None
    if end is not None and end <= stopped_at:
        return False, whole
    if start is not None and start >= stopped_at:
        return True, None
    return True, (start, stopped_at)


def covered_parts(whole: Interval, cover: list[Interval]) -> list[Interval]:
    """The parts of ``whole`` inside the union of ``cover``, in order, adjacent parts joined."""
    lost = [whole]
    for piece in cover:
        lost = [rest for part in lost for rest in subtract(part, piece)]
    kept = [whole]
    for part in lost:
        kept = [rest for piece in kept for rest in subtract(piece, part)]
    return kept
