"""The value types' helpers: ``fields_of`` reads a validated event's fields as pydantic does."""

from pydantic import BaseModel

from processors.model import fields_of
from schemas.events import validate_event

EVENTS = [
    {"kind": "change", "event_id": "e1", "tenant": "acme", "detected_at": "2026-05-03T08:00:00Z",
     "source": {"system": "cmdb", "record": "svc/1", "version": "7"}, "mode": "snapshot",
     "assert": [{"src": {"type": "Service", "id": "s1", "name": "Payments", "aliases": ["pay"]},
                 "rel": "owned_by", "dst": {"type": "Team", "name": "Platform"},
                 "valid_from": "2026-04-01", "evidence": "owner field", "confidence": 0.9}],
     "retract": [{"src": {"type": "Service", "id": "s1"}, "rel": "depends_on",
                  "dst": {"type": "Service", "id": "s2"}}]},
    {"kind": "revoke", "event_id": "e2", "tenant": "acme", "edge_id": "e0123", "reason": "wrong"},
    {"kind": "heartbeat", "event_id": "e3", "tenant": "acme", "source": {"system": "hr"},
     "detected_at": "2026-05-03T08:00:00Z"},
    {"kind": "clock", "now": "2026-05-03T08:00:00Z"},
]


def _models(model: BaseModel):
    yield model
    for value in fields_of(model).values():
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, BaseModel):
                yield from _models(item)


def test_fields_of_a_validated_model_are_its_attributes_defaults_included() -> None:
    checked = 0
    for document in EVENTS:
        for model in _models(validate_event(document)):
            assert fields_of(model) == {name: getattr(model, name) for name in type(model).model_fields}
            checked += 1
    assert checked == 12  # 4 events, 2 sources, an assertion, a retraction and their 4 mentions


def test_a_version_as_known_at_hides_a_closing_recorded_later_and_is_not_there_before_it() -> None:
    from processors.model import EdgeVersion

    closed = EdgeVersion(edge_id="e1", tenant="acme", src="Service:cmdb:S1", rel="owned_by", dst="Team:hr:T1",
                         valid_from=None, valid_to=None, tx_from=10, tx_to=20, authority="cmdb", source_record=None,
                         source_version=None, evidence="", confidence=None, origin="e1", supersedes=(),
                         event_id="ev-1", detected_at=None)
    assert closed.as_known_at(9) is None
    assert closed.as_known_at(15) == closed._replace(tx_to=None) and closed.closed_as_known_at(15) is None
    assert closed.as_known_at(20) is closed and closed.closed_as_known_at(20) == 20
    assert closed._replace(tx_to=None).as_known_at(30).tx_to is None
