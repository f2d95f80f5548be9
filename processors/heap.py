"""Keep the cyclic garbage collector off the state a long run keeps alive.

A batch's survivors are long-lived: the store's read caches (hundreds of thousands of entries at
100k entities), interned key parts, memoised parses. CPython's collector rescans every tracked
object on each full collection, and as those caches grow the passes cost more: on a 1M-event
``load`` they took 31 of 133 s of the loading thread. ``settle`` moves what is alive to the
permanent generation (``gc.freeze``), so collections look only at what was allocated since. The
runners settle every ``settle_every`` events (``after_event``), which also keeps a batch's pending
changes out of the young generations' passes: 0.96 s -> 0.42 s of collection on a 200k-event load.
Objects frozen this way are still freed by reference counting; only garbage in reference cycles
waits, for a full pass (unfreeze, collect, freeze again) or for ``release``. A full pass is a pause
(1.5 s over the 1.5 million objects a 1M-event load keeps alive), so a runner asks for it when it
has nothing to do (``when_idle``, once ``full_every_s`` has passed); under unbroken load ``settle``
runs it once it is ``overdue_factor`` times that late, so cyclic garbage stays bounded.

A service whose every request leaves garbage in reference cycles (the HTTP API's framework does)
would freeze that garbage with the rest, and keep it until the next full pass: 1.5 million objects
and 260 MB more after 20,000 requests. ``collect_young`` collects the young generations before each
freeze, so only what is alive is frozen (2-3 ms at a time in ``serve``, which settles every 50
requests). ``load``, the workers and the replica, whose replays leave no such garbage, do without it.

While settled, the young generation is collected after 50,000 new objects rather than CPython's
700 (``THRESHOLDS``): a batch's objects die by reference counting when it commits, and scanning them
every 700 allocations was wasted work (2.4 % of the loading thread's instructions on a 20k-event
load; 10,000 saved less, 200,000 no more). The thresholds in force before are restored on exit.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from types import TracebackType

THRESHOLDS = (50_000, 20, 100)
"""``gc.set_threshold`` while a heap is settled: young, middle and old generation."""


class SettledHeap:
    def __init__(self, full_every_s: float = 600.0, settle_every: int = 250, overdue_factor: float = 3.0,
                 clock: Callable[[], float] = time.monotonic, collect_young: bool = False) -> None:
        self.full_every_s = full_every_s
        self.collect_young = collect_young
        self.settle_every = settle_every
        self.overdue_factor = overdue_factor
        self._clock = clock
        self._last_full = clock()
        self._events = 0
        self.full_passes = 0
        self._thresholds_before: tuple[int, int, int] | None = None

    def after_event(self) -> None:
        self._events += 1
        if self._events >= self.settle_every:
            self.settle()

    def settle(self) -> None:
        """Freeze what is alive now, after a full pass if one is long overdue."""
        if self._since_full() >= self.full_every_s * self.overdue_factor:
            self._full_pass()
        elif self.collect_young:
            gc.collect(1)
        gc.freeze()
        self._events = 0

    def when_idle(self) -> None:
        """Call when there is nothing to process: runs the full pass if it is due."""
        if self._since_full() >= self.full_every_s:
            self._full_pass()
            gc.freeze()

    def _since_full(self) -> float:
        return self._clock() - self._last_full

    def _full_pass(self) -> None:
        gc.unfreeze()
        gc.collect()
        self._last_full = self._clock()
        self.full_passes += 1

    def release(self) -> None:
        """Hand everything back to the collector (its next full pass looks at it all again), with the
        thresholds it had before."""
        gc.unfreeze()
        if self._thresholds_before is not None:
            gc.set_threshold(*self._thresholds_before)
            self._thresholds_before = None

    def __enter__(self) -> SettledHeap:
        self._thresholds_before = gc.get_threshold()
        gc.set_threshold(*THRESHOLDS)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.release()
