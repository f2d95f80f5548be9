"""The bounds on what events carry and on what reads take agree: what can be written can be read."""

import pytest
from pydantic import ValidationError

from schemas.events import EVENT_ADAPTER, MAX_NAME
from schemas.query_params import ENTITY_TEXT


def test_a_read_takes_the_longest_canonical_id_an_event_can_make() -> None:
    assert len("T" * MAX_NAME + ":" + "i" * MAX_NAME) == ENTITY_TEXT


def test_a_trace_query_json_cannot_hold_is_a_validation_error_not_a_crash() -> None:
    trace = {"kind": "trace", "event_id": "t-1", "tenant": "acme", "trace_id": "t-1", "query": {"n": 2**70},
             "valid_at": "2026-05-01", "known_at": "2026-05-01"}
    with pytest.raises(ValidationError, match="query: not JSON the ledger can keep"):
        EVENT_ADAPTER.validate_python(trace)
