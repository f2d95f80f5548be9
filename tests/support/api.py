"""The demo ledger the HTTP API tests read, and the events they load into it beside a running API."""

from __future__ import annotations

import json
from pathlib import Path

from streams.cli.demo import DEMO_EVENTS
from streams.cli.load import load_into

DEMO = Path(DEMO_EVENTS)
CONNECTOR = "Component:cmdb:CI0042"
BASE = "/v1/tenants/acme"


def load(state: Path, *lines: dict) -> None:
    """Load ``lines`` into the ledger at ``state``, as a writer beside the API does (each call its own file)."""
    events = state.parent / f"events-{len(list(state.parent.glob('events-*')))}.jsonl"
    events.write_text("".join(json.dumps(line) + "\n" for line in lines))
    load_into(state, [events], simulated_clock=True, ontology_path=None)


def cmdb_change(event_id: str, record: str, *asserts: dict) -> dict:
    return {"kind": "change", "event_id": event_id, "tenant": "acme",
            "source": {"system": "cmdb", "record": record, "version": "9"}, "detected_at": "2026-06-01T00:00:00Z",
            "mode": "delta", "assert": list(asserts)}


def edge(src: tuple[str, str], rel: str, dst: tuple[str, str], valid_from: str | None = None) -> dict:
    return {"src": {"type": src[0], "id": src[1]}, "rel": rel, "dst": {"type": dst[0], "id": dst[1]},
            "valid_from": valid_from, "evidence": "test"}


def is_a_read(operation: str) -> bool:
    """An operation (``GET /path``) the fuzz tests call freely: every GET but the trace routes that replay
    and show (their own tests, ``tests/streams/api/test_traces.py``); the trace list is a read."""
    return operation.startswith("GET ") and ("/traces" not in operation or operation.endswith("/traces"))


ONE_QUESTION_EACH: dict[str, dict[str, object]] = {
    "owners-of": {"entity": "settlement connector"},
    "dependents-of": {"entity": CONNECTOR, "depth": 2},
    "approvals-required-for": {"entity": CONNECTOR},
    "changed-between": {"entity": CONNECTOR, "from": "2026-03-01", "to": "2026-06-01"},
    "neighbourhood": {"entity": CONNECTOR},
    "traverse": {"entity": CONNECTOR, "edges": "depends_on:in,owned_by:out", "max_depth": 2},
}
"""A question on the demo's ledger for each traversal, as HTTP query parameters and tool arguments."""
