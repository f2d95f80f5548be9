"""The identity map as of a transaction time, and the rules a merge or split command must pass."""

from processors.identity_map import (
    IdentityMap,
    IdentityTimeline,
    identity_as_of,
    merge_refusal,
    placeholder_name,
    placeholders_to_absorb,
    split,
    split_refusal,
)
from processors.model import Entity, Merge

A, B, C = "Service:cmdb:A", "Service:cmdb:B", "Service:cmdb:C"


def merge(merge_id: str, keep: str, absorb: str, tx_from: int, tx_to: int | None = None) -> Merge:
    return Merge("acme", merge_id, keep, absorb, "alice", "", tx_from, tx_to)


def entity(entity_id: str, entity_type: str = "Service") -> Entity:
    return Entity("acme", entity_id, entity_type, None, 1)


def test_a_chain_of_merges_has_one_survivor_and_every_member() -> None:
    identity = IdentityMap([merge("m1", B, A, 10), merge("m2", C, B, 20)])
    assert {identity.canonical(n) for n in (A, B, C)} == {C}
    assert identity.members(A) == (C, A, B)
    assert identity.members("Service:cmdb:other") == ("Service:cmdb:other",)
    assert identity.absorbed_by(A).merge_id == "m1" and identity.absorbed_by(C) is None


def test_the_map_as_of_a_time_holds_the_merges_then_in_effect() -> None:
    merges = [merge("m1", B, A, 10, tx_to=30)]
    assert identity_as_of(merges, 9) is None, "before the merge: two entities"
    assert identity_as_of(merges, 10).canonical(A) == B
    assert identity_as_of(merges, 30) is None, "split at 30"
    assert identity_as_of(merges, None) is None, "now: split"
    assert identity_as_of([], None) is None


def test_bad_merges_are_refused_with_their_reason() -> None:
    now = IdentityMap([merge("m1", B, A, 10)])
    assert "into itself" in merge_refusal("acme", A, A, entity(A), entity(A), None)
    assert "unknown entity 'Service:cmdb:X'" in merge_refusal("acme", "Service:cmdb:X", A, None, entity(A), None)
    assert "different types" in merge_refusal("acme", A, "Team:hr:T", entity(A), entity("Team:hr:T", "Team"), None)
    refused = merge_refusal("acme", C, A, entity(C), entity(A), now)
    assert "already absorbed into 'Service:cmdb:B' (merge 'm1')" in refused
    assert "is itself absorbed" in merge_refusal("acme", A, C, entity(A), entity(C), now)
    assert merge_refusal("acme", C, B, entity(C), entity(B), now) is None, "a survivor may be absorbed, members too"


def test_a_split_names_an_applied_merge_once() -> None:
    assert "unknown merge 'm9'" in split_refusal("acme", "m9", None)
    closed = split(merge("m1", B, A, 10), "s1", "bob", "wrong", 20)
    assert closed.tx_to == 20 and closed.split_actor == "bob" and closed.tx_from == 10
    assert "already split (by 's1')" in split_refusal("acme", "m1", closed)


def test_placeholders_are_judged_by_the_injected_predicate() -> None:
    new = entity("Service:cmdb:S1")
    offered = [("Service:~billing", "billing"), ("Service:~biling", "biling"), ("Service:~billing", "billing")]
    assert placeholders_to_absorb(offered, new, ["billing"], None, lambda a, b: a == b) == ["Service:~billing"]
    assert placeholders_to_absorb(offered, new, ["billing"], None, lambda a, b: False) == []
    absorbed = IdentityMap([merge("m1", "Service:cmdb:S0", "Service:~billing", 5)])
    assert placeholders_to_absorb(offered, new, ["billing"], absorbed, lambda a, b: True) == ["Service:~biling"]


def test_a_placeholder_names_the_normalised_name_it_was_made_from() -> None:
    assert placeholder_name("Service:~settlement connector") == "settlement connector"
    assert placeholder_name("Service:~reports~r1a2") == "reports"


def test_the_timeline_answers_as_identity_as_of_at_every_instant() -> None:
    merges = [merge("m1", B, A, 10, tx_to=30), merge("m2", C, B, 20), merge("m3", A, "Service:cmdb:D", 30)]
    timeline = IdentityTimeline(merges)
    for known_at in [None, *range(0, 40)]:
        expected, got = identity_as_of(merges, known_at), timeline.as_of(known_at)
        assert (expected is None) == (got is None), known_at
        if expected is not None:
            assert {n: got.canonical(n) for n in (A, B, C)} == {n: expected.canonical(n) for n in (A, B, C)}
    assert IdentityTimeline([]).as_of(None) is None


def test_a_timeline_extended_by_later_edits_answers_as_one_built_from_them_all() -> None:
    earlier = [merge("m1", B, A, 10), merge("m2", C, "Service:cmdb:D", 20)]
    # A split of m1 and a new merge at 30, as one batch commits them after the earlier ones.
    later = [merge("m1", B, A, 10, tx_to=30), earlier[1], merge("m3", A, C, 30)]
    nodes = (A, B, C, "Service:cmdb:D")
    for read_before in ([], [None], [None, 15], [5, 15, 25]):
        timeline = IdentityTimeline(earlier)
        for known_at in read_before:
            timeline.as_of(known_at)  # maps built before the extension are kept by it
        extended = timeline.extended(later, identity_as_of(later, None))
        for known_at in [None, *range(0, 40)]:
            expected, got = identity_as_of(later, known_at), extended.as_of(known_at)
            assert (expected is None) == (got is None), (read_before, known_at)
            if expected is not None:
                assert {n: got.canonical(n) for n in nodes} == {n: expected.canonical(n) for n in nodes}, known_at
    assert IdentityTimeline([]).extended(earlier, identity_as_of(earlier, None)).as_of(25) is not None
