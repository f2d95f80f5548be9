"""Transaction time comes only from our clock, injected, never from the source or ``now()`` in the core."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


_MICROS: Final[dict[datetime, int]] = {}
"""Instants converted before. Speed: the schemas parse each distinct text once (``schemas.times``
keeps the datetimes it made), so feeds hand the core the same datetime objects again and again, whose
hash is then kept in the object: a hit took 49 against 219 ns for the subtraction and three
attribute reads (timed from Python; -1.25 % instructions over the first 20k events of a load)."""
_MICROS_KEPT = 1 << 16


def micros_of(instant: datetime) -> int:
    """``schemas.times.to_micros``, compiled with the core (the schemas stay interpreted): the change
    path converts about three instants an event, and each interpreted call cost some 1,500 instructions."""
    micros = _MICROS.get(instant)
    if micros is None:
        delta = instant - _EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        if len(_MICROS) >= _MICROS_KEPT:
            _MICROS.clear()
        _MICROS[instant] = micros
    return micros


@dataclass
class TransactionClock:
    """Strictly increasing transaction time: ``max(wall clock, last + 1 µs)`` (a hybrid logical clock)."""

    wall_clock: Callable[[], int]
    simulated: bool = False
    _simulated_now: int | None = None

    def tick(self, last_tx: int) -> int:
        now = self._simulated_now if self._simulated_now is not None else self.wall_clock()
        return max(now, last_tx + 1)

    def set_simulated(self, now: int) -> None:
        if not self.simulated:
            raise ValueError("clock events are accepted only by `edgeledger load --simulated-clock`")
        self._simulated_now = now
