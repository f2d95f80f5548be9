"""The list reads (corrections, the review queue, traces, dead letters) as JSON items: one builder each,
so the CLI's ``--json`` and the HTTP API's pages are the same items in the same order.

Each takes ``known``, a transaction time: only what the ledger had recorded by then is listed, so a
listing as of a past ``known_at`` never changes, which is what lets a page cursor pin it.
"""

from __future__ import annotations

from typing import Any

from schemas.results import CorrectionOut
from schemas.times import format_micros
from state.store import LedgerStore
from streams.cli import render


def correction_items(store: LedgerStore, tenant: str, known: int) -> list[dict[str, Any]]:
    """Which versions each change of belief closed and which it appended."""
    return [
        CorrectionOut(
            correction_id=c.correction_id, tenant=c.tenant, event_id=c.event_id,
            tx_at=format_micros(c.tx_at) or "", cause=c.cause,
            old_edge_ids=list(c.old_edge_ids), new_edge_ids=list(c.new_edge_ids),
        ).model_dump(mode="json")
        for c in store.corrections(tenant)
        if c.tx_at <= known
    ]


def review_items(store: LedgerStore, tenant: str, known: int) -> list[dict[str, Any]]:
    """Items waiting for a person as of ``known``: ambiguous entities, parked commands, cardinality
    conflicts. An item decided by then (``review decide``) is no longer open and not listed."""
    decided = {d.review_id: d.tx_at for d in store.decisions(tenant)}
    return [render.review_dict(item) for item in store.review_items(tenant)
            if item.tx_at <= known and decided.get(item.review_id, known + 1) > known]


def trace_items(store: LedgerStore, tenant: str, known: int) -> list[dict[str, Any]]:
    """Every trace recorded by ``known``, by trace id."""
    return [render.trace_dict(t) for t in store.traces(tenant) if t.tx_at <= known]


def dead_letter_items(store: LedgerStore, tenant: str | None, known: int) -> list[dict[str, Any]]:
    """Events that could not be applied; ``tenant`` None lists those that named no tenant."""
    return [render.dead_letter_dict(d) for d in store.dead_letters()
            if d.tx_at <= known and (not d.tenant if tenant is None else d.tenant == tenant)]
