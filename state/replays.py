"""The replays of a ledger's state: the traces a window of changes touched, re-run and ranked.

The CLI, the HTTP API and the replay agent all answer through ``replays_since`` (a window of
transaction time) or ``replays_of`` (one change batch), over the ledger's store and its trace index.
"""

from __future__ import annotations

from collections.abc import Iterable

from processors.identity_map import identity_edits
from processors.model import Correction, EdgeVersion, Merge, Trace
from processors.queries import QueryEngine
from processors.trace_replay import (
    Replay,
    affects,
    identity_touched,
    ranked,
    read_set_of,
    replay_trace,
    touched_traces,
)
from state import codec
from state.keys import encode_int, pack
from state.store import LedgerStore
from state.trace_index import TraceIndex, trace_of, traces_using


def changed_versions(store: LedgerStore, tenant: str, since: int | None, until: int) -> list[EdgeVersion]:
    """The tenant's versions appended or closed in ``(since, until]``, as known at ``until``."""
    seen: dict[str, EdgeVersion] = {}
    for tx, edge_id, _ in store.versions_in_tx_order(tenant, since):
        if tx > until:
            break
        version = store.version(tenant, edge_id)
        if version is not None and edge_id not in seen:
            known = version.as_known_at(until)
            if known is not None:
                seen[edge_id] = known
    return list(seen.values())


def corrections_in(store: LedgerStore, tenant: str, since: int | None, until: int) -> list[Correction]:
    prefix = b"K" + pack(tenant)
    start = prefix + encode_int(since + 1) if since is not None else None
    return [c for _, value in store.kv.scan(prefix, start=start) for c in codec.decode_corrections(value)
            if (since is None or c.tx_at > since) and c.tx_at <= until]


def catch_up(store: LedgerStore, index: TraceIndex, engine: QueryEngine, tenant: str,
             indexed: list[Trace] | None = None) -> int:
    return index.catch_up(store, tenant, lambda trace: read_set_of(engine, trace), indexed=indexed)


def versions_read_by(store: LedgerStore, index: TraceIndex, trace: Trace, until: int) -> list[EdgeVersion]:
    """The versions on the trace's read set that affect it by ``until``: for a trace recorded after
    changes that its older ``known_at`` did not see, which a window of later changes would miss."""
    read = (index.read_set(trace.tenant, trace.trace_id) or {}).get("read_set") or []
    assert isinstance(read, list)
    found: dict[str, EdgeVersion] = {}
    for node, rel, direction in read:
        for version in store.iter_adjacent(trace.tenant, node, rel, "out" if direction == "out" else "in", until):
            known = version.as_known_at(until)
            if known is not None and affects(known, trace, until):
                found[known.edge_id] = known
    return list(found.values())


def replays_of(store: LedgerStore, index: TraceIndex, engine: QueryEngine, versions: Iterable[EdgeVersion],
               corrections: Iterable[Correction], known_at: int, recorded: Iterable[Trace] = (),
               edits: Iterable[tuple[int, str, Merge]] = ()) -> list[Replay]:
    """Every trace the versions or identity ``edits`` affect, and every trace in ``recorded`` (just
    indexed) that earlier changes affect, replayed with knowledge as of ``known_at``, ranked."""
    found = touched_traces(versions, index.traces_reading, lambda t, e: traces_using(store, t, e),
                           lambda t, i: trace_of(store, t, i), known_at)
    edited = identity_touched(edits, index.traces_reading_node, lambda t, i: trace_of(store, t, i), known_at)
    for key, (trace, _) in edited.items():
        found.setdefault(key, (trace, []))
    for trace in recorded:
        earlier = versions_read_by(store, index, trace, known_at)
        if earlier and trace.tx_at <= known_at:
            hit = found.setdefault((trace.tenant, trace.trace_id), (trace, []))
            hit[1].extend(v for v in earlier if v.edge_id not in {h.edge_id for h in hit[1]})
    listed = list(corrections)
    return ranked(replay_trace(engine, trace, touching, listed, known_at,
                               edited.get((trace.tenant, trace.trace_id), (trace, []))[1])
                  for trace, touching in found.values())


def replays_since(store: LedgerStore, index: TraceIndex, engine: QueryEngine, tenant: str,
                  since: int | None, known_at: int) -> list[Replay]:
    """The tenant's traces touched by changes in ``(since, known_at]``, replayed as of ``known_at``."""
    catch_up(store, index, engine, tenant)
    edits = identity_edits(store.merges(tenant), since if since is not None else -(1 << 62), known_at)
    return replays_of(store, index, engine, changed_versions(store, tenant, since, known_at),
                      corrections_in(store, tenant, since, known_at), known_at, edits=edits)


def replay_one(store: LedgerStore, index: TraceIndex, engine: QueryEngine, trace: Trace,
               known_at: int) -> Replay | None:
    """The trace's replay as of ``known_at`` if a change after its ``known_at`` touched it (judged on
    its own read set and the edges it used, not on the tenant's changes), else None."""
    touched = {v.edge_id: v for v in versions_read_by(store, index, trace, known_at)}
    for edge_id in trace.edge_ids or ():
        version = store.version(trace.tenant, edge_id)
        known = version.as_known_at(known_at) if version is not None else None
        if known is not None and affects(known, trace, known_at):
            touched[edge_id] = known
    indexed = index.read_set(trace.tenant, trace.trace_id) or {}
    read, named = indexed.get("read_set") or [], indexed.get("named") or []
    assert isinstance(read, list) and isinstance(named, list)
    nodes = {node for node, _, _ in read} | set(named)
    edits = [edit for edit in identity_edits(store.merges(trace.tenant), trace.known_at, known_at)
             if edit[2].keep in nodes or edit[2].absorb in nodes]
    if not (touched or edits) or trace.tx_at > known_at:
        return None
    return replay_trace(engine, trace, touched.values(),
                        corrections_in(store, trace.tenant, trace.known_at, known_at), known_at, edits)
