"""Which stored offsets a worker or replica resumes from (``processors.positions``)."""

from hypothesis import given
from hypothesis import strategies as st

from processors.positions import untrusted_offsets


def test_an_offset_read_from_another_topic_of_the_same_name_is_not_trusted() -> None:
    applied = {("in", 0): 999, ("in", 1): 999}
    untrusted = untrusted_offsets(applied, applied, {("in", 0): "c/old", ("in", 1): "c/new"}, {"in": "c/new"})
    assert [entry.position for entry in untrusted] == [("in", 0)]
    assert "identity c/old, now c/new" in untrusted[0].describe()


def test_an_offset_beyond_the_partitions_end_is_not_trusted_and_one_at_its_last_record_is() -> None:
    ends = {("in", 0): 1000, ("in", 1): 1000}
    untrusted = untrusted_offsets(ends, {("in", 0): 1000, ("in", 1): 999}, {}, {"in": None}, ends)
    assert [(entry.position, entry.offset) for entry in untrusted] == [(("in", 0), 1000)]
    assert "beyond the partition's end (1000)" in untrusted[0].reason


def test_nothing_stored_is_nothing_to_distrust() -> None:
    assert untrusted_offsets([("in", 0), ("in", 1)], {("in", 0): -1}, {("in", 0): "c/old"}, {"in": "c/new"}) == []


def test_an_identity_the_broker_cannot_tell_leaves_the_end_to_judge() -> None:
    assert untrusted_offsets([("in", 0)], {("in", 0): 5}, {("in", 0): "c/old"}, {"in": None}, {("in", 0): 10}) == []
    assert untrusted_offsets([("in", 0)], {("in", 0): 5}, {("in", 0): "c/old"}, {"in": None}) == [], "nor no end"


@given(st.dictionaries(st.integers(0, 3), st.integers(-1, 50)), st.integers(0, 60), st.booleans())
def test_an_offset_is_trusted_exactly_when_its_topic_is_the_same_and_it_lies_before_the_end(
        offsets: dict[int, int], end: int, same_topic: bool) -> None:
    applied = {("in", p): offset for p, offset in offsets.items()}
    recorded = dict.fromkeys(applied, "c/t1")
    ends = {("in", p): end for p in range(4)}
    untrusted = untrusted_offsets(ends, applied, recorded, {"in": "c/t1" if same_topic else "c/t2"}, ends)
    assert {entry.position for entry in untrusted} == {
        position for position, offset in applied.items() if offset >= 0 and (not same_topic or offset >= end)}
