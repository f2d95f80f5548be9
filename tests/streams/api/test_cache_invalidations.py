"""`edgeledger serve --bootstrap`: the cache's invalidation records reach the `cache-invalidations` topic
of a real (embedded) broker, exactly the ones a change causes; undelivered records are counted and logged."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from fastapi.testclient import TestClient

from schemas.cache import CacheInvalidation
from streams.api.cache_invalidations import InvalidationPublisher
from streams.api.http import create_app
from streams.cli.load import load_into
from streams.kafka.broker import EmbeddedBroker
from streams.kafka.config import ADMIN_DEFAULTS
from streams.kafka.topics import TopicSettings
from streams.metrics import LedgerMetrics
from tests.support.api import BASE, CONNECTOR, DEMO, cmdb_change, edge, load
from tests.support.kafka import read_all
from tests.support.wait import wait_until

UNRELATED = "Service:cmdb:S1"


def fresh_prefix() -> str:
    """Topics of their own for each test: the broker lives for the whole session."""
    return f"test-{uuid.uuid4().hex[:10]}."


def topics_at(bootstrap: str) -> set[str]:
    return set(AdminClient({**ADMIN_DEFAULTS, "bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def cache_status(client: TestClient, path: str, params: dict) -> str:
    response = client.get(f"{BASE}/{path}", params=params)
    assert response.status_code == 200, response.text
    return response.headers["X-Edgeledger-Cache"]


@pytest.mark.integration
def test_serve_publishes_exactly_the_invalidations_a_change_causes(kafka_broker: EmbeddedBroker,
                                                                   tmp_path: Path) -> None:
    state = tmp_path / "ledger"
    load_into(state, [DEMO], simulated_clock=True, ontology_path=None)
    prefix = fresh_prefix()
    topic = f"{prefix}cache-invalidations"
    metrics = LedgerMetrics()
    app = create_app(state, cache_dir=tmp_path / "cache", refresh_interval_s=0, metrics=metrics,
                     bootstrap=kafka_broker.bootstrap, topic_prefix=prefix)
    assert topic in topics_at(kafka_broker.bootstrap), "the topic is created at startup"
    owners, unrelated = {"entity": CONNECTOR}, {"entity": UNRELATED}

    with TestClient(app) as client:
        service = app.state.service
        assert cache_status(client, "owners-of", owners) == "miss"
        assert cache_status(client, "owners-of", unrelated) == "miss"
        (owners_key,) = service.cache.keys_reading(("acme", CONNECTOR, "owned_by", "out"))
        assert owners_key.startswith("owners-of:")

        # Ownership of the connector moves: its owners-of answer read that adjacency.
        load(state, {"kind": "clock", "now": "2026-06-01T09:00:00Z"},
             cmdb_change("cmdb-9001", "ci/CI0042", edge(("Component", "cmdb:CI0042"), "owned_by",
                                                         ("Team", "hr:T-SEC"), "2026-06-01")))
        assert cache_status(client, "owners-of", owners) == "miss"
        assert cache_status(client, "owners-of", unrelated) == "hit"
        history = client.get(f"{BASE}/history", params={"entity": CONNECTOR, "rel": "owned_by"}).json()
        caused = sorted(v["edge_id"] for v in history["versions"]
                        if v["tx_from"].startswith("2026-06-01T09") or (v["tx_to"] or "").startswith("2026-06-01T09"))
        assert len(caused) >= 2, "the new owner's version and the closed belief at least"

        # A change that touches neither answer's read set (a dependent of S1, not its owner) publishes nothing.
        load(state, {"kind": "clock", "now": "2026-06-02T09:00:00Z"},
             cmdb_change("cmdb-9002", "svc/S7", edge(("Service", "cmdb:S7"), "depends_on", ("Service", "cmdb:S1"))))
        assert cache_status(client, "owners-of", owners) == "hit"
        assert cache_status(client, "owners-of", unrelated) == "hit"
        assert client.get("/healthz").json()["last_tx"].startswith("2026-06-02")
        publisher = service.publisher
    # Leaving the client ran the shutdown: the producer was flushed.

    assert (publisher.published, publisher.failed) == (1, 0)
    (message,) = read_all(kafka_broker.bootstrap, topic)
    assert message.key() == b"acme"
    record = CacheInvalidation.model_validate_json(message.value())
    assert record == CacheInvalidation(tenant="acme", causing_edge_ids=caused, invalidated_keys=[owners_key],
                                       caused_by={owners_key: caused})
    sample = metrics.registry.get_sample_value
    assert sample("edgeledger_cache_invalidation_records_total", {"result": "published"}) == 1
    assert sample("edgeledger_cache_invalidation_records_total", {"result": "failed"}) == 0
    assert sample("edgeledger_cache_invalidations_total") == 1


def record(tenant: str = "acme") -> CacheInvalidation:
    return CacheInvalidation(tenant=tenant, causing_edge_ids=["e-1", "e-2"], invalidated_keys=["owners-of:k:-:-"],
                             caused_by={"owners-of:k:-:-": ["e-1", "e-2"]})


@pytest.mark.integration
def test_an_undelivered_record_is_counted_and_logged_with_its_keys(kafka_broker: EmbeddedBroker,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """The topic does not exist (and producers may not create topics): delivery times out."""
    metrics = LedgerMetrics()
    publisher = InvalidationPublisher(kafka_broker.bootstrap, TopicSettings(prefix=fresh_prefix()), metrics,
                                      ensure_topic=False, producer_overrides={"message.timeout.ms": 500})
    try:
        with caplog.at_level(logging.ERROR, logger="streams.api.cache_invalidations"):
            started = time.monotonic()
            publisher.publish(record())
            assert time.monotonic() - started < 0.5, "publishing does not wait for the broker"
            wait_until(lambda: publisher.failed, "the delivery to time out", timeout=20)
    finally:
        publisher.close(timeout_s=1)
    assert (publisher.published, publisher.failed) == (0, 1)
    (logged,) = [r.getMessage() for r in caplog.records if "NOT published" in r.getMessage()]
    assert "tenant=acme" in logged and "owners-of:k:-:-" in logged and "'e-1', 'e-2'" in logged
    assert metrics.registry.get_sample_value("edgeledger_cache_invalidation_records_total",
                                             {"result": "failed"}) == 1


@pytest.mark.integration
def test_records_still_queued_at_shutdown_are_reported_not_dropped(kafka_broker: EmbeddedBroker,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    publisher = InvalidationPublisher(kafka_broker.bootstrap, TopicSettings(prefix=fresh_prefix()),
                                      ensure_topic=False)
    with caplog.at_level(logging.ERROR, logger="streams.api.cache_invalidations"):
        publisher.publish(record("acme"))
        publisher.publish(record("globex"))
        publisher.close(timeout_s=0.5)
        publisher.publish(record("initech"))  # after close: refused, and said so
    assert (publisher.published, publisher.failed) == (0, 3)
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert all(f"tenant={tenant}" in logged for tenant in ("acme", "globex", "initech"))


@pytest.mark.parametrize(("args", "says"), [
    (["--bootstrap", ""], "--bootstrap is empty"),
    (["--bootstrap", "127.0.0.1:1", "--topic-prefix", "bad prefix/"], "--topic-prefix"),
    (["--cache-memory-entries", "-1"], "--cache-memory-entries"),
])
def test_serve_refuses_bad_options_in_one_line(tmp_path: Path, args: list[str], says: str) -> None:
    done = subprocess.run([sys.executable, "-m", "streams.cli.main", "serve", "--state", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and says in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
