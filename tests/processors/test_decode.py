"""An event is validated from its bytes in one step; only a refused one is decoded again in two
steps, which then decide, as they did alone before. What the one step accepts, the two must accept
and build the same model from, or it would let through what the ledger refused before
(pydantic-core reads ``NaN`` and ``1e999``, which orjson refuses)."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from schemas.events import validate_event, validate_event_json
from tests.support.harness import Ledger

CHANGE = {"kind": "change", "event_id": "c-1", "tenant": "acme", "detected_at": "2026-05-01T00:00:00Z",
          "mode": "delta", "source": {"system": "cmdb", "record": "svc/S1", "version": "3"},
          "assert": [{"src": {"type": "Service", "id": "cmdb:S1", "name": "billing"}, "rel": "depends_on",
                      "dst": {"type": "Host", "id": "cmdb:H1"}, "valid_from": "2026-04-01",
                      "valid_to": None, "evidence": "cmdb row", "confidence": 0.9, "phrase": None}],
          "retract": [{"src": {"type": "Service", "id": "cmdb:S1"}, "rel": "other",
                       "dst": {"type": "Host", "id": "cmdb:H2"}, "phrase": "runs on"}]}
TRACE = {"kind": "trace", "event_id": "t-1", "tenant": "acme", "trace_id": "tr-1",
         "query": {"kind": "owners-of", "entity": "Service:billing", "limits": [1, 2.5, {"depth": 3}]},
         "valid_at": "2026-04-22T00:00:00Z", "known_at": "2026-04-22T00:00:00Z", "action": "approval_routing"}
OTHERS = [
    {"kind": "revoke", "event_id": "r-1", "tenant": "acme", "edge_id": "e0123456789abcdef", "reason": "wrong"},
    {"kind": "heartbeat", "event_id": "h-1", "tenant": "acme", "source": {"system": "hr"},
     "detected_at": "2026-05-01T00:00:00+02:00"},
    {"kind": "clock", "now": "2026-05-01"},
    {"kind": "merge", "event_id": "m-1", "tenant": "acme", "keep": "Service:a", "absorb": "Service:b",
     "actor": "ana"},
]


def validated_from_bytes(raw: bytes) -> object:
    try:
        return validate_event_json(raw)
    except ValidationError:
        return None


def validated_in_two_steps(raw: bytes) -> object:
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(document, dict):
        return None
    try:
        return validate_event(document)
    except ValidationError:
        return None


def assert_one_step_accepts_only_what_two_steps_accept(raw: bytes) -> None:
    """What the one step accepts, the two steps accept as the same model. The reverse need not hold:
    the ledger decodes a refused event again in two steps and goes by that (an integer beyond 64 bits
    in a trace query is a float to orjson, an integer to pydantic-core, which orjson cannot write)."""
    fast, slow = validated_from_bytes(raw), validated_in_two_steps(raw)
    if fast is not None:
        assert slow is not None and fast == slow, (raw, fast, slow)


ODD_TOKENS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1" + "0" * 30, "-0.0", "1E-400", "true",
              "null", '"\\ud800"', '"\\udc00x"', '"\\ud83d\\ude00"', '"\\u0000"', "[]", "{}", '""', "0.5", "1"]
"""JSON and near-JSON the two parsers could read differently: non-finite and huge numbers, lone and
paired surrogate escapes, NUL, empty containers."""

STRAY_BYTES = [b"\xff", b"\xef\xbb\xbf", b"\xc3", b" ", b"\r\n", b",", b"}"]
"""Bytes a broken producer might slip in: not UTF-8, a byte order mark, a cut sequence, stray syntax."""

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)


def _paths(document: object, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(document, dict):
        for key, value in document.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found += _paths(value, (*prefix, index))
    return found


def _replaced(document: object, path: tuple, marker: str) -> object:
    if not path:
        return marker
    copy = json.loads(json.dumps(document))
    node = copy
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = marker
    return copy


@st.composite
def event_bytes(draw) -> bytes:
    """A valid event with one value replaced (by odd JSON or any JSON value, surrogates and non-finite
    numbers included) and, sometimes, a few raw bytes changed."""
    document = draw(st.sampled_from([CHANGE, TRACE, *OTHERS]))
    path = draw(st.sampled_from(_paths(document)))
    # json.dumps writes NaN, Infinity and lone surrogates (as \\ud800), as a careless source might
    odd = st.sampled_from(ODD_TOKENS) | json_values.map(lambda value: json.dumps(value, allow_nan=True))
    token = draw(odd)
    raw = json.dumps(_replaced(document, path, "\x00MARK\x00")).replace('"\\u0000MARK\\u0000"', token).encode()
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.sampled_from(STRAY_BYTES)) + raw[at:]
    return raw


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event_bytes())
def test_what_one_step_accepts_two_steps_accept_as_the_same_event(raw: bytes) -> None:
    assert_one_step_accepts_only_what_two_steps_accept(raw)


@pytest.mark.parametrize("document", [CHANGE, TRACE, *OTHERS], ids=lambda d: d["kind"])
def test_valid_events_validate_alike(document: dict) -> None:
    raw = json.dumps(document).encode()
    assert validated_from_bytes(raw) is not None
    assert_one_step_accepts_only_what_two_steps_accept(raw)


def test_an_event_only_the_two_steps_accept_is_applied_as_before() -> None:
    line = json.dumps(TRACE).replace("2.5", "1" + "0" * 30)
    assert validated_from_bytes(line.encode()) is None and validated_in_two_steps(line.encode()) is not None
    ledger = Ledger().send(line)
    assert ledger.counts.applied == 1 and not list(ledger.store.dead_letters())


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_trace_query_with_a_number_json_lacks_is_refused(number: str) -> None:
    raw = json.dumps(TRACE).replace("2.5", number).encode()
    assert validated_from_bytes(raw) is None
    assert_one_step_accepts_only_what_two_steps_accept(raw)


def test_a_finite_trace_query_is_kept_as_sent() -> None:
    event = validated_from_bytes(json.dumps(TRACE).encode())
    assert event is not None and event.query == TRACE["query"]


@pytest.mark.parametrize("number", ["NaN", "-Infinity", "1e999"])
def test_the_ledger_dead_letters_such_an_event_with_the_reason_it_gave_before(number: str) -> None:
    line = json.dumps(TRACE).replace("2.5", number)
    ledger = Ledger().send(line, json.dumps(CHANGE))
    (letter,) = ledger.store.dead_letters()
    assert letter.stage == "decode" and "malformed JSON" in letter.reason
    assert letter.original == line
    assert ledger.counts.applied == 1 and ledger.counts.dead_lettered == 1 and ledger.counts.balanced()


def test_a_rejected_assertion_names_its_event_in_the_dead_letter() -> None:
    """Validated from its bytes, the event has no decoded document: tenant and event id come from it."""
    line = json.dumps(CHANGE).replace('"depends_on"', '"likes"')
    (letter,) = Ledger().send(line).store.dead_letters()
    assert (letter.stage, letter.tenant, letter.event_id) == ("apply", "acme", "c-1")


def test_a_repeated_key_takes_its_last_value() -> None:
    raw = json.dumps(CHANGE).replace('"tenant": "acme"', '"tenant": "bad tenant!", "tenant": "acme"').encode()
    event = validated_from_bytes(raw)
    assert event is not None and event.tenant == "acme"
    assert_one_step_accepts_only_what_two_steps_accept(raw)
