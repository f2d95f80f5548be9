"""Entity resolution through the ledger: identifiers, aliases, fuzzy matches, abstentions and the review
decisions that release what was parked."""

from __future__ import annotations

import pytest

from tests.support.harness import Ledger


@pytest.fixture
def ledger() -> Ledger:
    ledger = Ledger()
    ledger.at("2026-03-01T00:00:00Z")
    ledger.change("cmdb", "svc/S1").asserts("Service:cmdb:S1", "runs_on", "Host:cmdb:H1").send()
    ledger.change("cmdb", "svc/S2").asserts("Service:cmdb:S2", "runs_on", "Host:cmdb:H2").send()
    for event_id, entity, alias in (("a-1", "Service:cmdb:S1", "reports"), ("a-2", "Service:cmdb:S2", "billing")):
        ledger.send({"kind": "alias", "event_id": event_id, "tenant": "acme", "entity": entity, "alias": alias,
                     "actor": "alice"})
    return ledger


def decide(ledger: Ledger, review_id: str, decision: str, entity: str | None = None, event_id: str = "d-1") -> None:
    ledger.send({"kind": "decision", "event_id": event_id, "tenant": "acme", "review_id": review_id,
                 "decision": decision, "actor": "carol", "reason": "checked the catalogue",
                 **({"entity": entity} if entity else {})})


def owners_of_by_name(ledger: Ledger, name: str) -> list[str]:
    return [v.dst for v in ledger.believed(name, "owned_by")]


def test_a_decorated_name_resolves_to_the_entity_and_becomes_its_alias(ledger: Ledger) -> None:
    ledger.change("wiki").asserts("Service:svc-reports-prod", "owned_by", "Team:hr:T1").send()
    assert owners_of_by_name(ledger, "Service:cmdb:S1") == ["Team:hr:T1"]
    assert ledger.store.alias_targets("acme", "svc reports prod") == ["Service:cmdb:S1"]
    assert ledger.counts.balanced() and ledger.counts.queued_for_review == 0


def test_an_id_like_alias_resolves_a_later_mention_of_that_name(ledger: Ledger) -> None:
    ledger.change("hr", "p/E1").asserts("Person:hr:E1", "member_of", "Team:hr:T1").send()
    ledger.send({"kind": "alias", "event_id": "a-3", "tenant": "acme", "entity": "Person:hr:E1",
                 "alias": "alice.martin@acme.example", "actor": "alice"})
    ledger.change("git").asserts("Person:alice.martin@acme.example", "member_of", "Team:hr:T2").send()
    assert sorted(owners_of_by_name(ledger, "Person:hr:E1")) == []  # owned_by is not member_of
    assert {v.dst for v in ledger.believed("Person:hr:E1", "member_of")} == {"Team:hr:T1", "Team:hr:T2"}


def test_a_somewhat_alike_name_is_parked_with_its_candidates(ledger: Ledger) -> None:
    ledger.change("wiki", event_id="w-1").asserts("Service:reprots", "owned_by", "Team:hr:T1").send()
    (item,) = ledger.store.review_items("acme")
    assert item.category == "ambiguous_entity" and item.details["candidates"] == ["Service:cmdb:S1"]
    assert item.details["scores"][0]["entity"] == "Service:cmdb:S1"
    assert ledger.counts.queued_for_review == 1 and ledger.counts.balanced()
    assert ledger.store.entity("acme", "Service:~reprots") is None, "nothing of the event was applied"


def test_a_shared_neighbour_settles_a_near_match(ledger: Ledger) -> None:
    """'reprots' alone is only near 'reports'; stated with the owner S1 already has, it is S1. The same
    name with another owner still waits for a person."""
    ledger.change("cmdb", "svc/S1").asserts("Service:cmdb:S1", "owned_by", "Team:hr:T1").send()
    ledger.change("wiki", event_id="w-1").asserts("Service:reprots", "owned_by", "Team:hr:T2").send()
    assert [i.event_id for i in ledger.store.review_items("acme")] == ["w-1"]
    ledger.change("wiki", event_id="w-2").asserts("Service:reprots", "owned_by", "Team:hr:T1") \
        .asserts("Service:reprots", "depends_on", "Service:cmdb:S2").send()
    assert [i.event_id for i in ledger.store.review_items("acme")] == ["w-1"]
    assert [v.dst for v in ledger.believed("Service:cmdb:S1", "depends_on")] == ["Service:cmdb:S2"]
    assert "Service:cmdb:S1" in ledger.store.alias_targets("acme", "reprots")


def test_choose_applies_exactly_the_parked_assertions_and_records_the_alias(ledger: Ledger) -> None:
    ledger.change("wiki", event_id="w-1").asserts("Service:reprots", "owned_by", "Team:hr:T1") \
        .asserts("Service:reprots", "depends_on", "Service:cmdb:S2").send()
    (item,) = ledger.store.review_items("acme")
    appended_before = ledger.counts.versions_appended
    decide(ledger, item.review_id, "choose", "Service:cmdb:S1")
    assert owners_of_by_name(ledger, "Service:cmdb:S1") == ["Team:hr:T1"]
    assert [v.dst for v in ledger.believed("Service:cmdb:S1", "depends_on")] == ["Service:cmdb:S2"]
    assert ledger.counts.versions_appended - appended_before == 2
    assert "Service:cmdb:S1" in ledger.store.alias_targets("acme", "reprots")
    (decision,) = ledger.store.decisions_for("acme", "Service:cmdb:S1")
    assert (decision.decision, decision.actor, decision.reason) == ("choose", "carol", "checked the catalogue")
    assert decision.tx_at > item.tx_at
    assert ledger.counts.review_decided == 1 and ledger.counts.balanced()


def test_new_makes_the_mention_a_new_entity(ledger: Ledger) -> None:
    ledger.change("wiki", event_id="w-1").asserts("Service:reprots", "owned_by", "Team:hr:T1").send()
    (item,) = ledger.store.review_items("acme")
    decide(ledger, item.review_id, "new")
    assert owners_of_by_name(ledger, "Service:~reprots") == ["Team:hr:T1"]
    assert owners_of_by_name(ledger, "Service:cmdb:S1") == []


def test_reject_applies_nothing_and_is_counted_with_its_reason(ledger: Ledger) -> None:
    ledger.change("wiki", event_id="w-1").asserts("Service:reprots", "owned_by", "Team:hr:T1").send()
    (item,) = ledger.store.review_items("acme")
    appended_before = ledger.counts.versions_appended
    decide(ledger, item.review_id, "reject")
    assert ledger.counts.versions_appended == appended_before
    assert (ledger.counts.review_decided, ledger.counts.review_rejected) == (1, 1)
    (decision,) = ledger.store.decisions("acme")
    assert (decision.decision, decision.reason, decision.entity) == ("reject", "checked the catalogue", None)


def test_deciding_twice_is_refused_with_a_reason(ledger: Ledger) -> None:
    ledger.change("wiki", event_id="w-1").asserts("Service:reprots", "owned_by", "Team:hr:T1").send()
    (item,) = ledger.store.review_items("acme")
    decide(ledger, item.review_id, "reject")
    decide(ledger, item.review_id, "choose", "Service:cmdb:S1", event_id="d-2")
    (letter,) = ledger.store.dead_letters()
    assert "already decided" in letter.reason
    assert owners_of_by_name(ledger, "Service:cmdb:S1") == []


def test_choosing_an_entity_of_another_type_is_refused(ledger: Ledger) -> None:
    ledger.change("wiki", event_id="w-1").asserts("Service:reprots", "owned_by", "Team:hr:T1").send()
    (item,) = ledger.store.review_items("acme")
    decide(ledger, item.review_id, "choose", "Team:hr:T1")
    (letter,) = ledger.store.dead_letters()
    assert "not a Service" in letter.reason
    assert ledger.store.decision("acme", item.review_id) is None, "the item stays open"


def test_a_second_ambiguous_mention_parks_the_event_again_remembering_the_first(ledger: Ledger) -> None:
    ledger.change("wiki", event_id="w-1").asserts("Service:reprots", "depends_on", "Service:bilDing").send()
    (first,) = ledger.store.review_items("acme")
    decide(ledger, first.review_id, "choose", "Service:cmdb:S1")
    second = [i for i in ledger.store.review_items("acme") if i.review_id != first.review_id]
    assert len(second) == 1 and second[0].details["mention"]["name"] == "bilDing"
    decide(ledger, second[0].review_id, "choose", "Service:cmdb:S2", event_id="d-2")
    assert [v.dst for v in ledger.believed("Service:cmdb:S1", "depends_on")] == ["Service:cmdb:S2"]


def test_a_query_anchor_resolves_through_the_matcher_and_abstains_between_two(ledger: Ledger) -> None:
    ledger.change("wiki").asserts("Service:cmdb:S1", "owned_by", "Team:hr:T1").send()
    result = ledger.query("owners-of", "svc-reports-prod")
    assert (result.anchor.resolution, result.anchor.entity) == ("match", "Service:cmdb:S1")
    ledger.send({"kind": "alias", "event_id": "a-9", "tenant": "acme", "entity": "Service:cmdb:S2",
                 "alias": "report", "actor": "alice"})
    ambiguous = ledger.query("owners-of", "reporting service")
    assert ambiguous.disposition == "ambiguous"
    assert set(ambiguous.anchor.candidates) == {"Service:cmdb:S1", "Service:cmdb:S2"}
