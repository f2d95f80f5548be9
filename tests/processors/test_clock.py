"""The transaction clock and the core's own instant conversion."""

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from processors.clock import TransactionClock, micros_of
from schemas.times import to_micros

offsets = st.integers(-14 * 60, 14 * 60).map(lambda minutes: timezone(timedelta(minutes=minutes)))
# A day inside datetime's range at both ends: the test moves instants to another offset.
inner = {"min_value": datetime(1, 1, 2), "max_value": datetime(9999, 12, 30)}  # noqa: DTZ001 (hypothesis bounds are naive)


@given(st.datetimes(timezones=st.just(UTC)) | st.datetimes(timezones=offsets))
def test_the_core_converts_an_instant_as_the_schemas_do(instant: datetime) -> None:
    assert micros_of(instant) == to_micros(instant)


@given(st.lists(st.datetimes(timezones=st.just(UTC), **inner) | st.datetimes(timezones=offsets, **inner), max_size=40))
def test_converting_instants_again_gives_what_the_schemas_give_even_past_the_cache_bound(
        instants: list[datetime]) -> None:
    """Equal instants in other offsets share a cache entry and a value; a full cache starts over."""
    import processors.clock as clock

    kept, clock._MICROS_KEPT = clock._MICROS_KEPT, 7
    clock._MICROS.clear()
    try:
        for instant in instants + instants[::-1] + [i.astimezone(timezone(timedelta(hours=5))) for i in instants]:
            assert micros_of(instant) == to_micros(instant)
            assert len(clock._MICROS) <= 7
    finally:
        clock._MICROS_KEPT = kept


def test_transaction_time_strictly_increases_even_when_the_wall_clock_stands_still() -> None:
    clock = TransactionClock(wall_clock=lambda: 1_000)
    first = clock.tick(last_tx=0)
    assert first == 1_000
    assert clock.tick(last_tx=first) == 1_001
