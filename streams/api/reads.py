"""The list reads over HTTP: corrections, the review queue, traces, dead letters, and freshness. Each
returns what the CLI's ``--json`` prints for the same read (``streams.listings`` builds both), paged.

**Paging.** ``limit`` items a page (default 100, at most 1,000) and ``next_cursor`` to continue after
the last item returned, ``null`` on the last page. A cursor is opaque: it pins the first page's
``known_at`` (so the pages make one listing, however much is recorded meanwhile), counts the items
given and fingerprints the last of them, and a cursor whose listing no longer holds that item there
is refused (422) rather than answered with skipped or repeated items. Freshness is one report, not
a list, and is not paged.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable
from typing import Annotated, Any, Literal

import orjson
from fastapi import FastAPI, Query
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field

from processors.query_requests import InvalidQuery, instant_param
from schemas.bounds import TENANT_PATTERN
from schemas.query_params import Instant
from schemas.results import CorrectionOut
from schemas.slo import SloConfig
from schemas.times import format_micros
from state.store import LedgerStore
from streams import listings
from streams.cli.freshness import FreshnessReport, freshness_report

PAGE_DEFAULT = 100
PAGE_MOST = 1_000
Tenant = Annotated[str, PathParam(pattern=TENANT_PATTERN, description="Tenant to read; every read needs one.")]


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReviewOut(Out):
    review_id: str
    tenant: str
    event_id: str
    tx_at: str = Field(description="Transaction time the item was queued (ISO-8601, UTC).")
    category: str
    reason: str
    details: dict[str, Any]
    original: str | None


class TraceOut(Out):
    trace_id: str
    tenant: str
    action: str
    query: dict[str, Any]
    valid_at: str | None
    known_at: str | None
    recorded_at: str | None = Field(description="Transaction time the ledger applied the trace.")
    edge_ids: list[str] | None = Field(description="Edge ids the answer used; null when they are re-derived.")


class DeadLetterOut(Out):
    tx_at: str | None
    stage: Literal["decode", "validate", "apply"]
    reason: str
    original: str
    tenant: str | None
    event_id: str | None
    original_base64: str | None
    input_topic: str | None
    input_partition: int | None
    input_offset: int | None


class PageParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    known_at: Instant = None
    limit: int = Field(PAGE_DEFAULT, ge=1, le=PAGE_MOST, description="Items in this page.")
    cursor: str | None = Field(None, max_length=200, description=(
        "`next_cursor` of the page before, to continue after its last item; only a cursor this API gave. "
        "It carries that page's `known_at`: give the same one or none."))


class Page(Out):
    known_at: str = Field(description="Transaction time the listing is as of (only what was recorded by then).")
    next_cursor: str | None = Field(description="Give it as `cursor` for the next page; null on the last page.")


class CorrectionPage(Page):
    items: list[CorrectionOut]


class ReviewPage(Page):
    items: list[ReviewOut]


class TracePage(Page):
    items: list[TraceOut]


class DeadLetterPage(Page):
    items: list[DeadLetterOut]


class FreshnessParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    known_at: Instant = None
    since: Instant = None
    until: Instant = None


# -- cursors ---------------------------------------------------------------------------------------------------------
def _fingerprint(item: dict[str, Any]) -> str:
    return hashlib.blake2b(orjson.dumps(item, option=orjson.OPT_SORT_KEYS), digest_size=6).hexdigest()


def cursor_for(known: int, given: int, last: dict[str, Any]) -> str:
    raw = orjson.dumps({"k": known, "n": given, "h": _fingerprint(last)})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def read_cursor(cursor: str) -> tuple[int, int, str]:
    """(known_at, items given, fingerprint of the last); ``InvalidQuery`` for any text this API did not give."""
    try:
        data = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        known, given, mark = data["k"], data["n"], data["h"]
    except (ValueError, TypeError, KeyError, binascii.Error, orjson.JSONDecodeError):
        raise InvalidQuery("cursor: not a cursor this API gave; give next_cursor from the page before") from None
    if not (isinstance(known, int) and isinstance(given, int) and given >= 1 and isinstance(mark, str)):
        raise InvalidQuery("cursor: not a cursor this API gave; give next_cursor from the page before")
    return known, given, mark


def page_of(items_as_of: Callable[[int], list[dict[str, Any]]], params: PageParams, now: int) -> dict[str, Any]:
    """One page of the listing ``items_as_of(known)`` gives, as ``params`` ask."""
    known = instant_param(params.known_at, "known_at")
    start = 0
    if params.cursor is not None:
        pinned, start, mark = read_cursor(params.cursor)
        if known is not None and known != pinned:
            raise InvalidQuery(f"cursor: it continues a listing as of {format_micros(pinned)}; give that known_at "
                               "or none")
        known = pinned
    known = now if known is None else known
    items = items_as_of(known)
    if start and (start > len(items) or _fingerprint(items[start - 1]) != mark):
        raise InvalidQuery("cursor: the listing no longer holds the page before's last item; start again")
    page = items[start:start + params.limit]
    more = start + len(page) < len(items)
    return {"known_at": format_micros(known), "items": page,
            "next_cursor": cursor_for(known, start + len(page), page[-1]) if more else None}


# -- the routes -----------------------------------------------------------------------------------------------------
LISTINGS: dict[str, tuple[type[Page], Callable[[LedgerStore, str, int], list[dict[str, Any]]], str, str]] = {
    "corrections": (CorrectionPage, listings.correction_items, "Corrections: each change of belief",
                    "Which edge versions each change of belief closed (`old_edge_ids`) and which it appended "
                    "(`new_edge_ids`), with its cause, in the order the ledger recorded them; `edgeledger "
                    "corrections --json`. Use it to audit what a late correction or a revocation changed.\n\n"
                    "Not for: the current answer to a question (use a traversal), or one entity's versions "
                    "(use history)."),
    "review": (ReviewPage, listings.review_items, "The review queue",
               "Items waiting for a person: ambiguous entity mentions, parked identity commands, conflicts between "
               "sources; `edgeledger review list --json`. Use it to see what the ledger declined to guess.\n\n"
               "Not for: deciding an item (`edgeledger review decide`)."),
    "traces": (TracePage, listings.trace_items, "Recorded answers (traces)",
               "Every answer recorded as a trace, by trace id: its query, both clocks, the edge ids it used and "
               "the action it drove; `edgeledger traces list --json`. Use it to find a trace to show or replay.\n\n"
               "Not for: which traces a later change touched (use traces/replay)."),
    "dead-letters": (DeadLetterPage, listings.dead_letter_items, "Dead letters: events that could not be applied",
                     "The tenant's events that could not be applied, with the stage, the reason and the original "
                     "text; `edgeledger dead-letters --tenant T --json`. Use it to find bad input from a feed.\n\n"
                     "Not for: events that named no tenant (an operator's `dead-letters --untenanted`)."),
}
COMMON = ("\n\n**Clocks.** `known_at` (transaction time, default now): only what the ledger had recorded by then. "
          "**Paging.** `limit` items a page; `next_cursor` continues after the last item and pins `known_at`.")


def add_read_routes(app: FastAPI, service: Any, slo: SloConfig, wall_clock: Callable[[], int],
                    dependencies: list[Any], errors: dict[int | str, dict[str, Any]]) -> None:
    """The list and freshness routes, over ``service`` (``streams.api.http.LedgerService``: its lock and
    follower); ``dependencies`` hold parameters to the document, ``errors`` documents the 422."""

    def listing(name: str) -> Callable[[str, PageParams], Any]:
        model, read, summary, description = LISTINGS[name]

        def endpoint(tenant: Tenant, params: Annotated[PageParams, Query()]) -> Any:
            now = wall_clock()
            with service.lock:
                service.follower.refresh()
                store = service.follower.store
                return page_of(lambda known: read(store, tenant, known), params, now)

        app.get(f"/v1/tenants/{{tenant}}/{name}", response_model=model, summary=summary,
                description=description + COMMON, operation_id=f"list_{name.replace('-', '_')}", tags=["reads"],
                dependencies=dependencies, responses=errors)(endpoint)
        return endpoint

    for name in LISTINGS:
        listing(name)

    @app.get("/v1/tenants/{tenant}/freshness", response_model=FreshnessReport, tags=["reads"],
             operation_id="freshness", dependencies=dependencies, responses=errors,
             summary="Freshness lag per source and which sources are stale",
             description="Lag (transaction time - the source's detected_at) p50/p95/p99/max per source for facts "
                         "appended in `[since, until)` of transaction time (`until` defaults to `known_at`), and "
                         "each source's staleness against its SLO as of `known_at` (default now); `edgeledger "
                         "freshness --json`, whose `--now` is `known_at` here. Use it to judge whether an "
                         "`unknown` came from a stale source.\n\nNot for: one answer's coverage (its "
                         "`coverage.stale_sources` says it).")
    def freshness(tenant: Tenant, params: Annotated[FreshnessParams, Query()]) -> FreshnessReport:
        start, end = instant_param(params.since, "since"), instant_param(params.until, "until")
        known = instant_param(params.known_at, "known_at")
        moment = wall_clock() if known is None else known
        if start is not None and end is not None and end <= start:
            raise InvalidQuery("until: must be after since")
        with service.lock:
            service.follower.refresh()
            return freshness_report(service.follower.store, tenant, start, moment if end is None else end, slo,
                                    moment)
