"""The adjacency → trace index: which recorded answers read which adjacency, so that the traces a
change batch touches are found by a few prefix scans, never by a scan of all traces.

It lives in its own KV beside the ledger (the ledger's state is written only by its worker; a
replayer, the CLI or the replay agent, keeps the index it needs and catches it up from the ledger's
``J`` rows, the traces in order of recording).

Rows (``state.keys.pack`` parts):

=====  ==========================================  ============================================
``Z``  tenant, node, rel, ``o``/``i``, trace_id      nothing: the trace's answer read that adjacency
``W``  tenant, trace_id                              the read set and the entities named, or why not derived
``M``  ``indexed``, tenant                           tx_at and trace_id of the last trace indexed
=====  ==========================================  ============================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import orjson

from processors.cache_keys import ReadKey
from processors.identity_map import IDENTITY_READ
from processors.model import Trace
from processors.replay import CannotRederive
from state import codec
from state.keys import encode_int, pack, unpack
from state.kv import OrderedKV, RocksKV
from state.layout import DIRECTION
from state.store import LedgerStore

ReadSetOf = Callable[[Trace], frozenset[ReadKey]]
"""A trace's read set; raises ``CannotRederive`` when its query cannot be re-run."""


def index_path(state: str | Path) -> Path:
    """The index beside a state directory (a RocksDB directory holds nothing else)."""
    path = Path(state)
    return path.parent / f".{path.name}.trace-index"


def open_index(state: str | Path) -> TraceIndex:
    return TraceIndex(RocksKV(index_path(state)))


def trace_of(store: LedgerStore, tenant: str, trace_id: str) -> Trace | None:
    raw = store.kv.get(b"X" + pack(tenant, trace_id))
    return codec.decode_trace(raw) if raw else None


def traces_using(store: LedgerStore, tenant: str, edge_id: str) -> list[str]:
    """Traces that recorded ``edge_id`` among the edges they used (the ledger's ``Y`` rows)."""
    prefix = b"Y" + pack(tenant, edge_id)
    return [str(unpack(key[1:])[-1]) for key, _ in store.kv.scan(prefix)]


def traces_recorded(store: LedgerStore, tenant: str, after: tuple[int, str] | None = None) -> Iterator[Trace]:
    """The tenant's traces in order of recording; with ``after`` (tx_at, trace_id), only later ones."""
    prefix = b"J" + pack(tenant)
    start = prefix + encode_int(after[0]) if after is not None else None
    for key, _ in store.kv.scan(prefix, start=start):
        _, tx_at, trace_id = unpack(key[1:])
        if after is not None and (int(tx_at), str(trace_id)) <= after:
            continue
        trace = trace_of(store, tenant, str(trace_id))
        if trace is not None:
            yield trace


class TraceIndex:
    def __init__(self, kv: OrderedKV) -> None:
        self.kv = kv

    def close(self) -> None:
        self.kv.close()

    def _mark(self, tenant: str) -> bytes:
        return b"M" + pack("indexed", tenant)

    def indexed_up_to(self, tenant: str) -> tuple[int, str] | None:
        raw = self.kv.get(self._mark(tenant))
        if not raw:
            return None
        tx_at, trace_id = orjson.loads(raw)
        return int(tx_at), str(trace_id)

    def catch_up(self, store: LedgerStore, tenant: str, read_set_of: ReadSetOf, batch: int = 1_000,
                 indexed: list[Trace] | None = None) -> int:
        """Index the tenant's traces recorded since the last one indexed; how many (and, into
        ``indexed``, which). Each batch of rows is written with the mark of its last trace, so a crash
        re-derives at most one batch."""
        count = 0
        puts: list[tuple[bytes, bytes]] = []
        last: tuple[int, str] | None = None
        for trace in traces_recorded(store, tenant, self.indexed_up_to(tenant)):
            puts += self.rows(trace, read_set_of)
            last = (trace.tx_at, trace.trace_id)
            count += 1
            if indexed is not None:
                indexed.append(trace)
            if count % batch == 0:
                self.kv.write([*puts, (self._mark(tenant), orjson.dumps(last))])
                puts = []
        if puts and last is not None:
            self.kv.write([*puts, (self._mark(tenant), orjson.dumps(last))])
        return count

    @staticmethod
    def rows(trace: Trace, read_set_of: ReadSetOf) -> list[tuple[bytes, bytes]]:
        """One trace's ``Z`` rows and its ``W`` row."""
        try:
            read_set = read_set_of(trace)
        except CannotRederive as why:
            return [(b"W" + pack(trace.tenant, trace.trace_id), orjson.dumps({"unknown": str(why)}))]
        ordered = sorted(read_set)
        rows = [(b"Z" + pack(tenant, node, rel, DIRECTION[d], trace.trace_id), b"")
                for tenant, node, rel, d in ordered]
        # What it read, and apart from it the entities its answer named (``identity_map.IDENTITY_READ``).
        rows.append((b"W" + pack(trace.tenant, trace.trace_id), orjson.dumps({
            "read_set": [[node, rel, d] for _, node, rel, d in ordered if rel != IDENTITY_READ],
            "named": sorted({node for _, node, rel, _ in ordered if rel == IDENTITY_READ})})))
        return rows

    def traces_reading(self, read_key: ReadKey) -> list[str]:
        tenant, node, rel, d = read_key
        return [str(unpack(key[1:])[-1]) for key, _ in self.kv.scan(b"Z" + pack(tenant, node, rel, DIRECTION[d]))]

    def traces_reading_node(self, tenant: str, node: str) -> list[str]:
        """Traces whose answer read any adjacency of ``node`` or named it."""
        return sorted({str(unpack(key[1:])[-1]) for key, _ in self.kv.scan(b"Z" + pack(tenant, node))})

    def read_set(self, tenant: str, trace_id: str) -> dict[str, object] | None:
        """``{"read_set": [[node, rel, direction], ...], "named": [entity, ...]}`` or ``{"unknown": why}``;
        None if not indexed."""
        raw = self.kv.get(b"W" + pack(tenant, trace_id))
        return orjson.loads(raw) if raw else None
