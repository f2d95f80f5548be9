"""Traces over HTTP: record one (``POST``, or ``record=true`` with an ``action`` on a traversal), read
one, and the ranked replays of a tenant's traces.

`serve` reads the ledger as a RocksDB secondary and never writes it, so a trace recorded here reaches
the ledger as a ``trace`` event: with ``serve --bootstrap`` it is produced to the ``traces`` topic,
keyed by tenant, and the worker applies it like any other; without a broker it is appended to a
JSON-lines file beside the state (``<state>.recorded-traces.jsonl``) that ``edgeledger load`` applies.
Either way the response carries the trace id at once; the trace is readable (``GET``) and replayed
once the ledger has applied it.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Annotated, Any, Protocol

import orjson
from confluent_kafka import Producer
from fastapi import Body, FastAPI
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from processors.queries import QueryEngine
from processors.query_requests import instant_param
from schemas.bounds import TENANT_PATTERN
from schemas.events import TraceEvent
from schemas.results import QueryResult
from schemas.times import format_micros
from state.kv import MemoryKV
from state.replays import catch_up, replay_one, replays_since
from state.trace_index import TraceIndex, trace_of
from streams.kafka.config import producer_config
from streams.kafka.topics import TopicSettings

TRACE_HEADER = "X-Edgeledger-Trace-Id"
Tenant = Annotated[str, PathParam(pattern=TENANT_PATTERN, description="Tenant; every read and record needs one.")]


class TraceSink(Protocol):
    def record(self, event: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class FileTraceSink:
    """Appends trace events, one JSON line each, for ``edgeledger load`` to apply."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def record(self, event: dict[str, Any]) -> None:
        line = orjson.dumps(event) + b"\n"
        with self._lock, self.path.open("ab") as out:
            out.write(line)

    def close(self) -> None:
        return None


class KafkaTraceSink:
    """Produces trace events to the ``traces`` topic, keyed by tenant; a request never waits for the
    broker (the producer's queue is flushed at close)."""

    def __init__(self, bootstrap: str, topics: TopicSettings) -> None:
        self.topic = topics.name("traces")
        self._producer = Producer(producer_config(bootstrap))

    def record(self, event: dict[str, Any]) -> None:
        self._producer.produce(self.topic, value=orjson.dumps(event), key=str(event["tenant"]).encode())
        self._producer.poll(0)

    def close(self) -> None:
        self._producer.flush(4.0)


def trace_id_for(event: dict[str, Any], now: int) -> str:
    """Deterministic in what was recorded and when, so the same request recorded twice is two traces."""
    digest = hashlib.blake2b(orjson.dumps([event, now], option=orjson.OPT_SORT_KEYS), digest_size=10).hexdigest()
    return f"tr-{digest}"


def trace_event(tenant: str, body: dict[str, Any], now: int) -> dict[str, Any]:
    """A contract ``trace`` event from a POST body (the event's fields but ``kind``, ``tenant`` and,
    optionally, ``trace_id``/``event_id``). Raises ``ValueError`` saying what is wrong."""
    event = {**body, "kind": "trace", "tenant": tenant}
    event.setdefault("trace_id", trace_id_for(event, now))
    event.setdefault("event_id", event["trace_id"])
    try:
        TraceEvent.model_validate(event)
    except ValidationError as error:
        raise ValueError("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())) from None
    return event


def answer_trace(tenant: str, result: QueryResult, action: str, now: int) -> dict[str, Any]:
    """The trace of an answer just given: its query, both clocks and every edge id it used."""
    edge_ids: dict[str, None] = {}
    for path in result.paths:
        edge_ids.update(dict.fromkeys(path.edges))
    body = {"query": result.query.model_dump(mode="json"), "valid_at": result.valid_at, "known_at": result.known_at,
            "edge_ids": list(edge_ids), "action": action}
    return trace_event(tenant, body, now)


def default_trace_sink(state_dir: Path, bootstrap: str | None, topics: TopicSettings | None) -> TraceSink:
    """To the ``traces`` topic with a broker; otherwise a file beside the state, for ``edgeledger load``."""
    if bootstrap is not None:
        return KafkaTraceSink(bootstrap, topics or TopicSettings())
    return FileTraceSink(state_dir.parent / f"{state_dir.name}.recorded-traces.jsonl")


def recorded_answer(tenant: str, result: QueryResult, action: str, now: int, sink: TraceSink,
                    headers: dict[str, str]) -> Response:
    """The answer, recorded as a trace: the contract's JSON unchanged, the trace id in a header."""
    event = answer_trace(tenant, result, action, now)
    sink.record(event)
    return Response(result.model_dump_json(), media_type="application/json",
                    headers={**headers, TRACE_HEADER: event["trace_id"]})


def add_trace_routes(app: FastAPI, service: Any, sink: TraceSink, wall_clock: Any) -> None:
    """The trace routes, over ``service`` (``streams.api.http.LedgerService``: its lock and follower)."""
    index = TraceIndex(MemoryKV())  # serve's own: the ledger directory is read-only here

    def engine() -> QueryEngine:
        return QueryEngine(service.follower, service.ontology)

    @app.post("/v1/tenants/{tenant}/traces", tags=["traces"], operation_id="record_trace",
              summary="Record an answer (a trace); returns its id")
    def record_trace(tenant: Tenant, body: dict[str, Any] = Body(...)) -> JSONResponse:
        try:
            event = trace_event(tenant, body, wall_clock())
        except ValueError as error:
            return JSONResponse(status_code=422, content={"detail": str(error), "errors": []})
        sink.record(event)
        return JSONResponse(status_code=202, content={"trace_id": event["trace_id"]},
                            headers={TRACE_HEADER: event["trace_id"]})

    @app.get("/v1/tenants/{tenant}/traces/replay", tags=["traces"], operation_id="replay_traces",
             summary="Recorded answers later changes touched, re-run and diffed, ranked")
    def replay(tenant: Tenant, since: str | None = None, known_at: str | None = None) -> JSONResponse:
        start = instant_param(since, "since")
        known = instant_param(known_at, "known_at")
        with service.lock:
            service.follower.refresh()
            found = replays_since(service.follower.store, index, engine(), tenant, start,
                                  wall_clock() if known is None else known)
        return JSONResponse([r.as_json() for r in found])

    @app.get("/v1/tenants/{tenant}/traces/{trace_id}", tags=["traces"], operation_id="show_trace",
             summary="One recorded trace, what it read, and its replay if a later change touched it")
    def show(tenant: Tenant, trace_id: str) -> JSONResponse:
        now = wall_clock()
        with service.lock:
            service.follower.refresh()
            store = service.follower.store
            catch_up(store, index, engine(), tenant)
            trace = trace_of(store, tenant, trace_id)
            if trace is None:
                return JSONResponse(status_code=404, content={"detail": f"no trace {trace_id!r}", "errors": []})
            replay = replay_one(store, index, engine(), trace, now)
            return JSONResponse({
                "trace_id": trace.trace_id, "tenant": trace.tenant, "action": trace.action, "query": trace.query,
                "valid_at": format_micros(trace.valid_at), "known_at": format_micros(trace.known_at),
                "recorded_at": format_micros(trace.tx_at),
                "edge_ids": list(trace.edge_ids) if trace.edge_ids is not None else None,
                "read": index.read_set(tenant, trace_id), "replay": replay.as_json() if replay else None})
