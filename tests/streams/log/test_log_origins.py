"""The `edge-versions` log carries every change of a version's origins: a replica, and a worker that
rebuilt its state from the log, hold the same origins as the worker and as `load`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streams.cli.load import load_into
from streams.kafka.broker import EmbeddedBroker
from streams.kafka.produce import produce_files
from streams.kafka.topics import ensure_topics
from tests.support.pipeline import batch_records, comparable_state, fresh_topics
from tests.support.workers import replicate, run_to_the_end

pytestmark = pytest.mark.integration


def _change(event_id: str, tenant: str, record: str, version: str, dst: str | None, mode: str = "delta") -> str:
    edges = [] if dst is None else [{"src": {"type": "Service", "id": "cmdb:A"}, "rel": "depends_on",
                                      "dst": {"type": "Service", "id": dst}, "evidence": f"{record} v{version}"}]
    return json.dumps({"kind": "change", "event_id": event_id, "tenant": tenant, "mode": mode,
                       "detected_at": "2026-03-01T00:00:00Z", "assert": edges,
                       "source": {"system": "cmdb", "record": record, "version": version}})


def _rounds(tenant: str) -> list[list[str]]:
    """The two cases of issue 33 for one tenant, in three rounds the worker applies in batches of their
    own: facts stated; restated by a later version and by a second record (origins added); the first
    version revoked and the second record's snapshot omitting its fact (origins ended)."""
    return [
        [_change(f"{tenant}-1", tenant, "svc/a", "1", "cmdb:B"),
         _change(f"{tenant}-x", tenant, "rel/x", "1", "cmdb:C", "snapshot")],
        [_change(f"{tenant}-2", tenant, "svc/a", "2", "cmdb:B"),
         *[_change(f"{tenant}-{record}-{n}", tenant, record, "1", "cmdb:C", "snapshot") for n in range(2)
           for record in ("rel/x", "rel/y")]],
        [json.dumps({"kind": "revoke_source", "event_id": f"{tenant}-3", "tenant": tenant, "reason": "corrupt",
                     "source": {"system": "cmdb", "record": "svc/a", "version": "1"}}),
         _change(f"{tenant}-drop", tenant, "rel/y", "2", None, "snapshot")],
    ]


def test_a_replica_and_a_rebuilt_worker_hold_every_origin(kafka_broker: EmbeddedBroker, tmp_path: Path) -> None:
    bootstrap, topics = kafka_broker.bootstrap, fresh_topics()
    ensure_topics(bootstrap, topics)
    files = []
    for number, lines in enumerate(zip(*(_rounds(tenant) for tenant in ("acme", "globex", "initech")), strict=True)):
        files.append(tmp_path / f"round-{number}.jsonl")
        files[-1].write_text("".join(line + "\n" for tenant_lines in lines for line in tenant_lines))
        produce_files([files[-1]], bootstrap, topics, progress=False)
        run_to_the_end(tmp_path / "worker", bootstrap, topics, "g-origins")
    kinds = {r["kind"] for r in batch_records(bootstrap, topics)}
    assert {"statement", "filing"} <= kinds, "the log carries changes of statements and of who states a version"

    replicate(tmp_path / "replica", bootstrap, topics)
    rebuilt = run_to_the_end(tmp_path / "rebuilt", bootstrap, topics, "g-origins")  # another state: rebuilds
    assert any(" rebuilt partition " in line for _, line in rebuilt.stderr), rebuilt.tail(40)
    load_into(tmp_path / "load", files, simulated_clock=False, ontology_path=None)

    worker = comparable_state(tmp_path / "worker")
    origins = sorted(tuple((record, live) for _, record, _, _, _, live in version[-1]) for version in worker)
    assert origins.count((("svc/a", False), ("svc/a", True))) == 3, "per tenant: v1 ended, v2 states A -> B"
    assert origins.count((("rel/x", True), ("rel/y", False), ("rel/y", True))) == 3, "rel/y cut at its omission"
    assert comparable_state(tmp_path / "replica") == worker
    assert comparable_state(tmp_path / "rebuilt") == worker
    assert comparable_state(tmp_path / "load") == worker
