"""The bookkeeping of a worker's rebuilds (``streams.worker.rebuild.Rebuilds``), with stand-in rebuilds: no broker."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from streams.worker.rebuild import Rebuilds


@dataclass
class FakeRebuild:
    """Done after ``slices`` steps, replaying ``per_step`` records each."""

    partition: int
    slices: int
    per_step: int = 10
    records: int = 0
    steps: int = 0
    went_on: int = 0
    closed: bool = False
    budgets: list[float] = field(default_factory=list)

    def step(self, budget: float) -> bool:
        assert not self.closed
        self.budgets.append(budget)
        self.steps += 1
        self.records += self.per_step
        return self.steps >= self.slices

    def read_on(self) -> None:
        self.went_on += 1

    def close(self) -> None:
        self.closed = True


def rebuilds_of(slices: dict[int, int], at_once: int = 4) -> tuple[Rebuilds[FakeRebuild], dict[int, FakeRebuild]]:
    started: dict[int, FakeRebuild] = {}

    def start(partition: int) -> FakeRebuild:
        started[partition] = FakeRebuild(partition, slices[partition])
        return started[partition]

    return Rebuilds(start, at_once=at_once, slice_seconds=0.4), started


def test_partitions_resume_together_once_the_last_is_rebuilt() -> None:
    rebuilds, started = rebuilds_of({0: 1, 2: 3})
    rebuilds.expect([0, 2])
    finished, replayed = rebuilds.advance()
    assert [r.partition for r in finished] == [0] and replayed == 20
    assert rebuilds.take_rebuilt() == set(), "partition 2 is still rebuilding"
    rebuilds.advance()
    finished, _ = rebuilds.advance()
    assert [r.partition for r in finished] == [2]
    assert rebuilds.take_rebuilt() == {0, 2} and not rebuilds.waiting
    assert started[0].budgets == [0.2], "two side by side share a slice"


def test_no_more_than_at_once_run_side_by_side() -> None:
    rebuilds, started = rebuilds_of({0: 2, 1: 2, 2: 1}, at_once=2)
    rebuilds.expect([0, 1, 2])
    rebuilds.advance()
    assert sorted(started) == [0, 1]
    rebuilds.advance()
    assert sorted(started) == [0, 1], "2 begins once there is room"
    finished, _ = rebuilds.advance()
    assert [r.partition for r in finished] == [2] and rebuilds.take_rebuilt() == {0, 1, 2}


def test_a_suspended_rebuild_goes_on_when_its_partition_comes_back_and_is_closed_when_not() -> None:
    rebuilds, started = rebuilds_of({0: 1, 1: 5, 2: 5})
    rebuilds.expect([0, 1, 2])
    rebuilds.advance()
    set_aside = rebuilds.suspend({0, 1, 2})  # an eager rebalance revokes everything
    assert sorted(r.partition for r in set_aside) == [1, 2], "0 was done: nothing to set aside"
    assert rebuilds.take_rebuilt() == set() and not rebuilds.rebuilt, "a revoked rebuilt partition is not resumed"
    going_on, closed = rebuilds.expect([1])
    assert [r.partition for r in going_on] == [1] and closed == [2]
    assert started[1].went_on == 1 and started[2].closed and not started[1].closed
    rebuilds.advance()
    assert started[1].steps == 2 and sorted(started) == [0, 1, 2], "1 went on: not begun again"


def test_closing_everything_leaves_nothing_waiting() -> None:
    rebuilds, started = rebuilds_of({0: 5, 1: 5})
    rebuilds.expect([0, 1])
    rebuilds.advance()
    rebuilds.suspend(set(rebuilds.waiting))
    assert rebuilds.close_suspended() == [0, 1]
    assert all(r.closed for r in started.values()) and not rebuilds.waiting and not rebuilds.suspended


def test_a_step_that_raises_leaves_every_rebuild_of_the_slice_to_be_closed() -> None:
    """Partition 0's rebuild ends in the slice in which partition 1's raises (its state was disowned,
    say): both are still waiting, so that letting them go closes both, and neither counts as rebuilt."""
    rebuilds, _ = rebuilds_of({})
    rebuilds.expect([0, 1])
    ending, raising = FakeRebuild(0, 1), FakeRebuild(1, 5)

    def disowned(budget: float) -> bool:
        raise RuntimeError("disowned")

    raising.step = disowned  # type: ignore[method-assign]
    rebuilds.waiting.update({0: ending, 1: raising})
    with pytest.raises(RuntimeError, match="disowned"):
        rebuilds.advance()
    assert ending.steps == 1 and set(rebuilds.waiting) == {0, 1} and rebuilds.rebuilt == []
    set_aside = rebuilds.suspend({0, 1})
    rebuilds.close_suspended()
    assert set_aside == [ending, raising] and ending.closed and raising.closed
