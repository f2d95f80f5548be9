"""The HTTP API for agents: one endpoint per traversal, the contract's JSON, the OpenAPI document
generated from the pydantic models (with what each parameter accepts, ``streams.api.parameters``),
``/metrics`` and ``/healthz``.

It reads the ledger as a RocksDB secondary (``state.changes.LedgerFollower``), so it runs beside a
writer on the same state directory. Before answering, it looks whether the directory changed (at
most every ``refresh_interval_s``) and reopens its reader if so; the cached engine then catches up
on the tenant's changed versions (``state.changes.versions_changed_since``) and invalidates the
answers they touch, so a cached answer is never staler than the reader's view. Requests are
serialised by one lock: a query is a few RocksDB reads, and the reader swaps under the lock.

With a Kafka ``bootstrap`` (``edgeledger serve --bootstrap``), every invalidation record the cache
emits is also produced to the ``cache-invalidations`` topic (``streams.api.cache_invalidations``),
asynchronously: a request never waits for the broker.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import uvicorn
from fastapi import Depends, FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from processors.cache import CachedQueryEngine, CacheStatus
from processors.freshness import stale_sources_for_queries
from processors.heap import SettledHeap
from processors.queries import QueryEngine, QueryRequest, StaleSources, no_stale_sources
from processors.query_requests import InvalidQuery, history_request_from, request_from
from processors.traversal import PlanRefused
from schemas.bounds import TENANT_PATTERN
from schemas.cache import CacheInvalidation
from schemas.ontology import Ontology, default_ontology
from schemas.query_params import (
    ApprovalParams,
    ChangedParams,
    DepthParams,
    HistoryParams,
    QueryParams,
    TraverseParams,
    TypedParams,
)
from schemas.results import HistoryResult, QueryResult
from schemas.slo import SloConfig, default_slo
from schemas.times import format_micros
from state.cache_store import CacheStore
from state.changes import LedgerFollower
from state.kv import RocksKV
from state.store import NO_TRANSACTION
from streams.agents.tools import Toolbox
from streams.agents.transports import mcp_lifespan, mount_mcp
from streams.api.cache_invalidations import InvalidationPublisher
from streams.api.parameters import (
    COMMON,
    DESCRIPTIONS,
    HISTORY_DESCRIPTION,
    UndocumentedValue,
    held_to,
    parameter_rules,
)
from streams.api.reads import add_read_routes
from streams.api.traces import TraceSink, add_trace_routes, default_trace_sink, recorded_answer
from streams.kafka.topics import TopicSettings
from streams.metrics import LedgerMetrics
from streams.processor import wall_clock_micros

CACHE_HEADER = "X-Edgeledger-Cache"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
REQUESTS_AT_STOP = 4
"""Seconds a stop (SIGTERM, Ctrl-C) gives requests in flight; with ``PUBLISH_AT_STOP``, `serve` ends within 10 s."""
PUBLISH_AT_STOP = 4.0
"""Seconds a stop gives queued cache invalidations to reach the broker; those that do not are counted as failed."""


# -- request and response models (the OpenAPI document is generated from these) -----------------------------
class ErrorOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    detail: str = Field(description="What is wrong with the request and how to fix it.")
    errors: list[dict[str, Any]] = Field(default_factory=list, description="One item per invalid parameter.")


class HealthOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["ok"] = "ok"
    last_tx: str | None = Field(description="Transaction time of the newest change the reader has seen.")
    cache_entries: int


Tenant = Annotated[str, PathParam(pattern=TENANT_PATTERN, description="Tenant to read; every read needs one.")]


SETTLE_EVERY_REQUESTS = 50
"""With CPython's own thresholds, a full collection of 70-100 ms every 900 or so requests made the
slowest answers. Settled every 50 requests (in-process, 20,000 requests on a 300k-event ledger,
three pairs interleaved with the code before): p99.9 68-73 -> 6.2-8.4 ms, max 109-116 -> 9.7-10.9
ms, p99 4.0-4.3 -> 4.5-5.7 ms (a young collection of 2-3 ms lands on every 50th request). Every 250
requests gave p99.9 19-25 ms."""

ERRORS: dict[int | str, dict[str, Any]] = {
    422: {"model": ErrorOut, "description": "The request is invalid; `detail` says why."}}


# -- the service behind the routes -------------------------------------------------------------------------------
class LedgerService:
    """The follower, the cached engine, metrics and the lock that serialises them; optionally the
    publisher of invalidation records (set ``publisher`` after construction).

    While the server runs, ``heap`` keeps the collector off what the service keeps alive (its read
    caches, the cache's memory tier), as ``load`` and workers do, collecting the young generations
    before each freeze (``SettledHeap.collect_young``: the framework leaves cycles behind)."""

    def __init__(self, state_dir: Path, cache_kv: RocksKV, ontology: Ontology, refresh_interval_s: float,
                 max_cache_entries: int, memory_cache_entries: int, slo: SloConfig | None,
                 metrics: LedgerMetrics, wall_clock: Callable[[], int]) -> None:
        self.ontology = ontology
        self.metrics = metrics
        self.wall_clock = wall_clock
        self.lock = threading.Lock()
        self._last_seen: tuple[int, int] = (NO_TRANSACTION, 0)
        """The newest transaction and the cache's size when ``health`` last looked."""
        self.closed = False
        self.publisher: InvalidationPublisher | None = None
        self.heap: SettledHeap | None = None
        self.follower = LedgerFollower(state_dir, refresh_interval_s)
        self.cache = CacheStore(cache_kv, max_cache_entries, memory_cache_entries)
        stale: StaleSources = no_stale_sources
        if slo is not None:
            stale = stale_sources_for_queries(ontology, slo, self.follower.source_activity, wall_clock)
        self.engine = CachedQueryEngine(
            self.follower, ontology, self.cache, self.follower.last_tx, self.follower.changes_since, stale,
            on_invalidation=self._invalidated,
        )
        self.engine_uncached = QueryEngine(self.follower, ontology)
        """For history, which is not cached; the follower swaps its reader underneath."""

    def _invalidated(self, record: CacheInvalidation) -> None:
        self.metrics.observe_invalidations(len(record.invalidated_keys))
        if self.publisher is not None:
            self.publisher.publish(record)

    def close(self) -> None:
        """Idempotent: an ASGI server may run the lifespan more than once over one app object."""
        if not self.closed:
            self.closed = True
            if self.publisher is not None:
                self.publisher.close(timeout_s=PUBLISH_AT_STOP)
            self.follower.close()
            self.cache.close()

    def _settle(self) -> None:
        if self.heap is not None:
            self.heap.after_event()

    def query(self, request: QueryRequest) -> tuple[QueryResult, CacheStatus]:
        with self.lock:
            self.follower.refresh()
            result, status = self.engine.run_with_status(request)
            self._settle()
        self.metrics.observe_query(result)
        if status != "bypass":
            self.metrics.observe_cache(status == "hit")
        return result, status

    def history(self, tenant: str, params: HistoryParams) -> HistoryResult:
        request = history_request_from(tenant, params, self.ontology, self.wall_clock())
        with self.lock:
            self.follower.refresh()
            result = self.engine_uncached.history(*request, self.follower)
            self._settle()
            return result

    def health(self) -> HealthOut:
        """Never waits behind a query: large traversals hold the lock for seconds, and a liveness probe
        with a short timeout would fail the server. While they do, it reports what it last saw."""
        if self.lock.acquire(blocking=False):
            try:
                self.follower.refresh()
                self._last_seen = (self.follower.last_tx(), len(self.cache))
            finally:
                self.lock.release()
        last, entries = self._last_seen
        return HealthOut(last_tx=format_micros(last) if last > NO_TRANSACTION else None, cache_entries=entries)


def _error(status: int, detail: str, errors: Sequence[dict[str, Any]] = ()) -> JSONResponse:
    return JSONResponse(status_code=status, content=ErrorOut(detail=detail, errors=list(errors)).model_dump())


def _single_valued(request: Request) -> None:
    """A query parameter given twice (``entity=a&entity=b``) is refused: answering for one of them
    would answer a question the caller did not ask."""
    seen: set[str] = set()
    for key, _ in request.query_params.multi_items():
        if key in seen:
            raise InvalidQuery(f"{key}: given more than once; give each parameter once")
        seen.add(key)


def _describe_validation(error: RequestValidationError) -> tuple[str, list[dict[str, Any]]]:
    items = []
    for item in error.errors():
        location = ".".join(str(part) for part in item.get("loc", ()) if part not in ("query", "path"))
        message = "unknown parameter" if item.get("type") == "extra_forbidden" else str(item.get("msg", "invalid"))
        items.append({"parameter": location, "message": message})
    detail = "; ".join(f"{i['parameter']}: {i['message']}" if i["parameter"] else i["message"] for i in items)
    return detail or "invalid request", items


# -- the app ---------------------------------------------------------------------------------------------------------
def create_app(
    state_dir: Path,
    *,
    cache_dir: Path | None = None,
    refresh_interval_s: float = 0.25,
    max_cache_entries: int = 50_000,
    memory_cache_entries: int = 2_000,
    ontology: Ontology | None = None,
    slo: SloConfig | None = None,
    metrics: LedgerMetrics | None = None,
    wall_clock: Callable[[], int] = wall_clock_micros,
    bootstrap: str | None = None,
    topic_prefix: str = "edgeledger.",
    trace_sink: TraceSink | None = None,
    mcp_tenant: str | None = None,
    mcp_allowed_hosts: list[str] | None = None,
) -> FastAPI:
    """The API over the ledger at ``state_dir``, opened read-only. ``cache_dir`` holds the cache's own
    RocksDB (a scratch area, cleared at start; default: a temporary directory removed at shutdown).
    With an ``slo``, answers that depend on a source past its max silence say ``unknown``, not ``none``.
    With a Kafka ``bootstrap``, invalidation records are produced to ``<topic_prefix>cache-invalidations``
    (created if missing; ``streams.api.cache_invalidations.PublisherSetupError`` when that fails).
    With ``mcp_tenant``, the MCP tools answer for that tenant at ``/mcp`` (``streams.agents``)."""
    ontology = ontology or default_ontology()
    metrics = metrics or LedgerMetrics()
    topics = TopicSettings(prefix=topic_prefix) if bootstrap is not None else None
    cache_path = cache_dir if cache_dir is not None else Path(tempfile.mkdtemp(prefix="edgeledger-cache-"))
    scratch = None if cache_dir is not None else cache_path
    service = None
    try:
        service = LedgerService(Path(state_dir), RocksKV(cache_path), ontology, refresh_interval_s,
                                max_cache_entries, memory_cache_entries, slo, metrics, wall_clock)
        if bootstrap is not None:
            service.publisher = InvalidationPublisher(bootstrap, topics, metrics)
    except BaseException:
        if service is not None:
            service.close()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            async with mcp_lifespan(mcp_run):
                with SettledHeap(collect_young=True, settle_every=SETTLE_EVERY_REQUESTS) as heap:
                    service.heap = heap
                    try:
                        yield
                    finally:
                        with service.lock:
                            service.heap = None
        finally:
            service.close()
            traces.close()
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)

    app = FastAPI(
        title="edgeledger",
        version="0.1.0",
        summary="Bounded, bi-temporal relationship questions over an organisation's knowledge graph.",
        description="Every read takes a tenant (in the path) and both clocks. Results follow the contract's "
                    "QueryResult JSON: distinct answers, the paths that reach them as edge ids, every edge with "
                    "both intervals and its evidence, counts, truncation and coverage.",
        lifespan=lifespan,
        dependencies=[Depends(_single_valued)],
    )
    app.state.service = service
    traces = trace_sink or default_trace_sink(Path(state_dir), bootstrap, topics)
    add_trace_routes(app, service, traces, wall_clock)
    rules = parameter_rules(ontology)
    documented = [Depends(held_to(rules))]
    add_read_routes(app, service, slo or default_slo(), wall_clock, documented, ERRORS)
    mcp_run = None if mcp_tenant is None else mount_mcp(
        app, Toolbox(service, mcp_tenant, traces, slo or default_slo(), wall_clock), mcp_allowed_hosts)

    def openapi() -> dict[str, Any]:
        """The generated document, with what the parameters accept stated from ``rules``."""
        if app.openapi_schema is None:
            app.openapi_schema = rules.describe(FastAPI.openapi(app))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(RequestValidationError)
    async def invalid_parameters(_: Request, error: RequestValidationError) -> JSONResponse:
        return _error(422, *_describe_validation(error))

    @app.exception_handler(UndocumentedValue)
    async def undocumented(_: Request, error: UndocumentedValue) -> JSONResponse:
        return _error(422, str(error), error.errors)

    @app.exception_handler(InvalidQuery)
    async def bad_request(_: Request, error: InvalidQuery) -> JSONResponse:
        return _error(422, str(error))

    @app.exception_handler(PlanRefused)
    async def refused(_: Request, error: PlanRefused) -> JSONResponse:
        return _error(422, str(error))

    def answer(name: str, tenant: str, params: QueryParams) -> Response:
        result, status = service.query(request_from(name, tenant, params, ontology, wall_clock()))
        if params.record:
            return recorded_answer(tenant, result, params.action, wall_clock(), traces, {CACHE_HEADER: status})
        return Response(result.model_dump_json(), media_type="application/json", headers={CACHE_HEADER: status})

    def route(name: str) -> dict[str, Any]:
        summary, description = DESCRIPTIONS[name]
        return {"path": f"/v1/tenants/{{tenant}}/{name}", "response_model": QueryResult, "responses": ERRORS,
                "summary": summary, "description": description + COMMON, "operation_id": name.replace("-", "_"),
                "tags": ["traversals"], "dependencies": documented}

    @app.get(**route("owners-of"))
    def owners_of(tenant: Tenant, params: Annotated[TypedParams, Query()]) -> Response:
        return answer("owners-of", tenant, params)

    @app.get(**route("dependents-of"))
    def dependents_of(tenant: Tenant, params: Annotated[DepthParams, Query()]) -> Response:
        return answer("dependents-of", tenant, params)

    @app.get(**route("approvals-required-for"))
    def approvals_required_for(tenant: Tenant, params: Annotated[ApprovalParams, Query()]) -> Response:
        return answer("approvals-required-for", tenant, params)

    @app.get(**route("changed-between"))
    def changed_between(tenant: Tenant, params: Annotated[ChangedParams, Query()]) -> Response:
        return answer("changed-between", tenant, params)

    @app.get(**route("neighbourhood"))
    def neighbourhood(tenant: Tenant, params: Annotated[DepthParams, Query()]) -> Response:
        return answer("neighbourhood", tenant, params)

    @app.get(**route("traverse"))
    def traverse(tenant: Tenant, params: Annotated[TraverseParams, Query()]) -> Response:
        return answer("traverse", tenant, params)

    @app.get("/v1/tenants/{tenant}/history", response_model=HistoryResult, responses=ERRORS,
             summary="Every version of the edges at an entity", description=HISTORY_DESCRIPTION,
             operation_id="history", tags=["history"], dependencies=documented)
    def history(tenant: Tenant, params: Annotated[HistoryParams, Query()]) -> HistoryResult:
        return service.history(tenant, params)

    @app.get("/healthz", response_model=HealthOut, summary="Liveness, and how far the reader has caught up",
             tags=["operations"])
    def healthz() -> HealthOut:
        return service.health()

    @app.get("/metrics", include_in_schema=False)
    def prometheus_metrics() -> Response:
        return Response(metrics.scrape(), media_type="text/plain; version=0.0.4; charset=utf-8")

    return app


def serve(state_dir: Path, host: str = "127.0.0.1", port: int = 8080, slo: SloConfig | None = None,
          bootstrap: str | None = None, topic_prefix: str = "edgeledger.", max_cache_entries: int = 50_000,
          memory_cache_entries: int = 2_000, ontology: Ontology | None = None, mcp_tenant: str | None = None) -> None:
    """``edgeledger serve``: the API and ``/metrics`` on one port, until interrupted; with ``bootstrap``,
    invalidation records also go to the ``cache-invalidations`` topic (flushed at shutdown). ``ontology``
    replaces the default (``serve --ontology``), as it did for the writer. With ``mcp_tenant``, ``/mcp`` too;
    on a loopback ``host`` it answers only requests addressed to it (DNS rebinding)."""
    local = [f"{name}:{port}" for name in ("127.0.0.1", "localhost", "[::1]")] if host in LOOPBACK else None
    app = create_app(state_dir, slo=slo, ontology=ontology, bootstrap=bootstrap, topic_prefix=topic_prefix,
                     max_cache_entries=max_cache_entries, memory_cache_entries=memory_cache_entries,
                     mcp_tenant=mcp_tenant, mcp_allowed_hosts=local)
    uvicorn.run(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=REQUESTS_AT_STOP)
