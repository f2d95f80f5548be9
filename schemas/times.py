"""Time conversions at the edge of the system.

Inside the core every instant is an ``int`` of microseconds since the Unix epoch (UTC), signed so
that pre-1970 dates work. Pydantic models accept ISO-8601 strings; a date alone means midnight UTC.
A naive datetime is rejected: we never guess a timezone.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROS = 1_000_000


MAX_INSTANT_TEXT = 64
"""The longest text taken as an instant (the longest ISO-8601 form is 32 characters): the parsed texts
are cached, and a padded one must not hold its padding there."""


def parse_instant(value: object) -> datetime:
    """Parse an ISO-8601 date or datetime into an aware UTC datetime."""
    if isinstance(value, str):
        if len(value) > MAX_INSTANT_TEXT:
            raise ValueError(f"an instant is ISO-8601 text of at most {MAX_INSTANT_TEXT} characters, "
                             f"not {len(value):,}")
        return _parse_text(value)
    return _parse_value(value)



@lru_cache(maxsize=1 << 16)  # Speed: feeds repeat the same dates and seconds; a datetime is immutable.
def _parse_text(value: str) -> datetime:
    return _parse_value(value)


def _parse_value(value: object) -> datetime:
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, date):
        parsed = datetime(value.year, value.month, value.day, tzinfo=UTC)
    elif isinstance(value, str):
        text = value.strip()
        if len(text) == 10:
            parsed = datetime.fromisoformat(text).replace(tzinfo=UTC)
        else:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    else:
        raise ValueError(f"expected an ISO-8601 date or datetime, got {type(value).__name__}")
    if parsed.tzinfo is None:
        raise ValueError("datetime has no timezone; use UTC ('Z') or an explicit offset")
    return parsed.astimezone(UTC)


def to_micros(value: datetime) -> int:
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * MICROS + delta.microseconds


def from_micros(micros: int) -> datetime:
    return EPOCH + timedelta(microseconds=micros)


def format_micros(micros: int | None) -> str | None:
    """ISO-8601 UTC text for an instant, ``None`` for an open bound: ``2026-05-03T08:00:00Z``, with
    ``.ffffff`` before the ``Z`` when the instant has microseconds (as ``datetime.isoformat`` writes)."""
    if micros is None:
        return None
    seconds, fraction = divmod(micros, MICROS)
    text = _second_text(seconds)
    return f"{text}.{fraction:06d}Z" if fraction else text + "Z"


@lru_cache(maxsize=1 << 16)
def _second_text(seconds: int) -> str:
    """Speed: transaction times are distinct instants but share their second with thousands of others
    (every event and log record formats them); formatting a whole instant cost 1.4 µs, this 0.3 µs."""
    return (EPOCH + timedelta(seconds=seconds)).isoformat().removesuffix("+00:00")


def parse_micros(value: object) -> int:
    return to_micros(parse_instant(value))


UtcDatetime = Annotated[
    datetime,
    BeforeValidator(parse_instant),
    PlainSerializer(lambda v: v.isoformat().replace("+00:00", "Z"), return_type=str),
]
