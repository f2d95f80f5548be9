"""The replays of a ledger's state: the traces a window of changes touched, re-run and ranked.

The CLI, the HTTP API and the replay agent all answer through ``replays_since`` (a window of
transaction time) or ``replays_of`` (one change batch), over the ledger's store and its trace index.
"""

from __future__ import annotations

from collections.abc import Iterable

from processors.model import Correction, EdgeVersion
from processors.queries import QueryEngine
from processors.trace_replay import Replay, ranked, read_set_of, replay_trace, touched_traces
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


def catch_up(store: LedgerStore, index: TraceIndex, engine: QueryEngine, tenant: str) -> int:
    return index.catch_up(store, tenant, lambda trace: read_set_of(engine, trace))


def replays_of(store: LedgerStore, index: TraceIndex, engine: QueryEngine, versions: Iterable[EdgeVersion],
               corrections: Iterable[Correction], known_at: int) -> list[Replay]:
    """Every trace the versions affect, replayed with knowledge as of ``known_at``, ranked."""
    found = touched_traces(versions, index.traces_reading, lambda t, e: traces_using(store, t, e),
                           lambda t, i: trace_of(store, t, i), known_at)
    listed = list(corrections)
    return ranked(replay_trace(engine, trace, touching, listed, known_at) for trace, touching in found.values())


def replays_since(store: LedgerStore, index: TraceIndex, engine: QueryEngine, tenant: str,
                  since: int | None, known_at: int) -> list[Replay]:
    """The tenant's traces touched by changes in ``(since, known_at]``, replayed as of ``known_at``."""
    catch_up(store, index, engine, tenant)
    return replays_of(store, index, engine, changed_versions(store, tenant, since, known_at),
                      corrections_in(store, tenant, since, known_at), known_at)
