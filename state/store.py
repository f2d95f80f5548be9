"""The ledger's RocksDB layout, and the reads and atomic writes over it.

Tables (one-byte prefix, then ``state.keys.pack`` parts):

=====  ==========================================================  ==================================
``V``  tenant, edge_id                                             the edge version
``A``  tenant, node, rel, ``o``/``i``, tx_from, edge_id             nothing: an index of ``V`` (adjacency, both ends)
``T``  tenant, last tx of a batch                                  (tx, ``a``/``c``, edge_id) the batch appended/closed
``E``  tenant, entity_id                                            entity (type, latest name)
``N``  tenant, normalised alias, entity_id                          tx the alias was recorded
``B``  tenant, system, record or "", edge_id                         the version, while still believed
``I``  tenant, event_id                                             outcome (idempotent re-delivery)
``K``  tenant, last tx of a batch                                  the batch's correction events
``R``  tenant, review_id                                            review item
``D``  tx, digest of the letter                                      dead letter
``X``  tenant, trace_id / ``Y`` tenant, edge_id, trace_id           traces and their edge index
``H``  tenant, system                                               last heartbeat
``L``  tenant, system                                               latest change and heartbeat applied
``P``  tenant, system, tx of the row's first entry, newest first   the source's ``L`` row through a batch
``M``  name                                                         meta: last transaction time
=====  ==========================================================  ==================================

An adjacency is in order of recording (``tx_from``), so a read as of a past transaction time stops
at the first version recorded after it, and what a query read then is a prefix of what it reads now.
The out-adjacency also serves the versions of one logical edge (tenant, src, rel, o, filtered by dst).
A closed version's ``V`` row is rewritten with its ``tx_to``; that is the only change a stored version
ever sees, and the ``edge-versions`` log carries it as a new record rather than an edit. An ``A`` row
holds no value and is written once, with the version: its key ends with the edge id, and a read of an
adjacency reads each version from ``V``. Closing a belief so writes one row and deletes its ``B`` row
(format 3 kept the version in both ``A`` rows too and rewrote all three: about 1.5 rows an event more
in a load, for reads that save a point lookup per version).

``T`` and ``K`` are read as whole listings or from a transaction time on, never by one id, so a batch
files its entries for a tenant in one row, keyed by the latest transaction time among them (a row per
version change or correction cost about 2 µs each to build and insert, a quarter of the rows a batch
wrote). A reader from transaction time ``t`` on seeks to the first row keyed at ``t`` or later: every
earlier row holds only entries before ``t``. Within a row the entries are in the order the keys had.

``L`` is the current view of source activity; ``P`` is the same through transaction time, so that
staleness as of a past ``known_at`` is judged on what the ledger had heard by then. A batch writes, per
source it applied an event from, one row: [tx, the four ``L`` fields] after each event applied from that
source, first the row as the batch found it (so every row alone answers from its key to
the next row's key, and a source last heard before ``P`` existed is placed too), keyed by the first
entry's tx, newest first. A read as of ``known_at`` seeks once per source to the first row keyed at
or before ``known_at`` and takes its newest entry at or before it. Not one row per event (a row costs
about 2 µs to build and insert, as for ``T``): an entry is a five-item list. A batch's span of transaction time is
arbitrary (a simulated-clock load may put weeks in one batch), so rows keyed by the batch's end
could not answer a ``known_at`` inside it, and what they said would depend on where batches ended.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

from processors.model import (
    Correction,
    DeadLetter,
    Direction,
    EdgeVersion,
    Entity,
    Heartbeat,
    ReviewItem,
    SourceActivity,
    Trace,
    last_heard_tx,
)
from processors.pending import PendingLedger
from state import codec
from state.keys import encode_int, encode_int_desc, encode_str, pack, unpack
from state.kv import OrderedKV

_DIRECTION: Final = {"out": "o", "in": "i"}
_OUT: Final = pack("o")
_IN: Final = pack("i")
_INDEX: Final = b""
"""The value of an index row (``A``): the key says it all."""
_LAST_TX = b"M" + pack("last_tx")
NO_TRANSACTION = -(1 << 62)
"""``last_tx`` of a store that has recorded nothing yet."""
_FORMAT = b"M" + pack("format")
FORMAT_VERSION = b"4"
"""4: ``A`` rows are keys only, written once, and versions are read from ``V`` (3 kept the version in
them); 3: ``T`` and ``K`` hold one row per batch and tenant (2 had one per entry); 2: adjacency in order
of recording, believed-by-source in ``B`` (1 had ``O`` and ``S``)."""
_TX_BYTES: Final = 9
"""An encoded ``tx_from`` in an ``A`` key (``keys.encode_int``): the edge id follows it."""
_UNREAD: Final = object()
"""A read cache's answer for a key it does not hold (``None`` is a cached 'no such entity')."""


EncodedVersion = tuple[EdgeVersion, bool, bool, bytes]
"""A version a batch touched, in its final state, with (is_new, closed_now) and its stored encoding."""
LogRows = Callable[[list[EncodedVersion]], Sequence[tuple[bytes, bytes]]]
"""Given every version a batch touched, the rows that park what the batch must emit (a worker's
outbox), written in the batch's own WriteBatch."""


def _digest(record: bytes) -> str:
    """A ``D`` key's second part: the letter's own digest, so that a replay that applies the same
    letter again (a rebuild begun again after a crash) writes the same row, and two letters never meet."""
    return hashlib.blake2b(record, digest_size=12).hexdigest()


def _adjacency(tenant: str, node: str, rel: str, direction: Direction) -> bytes:
    """The key prefix of a node's adjacency of one relationship and direction."""
    return b"A" + pack(tenant, node, rel, _DIRECTION[direction])


def _correction_order(correction: Correction) -> tuple[int, str]:
    return (correction.tx_at, correction.correction_id)


def _listing_rows(table: bytes, by_tenant: dict[str, list], order: Callable[[Any], tuple] | None,
                  encode: Callable[[list], bytes]) -> list[tuple[bytes, bytes]]:
    """A batch's rows of a listing table (``T``, ``K``): per tenant, its entries in ``order`` (no
    ``order``: entries that are their own sort key), whose first part is a transaction time, in one
    row keyed by the latest of them."""
    rows = []
    for tenant, entries in by_tenant.items():
        if order is None:
            entries.sort()  # Speed: tuples compared as they are, no key tuple built per entry
            last_tx = entries[-1][0]
        else:
            entries.sort(key=order)
            last_tx = order(entries[-1])[0]
        rows.append((table + pack(tenant, last_tx), encode(entries)))
    return rows


class StateFormatError(ValueError):
    """The directory holds ledger state in a layout this version does not read."""


class LedgerStore:
    """Implements ``LedgerReader`` and ``GraphReader`` over an ``OrderedKV``."""

    def __init__(self, kv: OrderedKV, cache_entries: int = 200_000, believed_fan_out: int = 10_000) -> None:
        self.kv = kv
        self._cache_entries = cache_entries
        # Read caches, bounded by ``cache_entries`` each. The runners keep them out of the garbage
        # collector's passes (``processors.heap``).
        self._entities: dict[tuple[str, str], Entity | None] = {}
        self._aliases: dict[tuple[str, str], tuple[tuple[str, int], ...]] = {}
        # What versioning reads most: the still-believed out-edges of (tenant, src, rel), by dst and edge id.
        # Speed: a hit saves a seek and the decoding of the edge's whole history. Written through on
        # commit (a closed version leaves, a believed one enters), so an entry is always exact.
        self._believed_out: dict[tuple[str, str, str], dict[str, dict[str, EdgeVersion]]] = {}
        self._believed_fan_out = believed_fan_out
        # Sources whose believed out-edges of one relationship are too many to cache: a policy that
        # applies to every service. Remembered so that their out-adjacency is not read again.
        self._too_wide: dict[tuple[str, str, str], None] = {}
        self._parts: dict[str, bytes] = {}
        """Key parts encoded once: ``_parts["acme"] == pack("acme")`` (tenants, relationships, source systems)."""
        self._read_persisted()

    def _read_persisted(self) -> None:
        """The state's format (refused unless this edgeledger reads it) and its last transaction time,
        as the KV holds them."""
        kv = self.kv
        stored_format = kv.get(_FORMAT)
        found = stored_format or (FORMAT_VERSION if self._holds_no_versions() else b"1")  # format 1 recorded none
        if found != FORMAT_VERSION:
            raise StateFormatError(
                f"the state directory holds ledger state in format {found.decode()}, this "
                f"edgeledger reads format {FORMAT_VERSION.decode()}: load the events again into a new directory, "
                "or let a worker rebuild it from the edge-versions log")
        self._format_recorded = stored_format is not None
        raw = kv.get(_LAST_TX)
        self._last_tx = int(raw) if raw else NO_TRANSACTION

    def _holds_no_versions(self) -> bool:
        for _ in self.kv.scan(b"V"):
            return False
        return True

    def close(self) -> None:
        self.kv.close()

    def reset(self) -> None:
        """Delete all state and forget every cache: the store is then as if new (a worker whose state
        diverged from the log discards it and rebuilds from the log)."""
        self.kv.clear()
        self._drop_caches()
        self._parts.clear()
        self._read_persisted()

    # -- LedgerReader -------------------------------------------------------------------------------------
    def _scan_versions(self, prefix: bytes) -> list[EdgeVersion]:
        return [codec.decode_version(value) for _, value in self.kv.scan(prefix)]

    def _indexed(self, tenant: str, prefix: bytes, known_at: int | None = None,
                 decode: Callable[[bytes], EdgeVersion] = codec.decode_version) -> Iterator[EdgeVersion]:
        """The versions an adjacency ``prefix`` (``_adjacency``) indexes, in key order, read from ``V``
        one at a time as the scan advances. With ``known_at``, the scan ends at the first key recorded
        after it: ``tx_from`` leads the key's suffix, and the encoding keeps byte order = number order,
        so the key says it without reading the version."""
        start = len(prefix)
        edge_at = start + _TX_BYTES
        bound = encode_int(known_at) if known_at is not None else None
        versions = b"V" + pack(tenant)
        for key, _ in self.kv.scan(prefix):
            if bound is not None and key[start:edge_at] > bound:
                return
            yield decode(self._indexed_row(versions + key[edge_at:], key))

    def _indexed_row(self, version_key: bytes, index_key: bytes) -> bytes:
        raw = self.kv.get(version_key)
        if raw is None:
            # Written in the same batch as its index rows, so never missing in a state this code wrote.
            raise StateFormatError(f"the adjacency row {index_key!r} indexes no stored version")
        return raw

    def believed_edge(self, tenant: str, src: str, rel: str, dst: str) -> list[EdgeVersion]:
        by_dst = self._believed_by_dst(tenant, src, rel)
        if by_dst is None:
            # The source's side is too wide to read per assertion; the edge's versions are also at
            # the other end, in the dst's in-adjacency, among far fewer.
            return [v for v in self.adjacent(tenant, dst, rel, "in") if v.src == src and v.tx_to is None]
        believed = by_dst.get(dst)
        return list(believed.values()) if believed else []

    def believed_out(self, tenant: str, src: str, rel: str) -> list[EdgeVersion]:
        by_dst = self._believed_by_dst(tenant, src, rel)
        if by_dst is None:
            return self._scan_believed(tenant, src, rel)
        return [version for believed in by_dst.values() for version in believed.values()]

    def _scan_believed(self, tenant: str, src: str, rel: str) -> list[EdgeVersion]:
        """The believed out-edges, read to be cached and versioned: decoded with their names interned."""
        out = self._indexed(tenant, _adjacency(tenant, src, rel, "out"), decode=codec.decode_interned_version)
        return [v for v in out if v.tx_to is None]

    def _believed_by_dst(self, tenant: str, src: str, rel: str) -> dict[str, dict[str, EdgeVersion]] | None:
        """The cached believed out-edges of (tenant, src, rel), by dst then edge id; read on a miss.
        None for a source too wide to cache, remembered so that its out-adjacency is read once: the
        caller reads an edge at its other end, or scans (``believed_out``, which versioning asks of
        single-valued relationships only, and a source has few of those)."""
        key = (tenant, src, rel)
        by_dst = self._believed_out.get(key)
        if by_dst is None:
            if key in self._too_wide:
                return None
            # A source the store has no entity for has no versions either: an edge's ends are recorded
            # in the commit that records the edge. Speed: the resolver has just looked the entity up,
            # so this is a cache hit, where the seek it saves costs about 12 µs on a busy store.
            believed = self._scan_believed(tenant, src, rel) if self.entity(tenant, src) is not None else []
            if len(believed) > self._believed_fan_out:
                self._remember(self._too_wide, key, None)
                return None
            by_dst = {}
            for version in believed:
                by_dst.setdefault(version.dst, {})[version.edge_id] = version
            if len(self._believed_out) >= self._cache_entries:
                del self._believed_out[next(iter(self._believed_out))]  # the oldest entry: FIFO is enough here
            self._believed_out[key] = by_dst
        return by_dst

    def version(self, tenant: str, edge_id: str) -> EdgeVersion | None:
        raw = self.kv.get(b"V" + pack(tenant, edge_id))
        return codec.decode_version(raw) if raw else None

    def believed_by_source(
        self, tenant: str, system: str, record: str | None, version: str | None
    ) -> list[EdgeVersion]:
        prefix = b"B" + (pack(tenant, system) if record is None else pack(tenant, system, record))
        return [v for v in self._scan_versions(prefix) if version is None or v.source_version == version]

    def entity(self, tenant: str, entity_id: str) -> Entity | None:
        key = (tenant, entity_id)
        cached = self._entities.get(key, _UNREAD)
        if cached is not _UNREAD:
            return cached  # type: ignore[return-value]
        raw = self.kv.get(b"E" + pack(tenant, entity_id))
        entity = codec.decode_entity(raw) if raw else None
        self._remember(self._entities, key, entity)
        return entity

    def alias_targets(self, tenant: str, normalised: str, known_at: int | None = None) -> list[str]:
        key = (tenant, normalised)
        entries = self._aliases.get(key)
        if entries is None:
            entries = tuple(
                (str(unpack(k[1:])[-1]), int(value)) for k, value in self.kv.scan(b"N" + pack(tenant, normalised))
            )
            self._remember(self._aliases, key, entries)
        return [entity_id for entity_id, tx in entries if known_at is None or tx <= known_at]

    def _drop_caches(self) -> None:
        """Forget every read cache (a batch that failed to commit may have updated one): reads refill them."""
        for cache in (self._entities, self._aliases, self._believed_out, self._too_wide):
            cache.clear()

    def _remember(self, cache: dict, key: tuple[str, ...], value: object) -> None:
        """A bounded read cache. It stays coherent because ``commit`` writes through it, and a
        read-only (secondary) store is opened per command and never outlives the data it read."""
        if len(cache) >= self._cache_entries:
            cache.clear()
        cache[key] = value

    def believed_from_record(self, tenant: str, system: str, record: str) -> list[EdgeVersion]:
        return self._scan_versions(b"B" + pack(tenant, system, record))

    def event_seen(self, tenant: str, event_id: str) -> bool:
        return self.kv.get(b"I" + pack(tenant, event_id)) is not None

    def events_seen(self, keys: list[tuple[str, str]]) -> list[bool]:
        found = self.kv.get_many([b"I" + pack(tenant, event_id) for tenant, event_id in keys])
        return [outcome is not None for outcome in found]

    def last_tx(self) -> int:
        return self._last_tx

    # -- GraphReader -----------------------------------------------------------------------------------------
    def adjacent(self, tenant: str, node: str, rel: str, direction: Direction) -> list[EdgeVersion]:
        return list(self._indexed(tenant, _adjacency(tenant, node, rel, direction)))

    def iter_adjacent(self, tenant: str, node: str, rel: str, direction: Direction,
                      known_at: int | None = None) -> Iterator[EdgeVersion]:
        """``adjacent`` one version at a time, with ``known_at`` only those recorded by then: a caller
        that stops early (a traversal whose expansion budget runs out) does not read a hub's whole
        adjacency, which can hold hundreds of thousands of versions."""
        return self._indexed(tenant, _adjacency(tenant, node, rel, direction), known_at)

    def adjacent_any(self, tenant: str, node: str) -> list[EdgeVersion]:
        """Every version at ``node``, any relationship, both directions (for history and changes). The
        relationship's length varies, so each key is unpacked for its edge id (its last part)."""
        versions = b"V" + pack(tenant)
        return [codec.decode_version(self._indexed_row(versions + encode_str(str(unpack(key[1:])[-1])), key))
                for key, _ in self.kv.scan(b"A" + pack(tenant, node))]

    # -- listings ---------------------------------------------------------------------------------------------
    def corrections(self, tenant: str) -> Iterator[Correction]:
        for _, value in self.kv.scan(b"K" + pack(tenant)):
            yield from codec.decode_corrections(value)

    def review_items(self, tenant: str) -> Iterator[ReviewItem]:
        for _, value in self.kv.scan(b"R" + pack(tenant)):
            yield codec.decode_review(value)

    def review_count(self, tenant: str) -> int:
        """How many items wait in the tenant's review queue (counted by key, nothing decoded)."""
        return sum(1 for _ in self.kv.scan(b"R" + pack(tenant)))

    def dead_letters(self) -> Iterator[DeadLetter]:
        for _, value in self.kv.scan(b"D"):
            yield codec.decode_dead_letter(value)

    def traces(self, tenant: str) -> Iterator[Trace]:
        for _, value in self.kv.scan(b"X" + pack(tenant)):
            yield codec.decode_trace(value)

    def heartbeats(self, tenant: str) -> Iterator[Heartbeat]:
        for _, value in self.kv.scan(b"H" + pack(tenant)):
            yield codec.decode_heartbeat(value)

    def versions_in_tx_order(self, tenant: str, after_tx: int | None = None) -> Iterator[tuple[int, str, str]]:
        """(tx, edge_id, 'appended'|'closed') in transaction-time order; with ``after_tx``, only after it."""
        prefix = b"T" + pack(tenant)
        start = prefix + encode_int(after_tx + 1) if after_tx is not None else None
        for _, value in self.kv.scan(prefix, start=start):
            for tx, what, edge_id in codec.decode_changes(value):
                if after_tx is None or tx > after_tx:
                    yield tx, edge_id, "appended" if what == "a" else "closed"

    def tenants_with_activity(self) -> list[str]:
        """Tenants the ledger has applied a change or heartbeat for (``L`` holds one row per tenant and source)."""
        return sorted({str(unpack(key[1:])[0]) for key, _ in self.kv.scan(b"L")})

    def source_activity(self, tenant: str, known_at: int | None = None) -> dict[str, SourceActivity]:
        """The tenant's sources by system, with the latest change and heartbeat the ledger had applied
        from each (``L``); with ``known_at``, only those applied at or before it (``activity_as_of``)."""
        latest = {
            activity.system: activity
            for activity in (codec.decode_activity(v) for _, v in self.kv.scan(b"L" + pack(tenant)))
        }
        return latest if known_at is None else self.activity_as_of(tenant, latest, known_at)

    def activity_as_of(self, tenant: str, latest: dict[str, SourceActivity],
                       known_at: int) -> dict[str, SourceActivity]:
        """``latest`` (the tenant's ``L`` rows, as ``source_activity`` reads them) as the ledger had it at
        ``known_at``. A source last heard at or before ``known_at`` is as ``L`` says: nothing moved its
        row since. Any other is read from ``P``, one seek; a source with no ``P`` row by then is left out,
        as not heard: it was not, or (a state written before ``P`` existed) nothing says when it was.
        ``latest`` itself when no source was heard after ``known_at`` (a current read)."""
        found: dict[str, SourceActivity] = {}
        sought = False
        for system, activity in latest.items():
            heard = last_heard_tx(activity)
            if heard is None or heard <= known_at:
                found[system] = activity
                continue
            sought = True
            prefix = b"P" + pack(tenant, system)
            for _, value in self.kv.scan(prefix, start=prefix + encode_int_desc(known_at)):
                entry = codec.activity_entry_at(value, known_at)
                if entry is not None:
                    found[system] = SourceActivity(tenant, system, entry[1], entry[2], entry[3], entry[4])
                break
        return found if sought else latest

    def _activity_rows(self, pending: PendingLedger) -> list[tuple[bytes, bytes]]:
        """The batch's ``L`` row and ``P`` row of each (tenant, source) it applied an event from."""
        # Speed: one mutable row per source rather than a dataclass ``replace`` per applied event.
        # Row: [last_change_detected_at, last_change_tx, last_heartbeat_detected_at, last_heartbeat_tx];
        # the source's P entries beside it, each [tx, *row] (the first one the row as found, if heard).
        rows: dict[tuple[str, str], tuple[list[int | None], list[list[int | None]], int]] = {}
        for outcome in pending.outcomes:
            if outcome.outcome != "applied" or outcome.tenant is None or outcome.system is None:
                continue
            key = (outcome.tenant, outcome.system)
            found = rows.get(key)
            if found is None:
                raw = self.kv.get(b"L" + pack(*key))
                current = codec.decode_activity(raw) if raw else SourceActivity(*key)
                row = [current.last_change_detected_at, current.last_change_tx,
                       current.last_heartbeat_detected_at, current.last_heartbeat_tx]
                heard = last_heard_tx(current)
                entries: list[list[int | None]] = [] if heard is None else [[heard, *row]]
                rows[key] = (row, entries, len(entries))
            else:
                row, entries = found[0], found[1]
            # Heard at the event's transaction time whatever its detected_at says (an old one is a
            # late fact, not silence, see processors.freshness); detected_at keeps the newest seen.
            tx, detected = outcome.tx_at, outcome.detected_at
            if outcome.kind == "heartbeat":
                at = 2
            elif outcome.kind == "change":
                at = 0
            else:
                continue
            seen = row[at]
            if detected is not None and (seen is None or detected > seen):
                row[at] = detected
            row[at + 1] = tx
            if tx is not None:
                entries.append([tx, row[0], row[1], row[2], row[3]])
        puts: list[tuple[bytes, bytes]] = []
        for (tenant, system), (row, entries, seeded) in rows.items():
            parts = pack(tenant, system)
            puts.append((b"L" + parts, codec.encode_record(SourceActivity(tenant, system, *row))))
            first = entries[0][0] if len(entries) > seeded else None
            if first is not None:
                puts.append((b"P" + parts + encode_int_desc(first), codec.encode_activity_entries(entries)))
        return puts

    def _write_through(self, pending: PendingLedger) -> None:
        """After a commit: the entity and alias caches take the batch's entities and aliases (the
        believed-edges cache was kept in step while the rows were built)."""
        for key, entity in pending.entities.items():
            self._entities[key] = entity
        for alias in pending.aliases:
            key = (alias.tenant, alias.normalised)
            entries = self._aliases.get(key)
            if entries is not None:
                # Keep the cached scan result exact: one entry per entity id, in key (= id) order.
                others = [entry for entry in entries if entry[0] != alias.entity_id]
                self._aliases[key] = tuple(sorted([*others, (alias.entity_id, alias.tx_from)]))

    def _keep_believed(self, version: EdgeVersion) -> None:
        """Keep a cached believed-out entry exact: a believed version enters it, a closed one leaves."""
        key = (version.tenant, version.src, version.rel)
        by_dst = self._believed_out.get(key)
        if by_dst is None:
            return
        believed = by_dst.get(version.dst)
        if version.tx_to is None:
            if believed is None:
                if len(by_dst) >= self._believed_fan_out:
                    # Grown too wide since it was cached: drop it, as a read would not cache it.
                    del self._believed_out[key]
                    self._remember(self._too_wide, key, None)
                    return
                believed = by_dst[version.dst] = {}
            believed[version.edge_id] = version
        elif believed is not None and believed.pop(version.edge_id, None) is not None and not believed:
            del by_dst[version.dst]

    def _encoded_part(self, part: str) -> bytes:
        encoded = self._parts.get(part)
        if encoded is None:
            encoded = self._parts[part] = pack(part)
        return encoded

    def _believed_key(self, version: EdgeVersion, tenant: bytes, edge: bytes) -> bytes:
        """The version's ``B`` key. Source records are non-empty, so "" files the versions that name none."""
        return b"".join((b"B", tenant, self._encoded_part(version.authority),
                         encode_str(version.source_record or ""), edge))

    def _version_rows(self, pending: PendingLedger, puts: list[tuple[bytes, bytes]], deletes: list[bytes],
                      encoded: list[EncodedVersion]) -> None:
        """The rows of each touched version: V; when it is new, both A ends (keys only) and, while it is
        believed, B (deleted when it is closed); then per tenant one T row listing what was appended and closed.
        The believed-edges cache takes each version as its rows are built (one pass over the batch, not
        two); ``commit`` drops the caches if the write then fails. Each version is also listed in
        ``encoded`` with its encoding."""
        # Speed: the value is encoded once and shared by V and B, and the key parts that every
        # batch repeats (tenant, relationship, source system) are encoded once and kept across
        # batches. Node ids and source records are encoded each time: there are about as many as entities,
        # and late in a large load a lookup among them missed the CPU caches and cost more than
        # encoding. Compiled, a direct call or ``puts.append`` beats the same through a local alias.
        if len(self._parts) > self._cache_entries:
            self._parts.clear()  # still bounded: tenants and source systems are strings the events choose
        changes: dict[str, list[tuple[int, str, str]]] = {}
        for version, is_new, closed_now in pending.final_versions():
            self._keep_believed(version)
            tenant, edge = self._encoded_part(version.tenant), encode_str(version.edge_id)
            rel = self._encoded_part(version.rel)
            value = codec.encode_version(version)
            encoded.append((version, is_new, closed_now, value))
            puts.append((b"V" + tenant + edge, value))
            if is_new:
                recorded = encode_int(version.tx_from) + edge
                puts.append((b"".join((b"A", tenant, encode_str(version.src), rel, _OUT, recorded)), _INDEX))
                puts.append((b"".join((b"A", tenant, encode_str(version.dst), rel, _IN, recorded)), _INDEX))
            if is_new or closed_now:
                changed = changes.get(version.tenant)
                if changed is None:
                    changed = changes[version.tenant] = []
                if is_new:
                    changed.append((version.tx_from, "a", version.edge_id))
                if closed_now and version.tx_to is not None:
                    changed.append((version.tx_to, "c", version.edge_id))
            if is_new:
                if version.tx_to is None:
                    puts.append((self._believed_key(version, tenant, edge), value))
            elif closed_now:
                deletes.append(self._believed_key(version, tenant, edge))
        puts += _listing_rows(b"T", changes, None, codec.encode_changes)  # (tx, a/c, edge_id): key order

    # -- the one atomic write -----------------------------------------------------------------------------------
    def commit(self, pending: PendingLedger, extra_puts: Sequence[tuple[bytes, bytes]] = (),
               log_rows: LogRows | None = None) -> None:
        """Write everything a batch of events did, with their event ids, in one WriteBatch, together
        with ``extra_puts`` and the rows ``log_rows`` makes of the batch's versions (see ``LogRows``:
        the versions are encoded once, for their rows and for what the batch emits)."""
        try:
            self._write(pending, extra_puts, log_rows)
        except BaseException:
            self._drop_caches()
            raise
        self._format_recorded = True
        self._write_through(pending)
        self._last_tx = max(self._last_tx, pending.last_tx())

    def _write(self, pending: PendingLedger, extra_puts: Sequence[tuple[bytes, bytes]],
               log_rows: LogRows | None) -> None:
        puts: list[tuple[bytes, bytes]] = list(extra_puts)
        deletes: list[bytes] = []
        encoded: list[EncodedVersion] = []
        self._version_rows(pending, puts, deletes, encoded)
        if log_rows is not None:
            puts += log_rows(encoded)
        for entity in pending.entities.values():
            puts.append((b"E" + pack(entity.tenant, entity.entity_id), codec.encode_entity(entity)))
        for alias in pending.aliases:
            puts.append((b"N" + pack(alias.tenant, alias.normalised, alias.entity_id), str(alias.tx_from).encode()))
        for (tenant, event_id), outcome in pending.seen.items():
            puts.append((b"I" + pack(tenant, event_id), outcome.encode()))
        corrections: dict[str, list[Correction]] = {}
        for correction in pending.corrections:
            corrections.setdefault(correction.tenant, []).append(correction)
        puts += _listing_rows(b"K", corrections, _correction_order, codec.encode_corrections)
        for item in pending.review_items:
            puts.append((b"R" + pack(item.tenant, item.review_id), codec.encode_record(item)))
        for letter in pending.dead_letters:
            record = codec.encode_record(letter)
            puts.append((b"D" + pack(letter.tx_at, _digest(record)), record))
        for trace in pending.traces:
            puts.append((b"X" + pack(trace.tenant, trace.trace_id), codec.encode_record(trace)))
            for edge_id in trace.edge_ids or ():
                puts.append((b"Y" + pack(trace.tenant, edge_id, trace.trace_id), b""))
        for beat in pending.heartbeats:
            puts.append((b"H" + pack(beat.tenant, beat.system), codec.encode_record(beat)))
        puts += self._activity_rows(pending)
        last_tx = pending.last_tx()
        if last_tx > self._last_tx:
            puts.append((_LAST_TX, str(last_tx).encode()))
        if not self._format_recorded:
            puts.append((_FORMAT, FORMAT_VERSION))
        self.kv.write(puts, deletes)

