"""`load` then `history --json`: every origin of each version, as users script against it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.streams.cli.test_main import edgeledger

A, B, C = "Service:cmdb:A", "Service:cmdb:B", "Service:cmdb:C"


def _change(event_id: str, record: str, version: str, *edges: tuple[str, str], mode: str = "delta",
            detected_at: str = "2026-03-01T00:00:00Z") -> dict:
    return {"kind": "change", "event_id": event_id, "tenant": "acme", "mode": mode, "detected_at": detected_at,
            "source": {"system": "cmdb", "record": record, "version": version},
            "assert": [{"src": {"type": "Service", "id": src.removeprefix("Service:")}, "rel": "depends_on",
                        "dst": {"type": "Service", "id": dst.removeprefix("Service:")},
                        "evidence": f"{record} v{version}"} for src, dst in edges]}


def _load(tmp_path: Path, *events: dict) -> Path:
    lines = tmp_path / "events.jsonl"
    lines.write_text("".join(json.dumps(event) + "\n" for event in events))
    state = tmp_path / "state"
    summary = json.loads(edgeledger("load", str(lines), "--state", str(state), "--simulated-clock").stdout)
    assert summary["balanced"] and summary["dead_lettered"] == 0
    return state


def _history(state: Path, entity: str, *args: str) -> list[dict]:
    out = edgeledger("history", "--state", str(state), "--tenant", "acme", "--entity", entity, "--json", *args)
    return json.loads(out.stdout)["versions"]


def test_history_shows_each_versions_origins_and_a_revoked_version_leaves_the_other(tmp_path: Path) -> None:
    state = _load(
        tmp_path,
        {"kind": "clock", "now": "2026-03-01T00:00:00Z"},
        _change("v1", "svc/a", "1", (A, B)),
        {"kind": "clock", "now": "2026-03-02T00:00:00Z"},
        _change("v2", "svc/a", "2", (A, B)),
        {"kind": "clock", "now": "2026-03-03T00:00:00Z"},
        {"kind": "revoke_source", "event_id": "rs-1", "tenant": "acme", "reason": "v1 is corrupt",
         "source": {"system": "cmdb", "record": "svc/a", "version": "1"}},
    )
    (version,) = _history(state, A)
    assert version["tx_to"] is None, "v2 still states A depends_on B"
    assert [(o["source"], o["event_id"], o["evidence"], o["tx_to"]) for o in version["origins"]] == [
        ({"system": "cmdb", "record": "svc/a", "version": "1"}, "v1", "svc/a v1", "2026-03-03T00:00:00Z"),
        ({"system": "cmdb", "record": "svc/a", "version": "2"}, "v2", "svc/a v2", None)]
    (before,) = _history(state, A, "--known-at", "2026-03-02T12:00:00Z")
    assert [o["tx_to"] for o in before["origins"]] == [None, None], "as known then, both stated it"
    corrections = edgeledger("corrections", "--state", str(state), "--tenant", "acme").stdout
    assert "revoke_source" not in corrections
    text = edgeledger("history", "--state", str(state), "--tenant", "acme", "--entity", A).stdout
    assert "stated by svc/a@2 (1 ended)" in text


def test_a_snapshot_omitting_an_edge_another_record_states_ends_only_its_origin(tmp_path: Path) -> None:
    resent = [_change(f"{record}-{n}", record, "1", (A, C), mode="snapshot") for n in range(3)
              for record in ("rel/x", "rel/y")]
    state = _load(tmp_path, {"kind": "clock", "now": "2026-03-01T00:00:00Z"}, *resent,
                  {"kind": "clock", "now": "2026-04-01T00:00:00Z"},
                  _change("rel/y-drop", "rel/y", "2", mode="snapshot", detected_at="2026-04-01T00:00:00Z"))
    (version,) = _history(state, A)
    assert version["tx_to"] is None and version["valid_to"] is None
    live = [(o["source"]["record"], o["valid_to"]) for o in version["origins"] if o["tx_to"] is None]
    assert live == [("rel/x", None), ("rel/y", "2026-04-01T00:00:00Z")]
    assert json.loads(edgeledger("corrections", "--state", str(state), "--tenant", "acme", "--json").stdout) == []
