"""Bad input gets a clear reason and loses nothing: read = applied + dead-lettered + queued + duplicates."""

import base64
import itertools
import json

import pytest

from processors.pending import PendingLedger
from tests.support.harness import Ledger

GOOD = {"kind": "change", "event_id": "good-1", "tenant": "acme",
        "source": {"system": "cmdb", "record": "svc/S1"}, "detected_at": "2026-05-01T00:00:00Z",
        "assert": [{"src": {"type": "Service", "id": "cmdb:S1"}, "rel": "depends_on",
                    "dst": {"type": "Host", "id": "cmdb:H1"}}]}


_serial = itertools.count()


def variant(**changes) -> str:
    event = json.loads(json.dumps(GOOD)) | {"event_id": f"bad-{next(_serial)}"}
    for key, value in changes.items():
        if value is None:
            event.pop(key)
        else:
            event[key] = value
    return json.dumps(event)


def with_assertion(**fields) -> str:
    event = json.loads(json.dumps(GOOD)) | {"event_id": f"bad-{next(_serial)}"}
    event["assert"][0].update(fields)
    return json.dumps(event)


def with_retraction(**fields) -> str:
    event = json.loads(json.dumps(GOOD)) | {"event_id": f"bad-{next(_serial)}"}
    event["retract"] = [{"src": {"type": "Service", "id": "cmdb:S1"}, "rel": "other",
                         "dst": {"type": "Host", "id": "cmdb:H1"}, **fields}]
    return json.dumps(event)


BAD = {
    "malformed JSON": ('{"kind": "change", "event_id": ', "decode", "malformed JSON"),
    "not an object": ("[1, 2, 3]", "decode", "JSON object"),
    "missing tenant": (variant(tenant=None), "validate", "tenant: Field required"),
    "a tenant the HTTP API could not name": (variant(tenant="acme corp/eu"), "validate",
                                             "tenant: String should match pattern"),
    "a tenant of 129 characters": (variant(tenant="a" * 129), "validate", "tenant: String should match pattern"),
    "unknown field": (variant(owner="bob"), "validate", "owner: unknown field"),
    "unknown kind": (variant(kind="upsert"), "validate", "upsert"),
    "rel outside vocabulary": (with_assertion(rel="likes"), "apply", "'likes' is not in the vocabulary"),
    "wrong domain": (with_assertion(src={"type": "Team", "id": "hr:T1"}), "apply", "cannot start at a Team"),
    "wrong range": (with_assertion(dst={"type": "Person", "id": "hr:P1"}), "apply", "cannot end at a Person"),
    "unknown entity type": (with_assertion(dst={"type": "Spaceship", "id": "x"}), "apply", "'Spaceship'"),
    "other without phrase": (with_assertion(rel="other"), "apply", "needs the source's own wording"),
    "empty retraction phrase": (with_retraction(phrase=""), "validate", "phrase: String should have at least"),
    "unknown retraction field": (with_retraction(wording="runs"), "validate", "wording: unknown field"),
    "mention without id or name": (with_assertion(dst={"type": "Host"}), "validate", "needs an 'id' or a 'name'"),
    "empty valid interval": (with_assertion(valid_from="2026-05-01", valid_to="2026-04-01"), "validate",
                             "valid_to must be after valid_from"),
    "naive datetime": (variant(detected_at="2026-05-01T00:00:00"), "validate", "no timezone"),
    "clock without --simulated-clock": ('{"kind": "clock", "now": "2026-05-01T00:00:00Z"}', "validate",
                                        "--simulated-clock"),
    "revoke of an unknown edge": ('{"kind": "revoke", "event_id": "r-9", "tenant": "acme", "edge_id": "nope", '
                                  '"reason": "bad extraction"}', "apply", "unknown edge id"),
    "confidence out of range": (with_assertion(confidence=1.5), "validate", "confidence"),
    "a name longer than any name": (with_assertion(src={"type": "Service", "id": "cmdb:S1", "name": "n" * 1025}),
                                    "validate", "assert.0.src.name: String should have at most 1024 characters"),
    "evidence longer than 64 Ki characters": (with_assertion(evidence="e" * (64 * 1024 + 1)), "validate",
                                              "assert.0.evidence: String should have at most 65536 characters"),
    "more aliases than a mention takes": (
        with_assertion(dst={"type": "Host", "id": "cmdb:H1", "aliases": [f"h{n}" for n in range(65)]}),
        "validate", "assert.0.dst.aliases: Tuple should have at most 64 items"),
    "a trace whose query is not a query": (json.dumps({
        "kind": "trace", "event_id": "t-9", "tenant": "acme", "trace_id": "t-9", "query": {"blob": "q" * 70_000},
        "valid_at": "2026-05-01", "known_at": "2026-05-01"}), "validate",
        "query: 70,011 bytes as JSON, at most 65,536"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_each_kind_of_bad_input_is_dead_lettered_with_its_reason(case: str) -> None:
    line, stage, reason = BAD[case]
    ledger = Ledger()
    ledger.processor.clock.simulated = case != "clock without --simulated-clock"
    ledger.send(line, json.dumps(GOOD))
    (letter,) = ledger.store.dead_letters()
    assert letter.stage == stage
    assert reason in letter.reason
    assert letter.original == line, "the original text is kept"
    assert ledger.counts.applied == 1, "processing continues after a bad event"
    assert ledger.counts.dead_lettered == 1
    assert ledger.counts.balanced()


@pytest.mark.parametrize("tenant", ["../../etc", "acme\u0000", "acme corp/eu", "a" * 129, ""])
def test_an_event_naming_no_valid_tenant_is_dead_lettered_as_untenanted(tenant: str) -> None:
    """Filed under a name no read can give (``--tenant`` takes only valid ones), it would be lost to
    every listing: ``dead-letters --untenanted`` is where an operator finds it."""
    ledger = Ledger()
    line = variant(tenant=tenant)
    ledger.send(line)
    (letter,) = ledger.store.dead_letters()
    assert (letter.stage, letter.tenant, letter.original) == ("validate", None, line)


def test_bytes_that_are_not_utf8_are_dead_lettered_with_the_bytes_themselves() -> None:
    raw = b'{"kind": "change", "event_id": "x\xff\xfe", "tenant": "acme"}'
    ledger = Ledger()
    ledger.send(raw, json.dumps(GOOD))
    (letter,) = ledger.store.dead_letters()
    assert letter.stage == "decode"
    assert letter.reason == "not UTF-8 text: byte 0xff at offset 33 (invalid start byte)"
    assert letter.original_base64 is not None and base64.b64decode(letter.original_base64) == raw
    assert letter.original == raw.decode("utf-8", errors="replace")
    assert ledger.counts.applied == 1 and ledger.counts.dead_lettered == 1 and ledger.counts.balanced()


def test_text_keeps_no_base64_copy() -> None:
    ledger = Ledger()
    ledger.send('{"kind": "change", "event_id": ', json.dumps(GOOD))
    (letter,) = ledger.store.dead_letters()
    assert letter.original_base64 is None


def test_a_rejected_event_changes_nothing_even_when_its_first_assertion_was_fine(ledger: Ledger) -> None:
    event = json.loads(json.dumps(GOOD))
    event["assert"].append({"src": {"type": "Service", "id": "cmdb:S1"}, "rel": "likes",
                            "dst": {"type": "Host", "id": "cmdb:H2"}})
    ledger.send(event)
    assert ledger.versions("Service:cmdb:S1", "depends_on") == []
    assert ledger.store.entity("acme", "Service:cmdb:S1") is None


def test_the_count_identity_holds_over_a_mixed_stream(ledger: Ledger) -> None:
    lines = [line for line, _, _ in BAD.values() if "clock" not in line]
    ledger.send(json.dumps(GOOD), *lines, json.dumps(GOOD))
    counts = ledger.counts
    assert counts.events_read == len(lines) + 2
    assert counts.dead_lettered == len(lines)
    assert (counts.applied, counts.duplicates) == (1, 1)
    assert counts.balanced()
    assert len(list(ledger.store.dead_letters())) == len(lines)


def test_ambiguous_name_is_queued_for_review_not_guessed(ledger: Ledger) -> None:
    ledger.change("cmdb", "svc/S1").asserts("Service:cmdb:S1", "runs_on", "Host:cmdb:H1").send()
    ledger.change("cmdb", "svc/S2").asserts("Service:cmdb:S2", "runs_on", "Host:cmdb:H2").send()
    ledger.send({"kind": "alias", "event_id": "a-1", "tenant": "acme", "entity": "Service:cmdb:S1",
                 "alias": "reports", "actor": "alice"})
    ledger.send({"kind": "alias", "event_id": "a-2", "tenant": "acme", "entity": "Service:cmdb:S2",
                 "alias": "Reports", "actor": "bob"})
    ledger.change("wiki").asserts("Service:Reports", "runs_on", "Host:cmdb:H9").send()
    (item,) = ledger.store.review_items("acme")
    assert item.category == "ambiguous_entity"
    assert item.details["candidates"] == ["Service:cmdb:S1", "Service:cmdb:S2"]
    assert item.details["mention"] == {"type": "Service", "id": None, "name": "Reports", "aliases": []}
    assert item.original is not None
    assert ledger.counts.queued_for_review == 1 and ledger.counts.balanced()
    assert ledger.store.adjacent("acme", "Host:cmdb:H9", "runs_on", "in") == []


def test_an_event_its_pipeline_says_is_misrouted_is_dead_lettered_and_not_recorded_as_seen(ledger: Ledger) -> None:
    refused = PendingLedger(ledger.store)
    outcome = ledger.processor.process(json.dumps(GOOD), refused, lambda tenant: f"not here: {tenant}")
    assert outcome == "dead_lettered" and refused.counts.balanced()
    [letter] = refused.dead_letters
    assert (letter.stage, letter.reason, letter.tenant, letter.event_id) == ("validate", "not here: acme", "acme",
                                                                             "good-1")
    assert refused.seen == {} and refused.versions == {}, "nothing applied, and a resend where it belongs applies"
    ledger.store.commit(refused)
    accepted = PendingLedger(ledger.store)
    assert ledger.processor.process(json.dumps(GOOD), accepted, lambda tenant: None) == "applied"
