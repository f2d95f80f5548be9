"""Which stored offsets still point where they were taken: the rule a worker and a replica apply
before they resume a partition after the offset their state stored.

An offset means something only in the topic it was read from. A broker started anew, or a topic
deleted and made again under the same name, has a topic of that name whose offsets restart at 0:
resuming there at a stored offset silently skips every record before it. So each stored offset is
kept with the identity of its topic (the cluster's id and the topic's id), and an offset is trusted
only while the topic still has that identity and, where the cluster reports a partition's end
exactly, the offset does not lie beyond it.
An untrusted partition is read from its start; the ledger's event-id de-duplication drops what the
state applied already.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Position = tuple[str, int]
"""(topic, partition number)."""


@dataclass(frozen=True)
class Untrusted:
    """A stored offset that is not resumed from, and why."""

    position: Position
    offset: int
    """The last offset the state applied there."""
    reason: str

    def describe(self) -> str:
        topic, partition = self.position
        return f"{topic}[{partition}] offset {self.offset}: {self.reason}"


def untrusted_offsets(positions: Iterable[Position], applied: Mapping[Position, int],
                      recorded: Mapping[Position, str], current: Mapping[str, str | None],
                      ends: Mapping[Position, int] | None = None) -> list[Untrusted]:
    """The ``positions`` whose applied offset must not be resumed from.

    ``applied``: the last offset applied per position (-1 or absent: none, nothing to trust);
    ``recorded``: the topic identity stored with it; ``current``: each topic's identity now (None:
    the broker cannot tell); ``ends``: where known exactly, each partition's end now (the offset its
    next record gets). An identity recorded and different from the current one, or an offset at or
    past the end, is untrusted; a position without a recorded identity is judged by its end alone."""
    untrusted = []
    for position in sorted(set(positions)):
        offset = applied.get(position, -1)
        if offset < 0:
            continue
        was, now = recorded.get(position), current.get(position[0])
        end = ends.get(position) if ends is not None else None
        if was is not None and now is not None and was != now:
            untrusted.append(Untrusted(position, offset, f"the topic is not the one this offset was read from "
                                                         f"(identity {was}, now {now})"))
        elif end is not None and offset >= end:
            untrusted.append(Untrusted(position, offset, f"the offset lies beyond the partition's end ({end})"))
    return untrusted
