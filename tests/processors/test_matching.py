"""The fuzzy matcher alone (``processors.matching``): cores, blocking keys and its three answers."""

from __future__ import annotations

import pytest

from processors.identity import normalise_name
from processors.matching import Candidate, best_match, core_of, probes, sort_key

REPORTS = ["reports", "reports-service", "ReportingService", "the reporting pipeline", "svc-reports-prod"]


def candidates(*pairs: tuple[str, str]) -> list[Candidate]:
    return [Candidate(entity_id, entity_id.split(":", 1)[0], normalise_name(name)) for entity_id, name in pairs]


@pytest.mark.parametrize("name", REPORTS)
def test_affixes_glued_words_and_endings_come_off_to_one_core(name: str) -> None:
    assert core_of(normalise_name(name)) == ("report",)


def test_a_name_made_only_of_decorating_words_keeps_them() -> None:
    assert core_of("the service") == ("the", "service")


@pytest.mark.parametrize("name", REPORTS[1:])
def test_every_way_of_writing_the_reports_service_matches_it(name: str) -> None:
    match = best_match("Service", normalise_name(name), candidates(("Service:cmdb:S1", "reports"),
                                                                   ("Service:cmdb:S2", "billing"),))
    assert (match.kind, match.entity_id) == ("match", "Service:cmdb:S1")


def test_the_same_name_of_another_type_never_matches() -> None:
    team = candidates(("Team:hr:T1", "Platform"))
    assert best_match("Service", "platform", team).kind == "new"
    assert best_match("Team", "platform", team).entity_id == "Team:hr:T1"


def test_two_candidates_scoring_alike_abstain() -> None:
    two = candidates(("Service:cmdb:S1", "payments api"), ("Service:cmdb:S2", "payment apis"))
    match = best_match("Service", normalise_name("Payments-API-prod"), two)
    assert match.kind == "abstain" and match.entity_id is None
    assert {s.entity_id for s in match.candidates} == {"Service:cmdb:S1", "Service:cmdb:S2"}


def test_a_typo_in_a_longer_name_matches() -> None:
    match = best_match("Service", normalise_name("Paymnet Gateway"),
                       candidates(("Service:cmdb:S7", "payment gateway"), ("Service:cmdb:S8", "gateway admin")))
    assert (match.kind, match.entity_id) == ("match", "Service:cmdb:S7")


def test_people_sharing_a_first_name_are_not_matched() -> None:
    alice = candidates(("Person:hr:E1", "Alice Martin"))
    assert best_match("Person", normalise_name("Alice Moreau"), alice).kind == "new"


def test_somewhat_alike_abstains_rather_than_guessing() -> None:
    match = best_match("Service", normalise_name("reprots"), candidates(("Service:cmdb:S1", "reports")))
    assert match.kind == "abstain"


def test_nothing_alike_is_a_new_entity() -> None:
    assert best_match("Service", "ledger exporter", candidates(("Service:cmdb:S1", "reports"))).kind == "new"
    assert best_match("Service", "ledger exporter", []).kind == "new"


def test_an_entity_scores_by_its_best_alias() -> None:
    both = candidates(("Service:cmdb:S1", "invoicing"), ("Service:cmdb:S1", "billing"))
    match = best_match("Service", "billing", both)
    assert (match.kind, match.entity_id, match.score) == ("match", "Service:cmdb:S1", 100.0)


def test_the_forms_of_one_name_share_a_sort_key_and_a_slip_keeps_one_end() -> None:
    forms = ("payment gateway", "PaymentGateway", "payments-gateway-svc", "the payment gateway service")
    assert {sort_key(normalise_name(name)) for name in forms} == {"paymentgateway"}
    late, early = sort_key("payment gatewya"), sort_key("pyament gateway")
    assert late[:10] == "paymentgat" and early[-10:] == "entgateway"


def test_a_reordered_name_is_probed_in_each_rotation_of_its_words() -> None:
    forward, backward = probes(normalise_name("Martin Alice"))
    assert sort_key("alice martin") in forward and backward == "ecilanitram"
    assert probes("") == (("",), "")


def test_a_shared_neighbour_lifts_only_a_name_already_alike() -> None:
    near = candidates(("Service:cmdb:S1", "reports"), ("Service:cmdb:S2", "billing"))
    assert best_match("Service", "reprots", near).kind == "abstain"
    lifted = best_match("Service", "reprots", near, frozenset({"Service:cmdb:S1"}))
    assert (lifted.kind, lifted.entity_id) == ("match", "Service:cmdb:S1")
    assert best_match("Service", "reprots", near, frozenset({"Service:cmdb:S2"})).kind == "abstain"


def test_similarities_skip_only_the_measure_that_repeats_another() -> None:
    """The unstemmed measure is skipped between two names nothing was stemmed in: the scores are
    those of all three measures over every pair."""
    from rapidfuzz.distance import Indel
    from rapidfuzz.fuzz import token_sort_ratio

    from processors.matching import _forms, similarities

    names = [normalise_name(n) for n in [*REPORTS, "reports", "billing", "biling svc", "ledger payments",
                                         "ledgers payment", "alice martin", "platform", "the platform team"]]
    for name in names:
        compact, plain, words = _forms(name)
        expected = [max(100.0 * Indel.normalized_similarity(compact, other[0]),
                        100.0 * Indel.normalized_similarity(plain, other[1]),
                        token_sort_ratio(words, other[2])) for other in map(_forms, names)]
        assert similarities(name, names) == pytest.approx(expected), name
