"""SettledHeap: survivors of a batch leave the collector's view, and cyclic garbage still goes."""

import gc
import weakref

from processors.heap import THRESHOLDS, SettledHeap


class Node:
    """A reference cycle: only the cyclic collector can free it."""

    def __init__(self) -> None:
        self.me = self


def cyclic_garbage() -> weakref.ref:
    node = Node()
    alive = weakref.ref(node)
    del node
    return alive


def test_settle_freezes_the_survivors_and_release_hands_them_back() -> None:
    with SettledHeap() as heap:
        heap.settle()
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_frozen_cyclic_garbage_waits_for_an_idle_moment_once_a_full_pass_is_due() -> None:
    now = [0.0]
    with SettledHeap(full_every_s=60.0, clock=lambda: now[0]) as heap:
        garbage = cyclic_garbage()
        heap.settle()
        gc.collect()
        assert garbage() is not None, "frozen: no ordinary collection looks at it"
        now[0] = 59.0
        heap.when_idle()
        assert garbage() is not None and heap.full_passes == 0, "not due yet"
        now[0] = 61.0
        heap.settle()
        assert garbage() is not None and heap.full_passes == 0, "due, but busy: no pause mid-stream"
        heap.when_idle()
        assert garbage() is None and heap.full_passes == 1
        assert gc.get_freeze_count() > 0, "frozen again after the pass"


def test_under_unbroken_load_the_full_pass_runs_once_it_is_long_overdue() -> None:
    now = [0.0]
    with SettledHeap(full_every_s=60.0, overdue_factor=3.0, clock=lambda: now[0]) as heap:
        garbage = cyclic_garbage()
        heap.settle()
        now[0] = 179.0
        heap.settle()
        assert garbage() is not None and heap.full_passes == 0
        now[0] = 180.0
        heap.settle()
        assert garbage() is None and heap.full_passes == 1


def test_release_lets_the_collector_free_what_was_frozen() -> None:
    heap = SettledHeap()
    garbage = cyclic_garbage()
    heap.settle()
    heap.release()
    gc.collect()
    assert garbage() is None


def test_after_event_settles_every_so_many_events() -> None:
    gc.unfreeze()
    with SettledHeap(settle_every=3) as heap:
        for _ in range(2):
            heap.after_event()
        assert gc.get_freeze_count() == 0
        heap.after_event()
        assert gc.get_freeze_count() > 0


def test_the_young_generation_waits_longer_while_settled_and_the_old_thresholds_come_back() -> None:
    before = gc.get_threshold()
    with SettledHeap():
        assert gc.get_threshold() == THRESHOLDS
    assert gc.get_threshold() == before


def test_collect_young_frees_the_cyclic_garbage_of_the_young_generations_before_it_freezes() -> None:
    """A service's requests leave cycles behind: without this, each freeze would keep them until a full pass."""
    gc.collect()
    with SettledHeap(collect_young=True) as young, SettledHeap() as plain:
        kept = cyclic_garbage()
        plain.settle()
        assert kept() is not None, "a plain settle freezes young garbage with the survivors"
        freed = cyclic_garbage()
        young.settle()
        assert freed() is None
        assert gc.get_freeze_count() > 0
