"""`edgeledger demo`: the late-correction story, end to end, on a small CMDB + HR + policy scenario.

By default the events go through the streaming pipeline on the embedded broker: produced to the
input topics phase by phase (March, 22 April, 3 May), applied by a ledger worker with the real
clock, so "what did we believe when the agent routed the approval?" is asked as of the real
moment the ledger held the April picture. ``--offline`` loads the same file in-process with the
simulated clock its ``clock`` events describe.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from importlib.resources import as_file, files
from pathlib import Path
from typing import TextIO

import orjson

from processors.queries import QueryEngine, QueryRequest
from processors.replay import affected_traces
from schemas.ontology import default_ontology
from schemas.times import parse_micros
from state.open import open_reader
from streams.cli import render
from streams.cli.load import load_into
from streams.kafka.broker import resolve_bootstrap
from streams.kafka.config import FAST_GROUP_OVERRIDES
from streams.kafka.produce import produce_lines
from streams.kafka.topics import TopicSettings, ensure_topics
from streams.processor import wall_clock_micros
from streams.worker.loop import LedgerWorker, WorkerConfig

DEMO_EVENTS = files("streams.cli") / "demo_data" / "acme.jsonl"
CONNECTOR = "settlement connector"
APRIL_22 = parse_micros("2026-04-22T10:14:00Z")


def run_demo(state: Path, offline: bool = False, bootstrap: str | None = None, out: TextIO = sys.stdout) -> None:
    _fresh_state_dir(state)
    if offline:
        with as_file(DEMO_EVENTS) as events:
            summary = load_into(state, [events], simulated_clock=True, ontology_path=None)
        out.write("== loaded the acme scenario in-process (simulated clock) ==\n")
        out.write(" ".join(f"{k}={v}" for k, v in summary.items()) + "\n\n")
        believed_on_april_22 = APRIL_22
    else:
        believed_on_april_22 = _stream_demo(state, bootstrap, out)
    _answer(state, believed_on_april_22, out)


def _fresh_state_dir(state: Path) -> None:
    if state.exists():
        if not (state / "CURRENT").exists():
            raise FileExistsError(f"{state} exists and is not a ledger state directory; choose another --state")
        shutil.rmtree(state)


def _phases() -> list[tuple[str, list[bytes]]]:
    """The scenario file split at its ``clock`` events: (when, events) per phase."""
    phases: list[tuple[str, list[bytes]]] = []
    for line in DEMO_EVENTS.read_bytes().splitlines():
        if not line.strip():
            continue
        event = orjson.loads(line)
        if event.get("kind") == "clock":
            phases.append((event["now"][:10], []))
        else:
            phases[-1][1].append(line)
    return phases


def _stream_demo(state: Path, bootstrap: str | None, out: TextIO) -> int:
    # The demo starts from a fresh state every time, so its broker keeps nothing either: a kept one would
    # hand the new state the last run's records.
    address, broker = resolve_bootstrap(bootstrap, storage="memory")
    topics = TopicSettings(prefix=f"demo{wall_clock_micros() % 10**8}.") if broker is None else TopicSettings()
    out.write(f"== streaming pipeline on {'the embedded broker (memory-only)' if broker else address} "
              f"at {address} ==\n")
    try:
        ensure_topics(address, topics)
        overrides = dict(FAST_GROUP_OVERRIDES) if broker is not None else {}
        worker = LedgerWorker(WorkerConfig(state, address, "edgeledger-demo", topics, consumer_overrides=overrides))
        stop = threading.Event()
        thread = threading.Thread(target=worker.run, args=(stop,), name="ledger-worker", daemon=True)
        thread.start()
        sent = 0
        belief_times: dict[str, int] = {}
        for when, lines in _phases():
            sent += produce_lines(lines, address, topics)
            _wait_for(lambda target=sent: worker.totals.events_read >= target, f"the {when} events to be applied")
            belief_times[when] = wall_clock_micros()
            out.write(f"   {when}: produced {len(lines)} events; ledger caught up at "
                      f"{render.format_instant(belief_times[when])}\n")
        stop.set()
        thread.join(30)
        totals = worker.totals
        out.write(f"   applied={totals.applied} dead_lettered={totals.dead_lettered} "
                  f"queued_for_review={totals.queued_for_review} corrections={totals.corrections} "
                  f"balanced={totals.balanced()}\n\n")
        return belief_times["2026-04-22"]
    finally:
        if broker is not None:
            broker.stop()


def _wait_for(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _answer(state: Path, believed_on_april_22: int, out: TextIO) -> None:
    now = wall_clock_micros()
    questions = [
        ("Who owns the settlement connector now?", "owners-of", CONNECTOR, now, now),
        ("Who owned it on 22 April (as we know now)?", "owners-of", CONNECTOR, APRIL_22, now),
        ("What did we believe on 22 April, when the agent routed the approval?", "owners-of", CONNECTOR,
         APRIL_22, believed_on_april_22),
        ("If we deprecate the connector now, whose sign-off is needed?", "approvals-required-for", CONNECTOR,
         now, now),
        ("Who owns Nightly ETL now? (two sources disagree: both kept, conflict queued; alice merged the "
         "sheet's team into HR's FinOps)", "owners-of", "Nightly ETL", now, now),
    ]
    store = open_reader(state)
    try:
        engine = QueryEngine(store, default_ontology())
        for title, name, entity, valid_at, known_at in questions:
            result = engine.run(QueryRequest(name, "acme", entity, valid_at, known_at))
            out.write(f"== {title}\n{render.query_text(result)}\n")
        out.write("== Correction events (old -> new edge ids)\n")
        for correction in store.corrections("acme"):
            out.write(f"  {correction.event_id}: {correction.cause} closed {list(correction.old_edge_ids)} "
                      f"appended {list(correction.new_edge_ids)}\n")
        out.write("\n== Recorded agent answers that used a belief later corrected (action-bearing first)\n")
        for affected in affected_traces(store.traces("acme"), lambda edge_id: store.version("acme", edge_id),
                                        engine):
            if affected.unknown_reason is not None:
                out.write(f"  {affected.trace.trace_id} [{affected.trace.action}] {affected.status}\n")
                continue
            rederived = " (edge ids re-derived)" if affected.edge_ids_source == "re-derived" else ""
            out.write(f"  {affected.trace.trace_id} [{affected.trace.action}] used "
                      f"{', '.join(v.edge_id for v in affected.corrected)}, since corrected{rederived}\n")
        out.write("\n== Review queue\n")
        for item in store.review_items("acme"):
            out.write(f"  [{item.category}] {item.reason}\n")
        out.write("\n== Dead letters\n")
        for letter in (letter for letter in store.dead_letters() if letter.tenant == "acme"):
            out.write(f"  [{letter.stage}] {letter.reason}\n")
    finally:
        store.close()
    out.write(f"\nTry: ./dev history --state {state} --tenant acme --entity '{CONNECTOR}' --rel owned_by\n")
