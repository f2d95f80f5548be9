"""The transaction clock and the core's own instant conversion."""

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from processors.clock import TransactionClock, micros_of
from schemas.times import to_micros

offsets = st.integers(-14 * 60, 14 * 60).map(lambda minutes: timezone(timedelta(minutes=minutes)))


@given(st.datetimes(timezones=st.just(UTC)) | st.datetimes(timezones=offsets))
def test_the_core_converts_an_instant_as_the_schemas_do(instant: datetime) -> None:
    assert micros_of(instant) == to_micros(instant)


def test_transaction_time_strictly_increases_even_when_the_wall_clock_stands_still() -> None:
    clock = TransactionClock(wall_clock=lambda: 1_000)
    first = clock.tick(last_tx=0)
    assert first == 1_000
    assert clock.tick(last_tx=first) == 1_001
