"""The bounds on what events carry and on what reads take agree: what can be written can be read."""

import pytest
from pydantic import ValidationError

from schemas.bounds import MAX_NAME
from schemas.events import EVENT_ADAPTER
from schemas.query_params import PARAMS, HistoryParams


def test_a_read_takes_the_longest_canonical_id_an_event_can_make() -> None:
    mention = {"type": "T" * MAX_NAME, "id": "i" * MAX_NAME}
    change = {"kind": "change", "event_id": "c-1", "tenant": "acme", "source": {"system": "cmdb"},
              "detected_at": "2026-05-01", "assert": [{"src": mention, "rel": "depends_on", "dst": mention}]}
    EVENT_ADAPTER.validate_python(change)
    anchor = f"{mention['type']}:{mention['id']}"
    required = {"traverse": {"edges": "depends_on"}, "changed-between": {"from": "2026-01-01"}}
    for name, params in PARAMS.items():
        params.model_validate({"entity": anchor, **required.get(name, {})})
    HistoryParams.model_validate({"entity": anchor})


def test_a_trace_query_json_cannot_hold_is_a_validation_error_not_a_crash() -> None:
    trace = {"kind": "trace", "event_id": "t-1", "tenant": "acme", "trace_id": "t-1", "query": {"n": 2**70},
             "valid_at": "2026-05-01", "known_at": "2026-05-01"}
    with pytest.raises(ValidationError, match="query: not JSON the ledger can keep"):
        EVENT_ADAPTER.validate_python(trace)
