"""`edgeledger demo`: the late-correction story, end to end, on a small CMDB + HR + policy scenario."""

from __future__ import annotations

import shutil
import sys
from importlib.resources import files
from pathlib import Path

from processors.queries import QueryEngine, QueryRequest
from schemas.ontology import default_ontology
from schemas.times import parse_micros
from state.open import open_reader
from streams import render
from streams.ledger_files import load_into, wall_clock_micros

DEMO_EVENTS = files("streams") / "demo_data" / "acme.jsonl"
CONNECTOR = "settlement connector"


def run_demo(state: Path, out=sys.stdout) -> None:
    if state.exists():
        if not (state / "CURRENT").exists():
            raise FileExistsError(f"{state} exists and is not a ledger state directory; choose another --state")
        shutil.rmtree(state)
    with _as_path(DEMO_EVENTS) as events:
        summary = load_into(state, [events], simulated_clock=True, ontology_path=None)
    out.write("== loaded the acme scenario (simulated clock) ==\n")
    out.write(" ".join(f"{k}={v}" for k, v in summary.items()) + "\n\n")
    now = wall_clock_micros()
    april_22 = parse_micros("2026-04-22T10:14:00Z")
    questions = [
        ("Who owns the settlement connector now?", "owners-of", now, now, 1),
        ("Who owned it on 22 April (as we know now)?", "owners-of", april_22, now, 1),
        ("What did we believe on 22 April, when the agent routed the approval?", "owners-of", april_22,
         april_22, 1),
        ("If we deprecate the connector now, whose sign-off is needed?", "approvals-required-for", now, now, 1),
        ("Who owns Nightly ETL now? (two sources disagree: both kept, conflict queued)", "owners-of", now, now, 1),
    ]
    store = open_reader(state)
    try:
        engine = QueryEngine(store, default_ontology())
        for title, name, valid_at, known_at, depth in questions:
            entity = "Nightly ETL" if "Nightly" in title else CONNECTOR
            result = engine.run(QueryRequest(name, "acme", entity, valid_at, known_at, depth=depth))
            out.write(f"== {title}\n")
            out.write(render.query_text(result) + "\n")
        out.write("== Correction events (old -> new edge ids)\n")
        for correction in store.corrections("acme"):
            out.write(f"  {correction.event_id}: {correction.cause} closed {list(correction.old_edge_ids)} "
                      f"appended {list(correction.new_edge_ids)}\n")
        out.write("\n== Review queue\n")
        for item in store.review_items("acme"):
            out.write(f"  [{item.category}] {item.reason}\n")
        out.write("\n== Dead letters\n")
        for letter in store.dead_letters():
            out.write(f"  [{letter.stage}] {letter.reason}\n")
    finally:
        store.close()
    out.write(
        f"\nTry: edgeledger history --state {state} --tenant acme --entity '{CONNECTOR}' --rel owned_by\n"
    )


class _as_path:
    """Importlib resources may live in a zip; give ``load`` a real file either way."""

    def __init__(self, resource) -> None:
        from importlib.resources import as_file

        self._context = as_file(resource)

    def __enter__(self) -> Path:
        return self._context.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._context.__exit__(*exc)
