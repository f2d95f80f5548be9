"""Rows waiting for a row they refer to, in the order they arrived.

A ``cmdb_rel_ci`` row can arrive before the ``cmdb_ci`` rows it links (another topic, another
partition), and without them the adapter does not know their entity types. Such a row waits here
until the directory learns the row it needs. Rows of the same record wait behind it, so a record's
changes still apply in their order. A streaming adapter commits its input offsets only up to the
oldest waiting row (``oldest``), so a restart reads the waiting rows again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Generic, TypeVar

Item = TypeVar("Item")
Key = tuple[str, str]
"""(table, key) of a row."""


class Holding(Generic[Item]):
    def __init__(self) -> None:
        self._queues: dict[Key, deque[Item]] = {}
        self._waiting: dict[Key, set[Key]] = {}
        """Referenced row -> records whose first waiting row needs it."""

    def __len__(self) -> int:
        return sum(len(queue) for queue in self._queues.values())

    def blocked(self, record: Key) -> bool:
        """Whether rows of ``record`` already wait: a newer one must wait behind them."""
        return record in self._queues

    def hold(self, record: Key, item: Item, needs: Key | None) -> None:
        """``item`` waits; ``needs`` is the row it refers to (``None`` when it waits behind its record)."""
        queue = self._queues.get(record)
        if queue is None:
            queue = self._queues[record] = deque()
        queue.append(item)
        if needs is not None:
            self._waiting.setdefault(needs, set()).add(record)

    def ready(self, referenced: Key) -> list[Key]:
        """The records whose first waiting row needed ``referenced``, in no particular order."""
        return sorted(self._waiting.pop(referenced, ()))

    def first(self, record: Key) -> Item | None:
        queue = self._queues.get(record)
        return queue[0] if queue else None

    def done(self, record: Key) -> None:
        """The first waiting row of ``record`` is settled."""
        queue = self._queues[record]
        queue.popleft()
        if not queue:
            del self._queues[record]

    def wait_again(self, record: Key, needs: Key) -> None:
        """The first waiting row of ``record`` now needs ``needs``."""
        self._waiting.setdefault(needs, set()).add(record)

    def drain(self) -> Iterator[Item]:
        """Every waiting row, each record's in order; the holding is empty afterwards."""
        queues, self._queues, self._waiting = self._queues, {}, {}
        for queue in queues.values():
            yield from queue

    def items(self) -> Iterator[Item]:
        for queue in self._queues.values():
            yield from queue
