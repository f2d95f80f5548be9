"""Instants as text: the formatter writes what ``datetime.isoformat`` writes, and parsing reads it back."""

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.times import EPOCH, _parse_text, format_micros, from_micros, parse_instant, parse_micros, to_micros

# hypothesis takes naive bounds and attaches ``timezones`` to what it draws.
INSTANTS = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),  # noqa: DTZ001
                        timezones=st.just(UTC))


@given(INSTANTS)
def test_format_micros_writes_isoformat_in_utc_with_z(instant: datetime) -> None:
    micros = to_micros(instant)
    assert format_micros(micros) == instant.isoformat().replace("+00:00", "Z")
    assert parse_micros(format_micros(micros)) == micros


@given(st.integers(min_value=-10_000_000, max_value=10_000_000))
def test_instants_around_the_epoch_keep_their_sign(offset: int) -> None:
    assert from_micros(offset) - EPOCH == from_micros(offset) - from_micros(0)
    assert parse_micros(format_micros(offset)) == offset


def test_an_open_bound_has_no_text() -> None:
    assert format_micros(None) is None
    assert format_micros(0) == "1970-01-01T00:00:00Z"
    assert format_micros(-1) == "1969-12-31T23:59:59.999999Z"
    assert format_micros(1_777_795_200_000_001) == "2026-05-03T08:00:00.000001Z"


def test_a_padded_instant_is_refused_and_never_cached() -> None:
    """Parsed texts are cached; an instant's padding must not stay there (a reader sent 60 KB of it)."""
    cached = _parse_text.cache_info().currsize
    with pytest.raises(ValueError, match="at most 64 characters"):
        parse_instant("2026-04-22" + " " * 100)
    assert _parse_text.cache_info().currsize == cached
