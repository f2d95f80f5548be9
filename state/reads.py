"""The ledger's reads over its RocksDB layout (``state.layout``), with the read caches that the
writes (``state.store.LedgerStore``, which commits through them) keep exact."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Final

from processors.identity_map import IdentityMap, IdentityTimeline, placeholder_name
from processors.matching import NEIGHBOURS, PLACEHOLDER_REACH, SCANNED, Candidate, entity_type_of, probes, sort_key
from processors.model import (
    Correction,
    DeadLetter,
    Decision,
    Direction,
    EdgeVersion,
    Entity,
    Filing,
    Heartbeat,
    Merge,
    ReviewItem,
    SourceActivity,
    Trace,
    last_heard_tx,
)
from state import codec
from state.blocking import NameBlocks
from state.keys import encode_int, encode_int_desc, encode_str, pack, unpack
from state.kv import OrderedKV
from state.layout import TX_BYTES, StateFormatError, adjacency

_UNREAD: Final = object()
"""A read cache's answer for a key it does not hold (``None`` is a cached 'no such entity')."""


class Joins:
    """A tenant's joins both ways: the records that joined a lineage, the lineages a record joined."""

    def __init__(self) -> None:
        self.by_lineage: dict[str, list[str]] = {}
        self.by_record: dict[tuple[str, str], list[str]] = {}

    def add(self, lineage: str, system: str, record: str) -> None:
        records = self.by_lineage.setdefault(lineage, [])
        if record not in records:
            records.append(record)
        lineages = self.by_record.setdefault((system, record), [])
        if lineage not in lineages:
            lineages.append(lineage)


class StoreReads:
    """``LedgerReader``'s and ``GraphReader``'s reads over an ``OrderedKV`` (``LedgerStore`` adds the
    last transaction time and the writes)."""

    def __init__(self, kv: OrderedKV, cache_entries: int = 200_000, believed_fan_out: int = 10_000,
                 names_in_memory: int = 0) -> None:
        self.kv = kv
        # A writer's name-blocking orders in memory (``state.blocking``); a reader, opened for a
        # command or a few queries, seeks rather than load a tenant's every alias.
        self._blocks = NameBlocks(kv, names_in_memory) if names_in_memory else None
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
        # A tenant's merges, read whole once (a tenant has few), and whether it has placeholders:
        # for a tenant with neither, identity costs a dictionary lookup per query and per commit.
        self._merges: dict[str, tuple[Merge, ...]] = {}
        self._identities: dict[str, IdentityTimeline] = {}
        self._placeholders: dict[str, bool] = {}
        self._revoked: dict[str, set[tuple[str, str, str | None]]] = {}
        """A tenant's revoked (system, record, version)s (None: the whole record): few, read whole once."""
        self._joins: dict[str, Joins] = {}
        """A tenant's facts that other records joined, read whole once and kept: one entry a (fact, record)."""

    def close(self) -> None:
        self.kv.close()

    # -- LedgerReader -------------------------------------------------------------------------------------
    def _scan_versions(self, prefix: bytes) -> list[EdgeVersion]:
        return [codec.decode_version(value) for _, value in self.kv.scan(prefix)]

    def _indexed(self, tenant: str, prefix: bytes, known_at: int | None = None,
                 decode: Callable[[bytes], EdgeVersion] = codec.decode_version) -> Iterator[EdgeVersion]:
        """The versions an adjacency ``prefix`` (``adjacency``) indexes, in key order, read from ``V``
        one at a time as the scan advances. With ``known_at``, the scan ends at the first key recorded
        after it: ``tx_from`` leads the key's suffix, and the encoding keeps byte order = number order,
        so the key says it without reading the version."""
        start = len(prefix)
        edge_at = start + TX_BYTES
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
        out = self._indexed(tenant, adjacency(tenant, src, rel, "out"), decode=codec.decode_interned_version)
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
            # so this is a cache hit, where the seek it saves is one of the dearest reads on a busy store.
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

    def believed_by_source(self, tenant: str, system: str, record: str | None) -> list[EdgeVersion]:
        return self._scan_versions(b"B" + (pack(tenant, system) if record is None else pack(tenant, system, record)))

    def record_filings(self, tenant: str, system: str, record: str) -> list[Filing]:
        prefix = b"O" + pack(tenant, "f", system, record)
        return [codec.decode_filing(tenant, system, record, int(unpack(key[len(prefix):])[0]), value)
                for key, value in self.kv.scan(prefix)]

    def version_revoked(self, tenant: str, system: str, record: str, version: str | None) -> bool:
        revoked = self._revoked.get(tenant)
        if revoked is None:
            revoked = self._revoked[tenant] = {
                (str(parts[2]), str(parts[3]), str(parts[4]) if len(parts) > 4 else None) for parts in
                (unpack(key[1:]) for key, _ in self.kv.scan(b"O" + pack(tenant, "r")))}
        return (system, record, version) in revoked or (system, record, None) in revoked

    def _joins_of(self, tenant: str) -> Joins:
        joins = self._joins.get(tenant)
        if joins is None:
            joins = self._joins[tenant] = Joins()
            for key, _ in self.kv.scan(b"O" + pack(tenant, "l")):
                _, _, lineage, system, record = unpack(key[1:])
                joins.add(str(lineage), str(system), str(record))
        return joins

    def lineage_joins(self, tenant: str, lineage: str) -> list[str]:
        return list(self._joins_of(tenant).by_lineage.get(lineage, ()))

    def record_joins(self, tenant: str, system: str, record: str) -> list[str]:
        return list(self._joins_of(tenant).by_record.get((system, record), ()))

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
            rows = self.kv.scan(b"N" + pack(tenant, sort_key(normalised), normalised))
            entries = tuple((entity_id, tx) for tx, entity_id, _ in map(codec.decode_alias, (v for _, v in rows)))
            self._remember(self._aliases, key, entries)
        return [entity_id for entity_id, tx in entries if known_at is None or tx <= known_at]

    def merges(self, tenant: str) -> Sequence[Merge]:
        """Every merge of the tenant, split ones too, in merge id order (``Q`` ``m`` rows)."""
        cached = self._merges.get(tenant)
        if cached is None:
            cached = tuple(codec.decode_merge(value) for _, value in self.kv.scan(b"Q" + pack(tenant, "m")))
            self._merges[tenant] = cached  # per tenant: bounded by the tenants, not by the data
        return cached

    def identity(self, tenant: str, known_at: int | None) -> IdentityMap | None:
        timeline = self._identities.get(tenant)
        if timeline is None:
            timeline = self._identities[tenant] = IdentityTimeline(self.merges(tenant))
        return timeline.as_of(known_at)

    def merge(self, tenant: str, merge_id: str) -> Merge | None:
        raw = self.kv.get(b"Q" + pack(tenant, "m", merge_id))
        return codec.decode_merge(raw) if raw else None

    def merges_naming(self, tenant: str, entity_id: str) -> list[Merge]:
        """The merges that name ``entity_id`` as survivor or absorbed (``Q`` ``e`` rows)."""
        found = []
        for key, _ in self.kv.scan(b"Q" + pack(tenant, "e", entity_id)):
            merge = self.merge(tenant, str(unpack(key[1:])[-1]))
            if merge is not None:
                found.append(merge)
        return found

    def has_placeholders(self, tenant: str) -> bool:
        known = self._placeholders.get(tenant)
        if known is None:
            known = any(True for _ in self.kv.scan(b"Z" + pack(tenant)))
            self._placeholders[tenant] = known
        return known

    def placeholders_near(self, tenant: str, entity_type: str, normalised: str) -> list[tuple[str, str]]:
        """``Z`` rows of the type on each side of each probe: ``f`` in sort-key order, ``s`` in suffix order."""
        forward, backward = probes(normalised)
        names = self._blocks.of(tenant) if self._blocks is not None else None
        if names is not None:
            return names.placeholders_near(entity_type, forward, backward)
        found: list[tuple[str, str]] = []
        for tag, probe in [("f", key) for key in forward] + [("s", backward)]:
            prefix = b"Z" + pack(tenant, tag, entity_type)
            at = b"Z" + pack(tenant, tag, entity_type, probe)
            for rows in (self.kv.scan(prefix, at), self.kv.scan_before(prefix, at)):
                for _, (_, value) in zip(range(PLACEHOLDER_REACH), rows, strict=False):
                    placeholder = value.decode()
                    found.append((placeholder, placeholder_name(placeholder)))
        return found

    def neighbours(self, tenant: str, entity_type: str | None, normalised: str,
                   known_at: int | None = None) -> list[Candidate]:
        """On each side of each probe (``matching.probes``): ``N`` rows in sort-key order, ``S`` rows
        in suffix order."""
        forward, backward = probes(normalised)
        names = self._blocks.of(tenant) if self._blocks is not None else None
        if names is not None:
            return names.neighbours(entity_type, forward, backward, known_at)
        found: list[Candidate] = []
        for table, probe in [(b"N", key) for key in forward] + [(b"S", backward)]:
            prefix = table + pack(tenant)
            at = table + pack(tenant, probe)
            _take_near(found, self.kv.scan(prefix, at), entity_type, known_at)
            _take_near(found, self.kv.scan_before(prefix, at), entity_type, known_at)
        return found

    def _drop_caches(self) -> None:
        """Forget every read cache (a batch that failed to commit may have updated one): reads refill them."""
        for cache in (self._entities, self._aliases, self._believed_out, self._too_wide, self._merges,
                      self._identities, self._placeholders, self._revoked, self._joins):
            cache.clear()
        if self._blocks is not None:
            self._blocks.clear()

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

    # -- GraphReader -----------------------------------------------------------------------------------------
    def adjacent(self, tenant: str, node: str, rel: str, direction: Direction) -> list[EdgeVersion]:
        return list(self._indexed(tenant, adjacency(tenant, node, rel, direction)))

    def iter_adjacent(self, tenant: str, node: str, rel: str, direction: Direction,
                      known_at: int | None = None) -> Iterator[EdgeVersion]:
        """``adjacent`` one version at a time, with ``known_at`` only those recorded by then: a caller
        that stops early (a traversal whose expansion budget runs out) does not read a hub's whole
        adjacency, which can hold hundreds of thousands of versions."""
        return self._indexed(tenant, adjacency(tenant, node, rel, direction), known_at)

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

    def review_item(self, tenant: str, review_id: str) -> ReviewItem | None:
        raw = self.kv.get(b"R" + pack(tenant, review_id))
        return codec.decode_review(raw) if raw else None

    def decision(self, tenant: str, review_id: str) -> Decision | None:
        raw = self.kv.get(b"U" + pack(tenant, "r", review_id))
        return codec.decode_decision(raw) if raw else None

    def decisions(self, tenant: str) -> Iterator[Decision]:
        """Every review decision of the tenant, by review id."""
        for _, value in self.kv.scan(b"U" + pack(tenant, "r")):
            yield codec.decode_decision(value)

    def decisions_for(self, tenant: str, entity_id: str) -> list[Decision]:
        """The review decisions about an entity (it was chosen, created, or offered as a candidate), in
        order of transaction time: the audit an identity history lists (actor, reason, ``tx_at``)."""
        found = []
        for key, _ in self.kv.scan(b"U" + pack(tenant, "e", entity_id)):
            decision = self.decision(tenant, str(unpack(key[1:])[-1]))
            if decision is not None:
                found.append(decision)
        return found

    def review_count(self, tenant: str) -> int:
        """How many items wait in the tenant's review queue: those parked less those decided (counted
        by key, nothing decoded)."""
        parked = sum(1 for _ in self.kv.scan(b"R" + pack(tenant)))
        return parked - sum(1 for _ in self.kv.scan(b"U" + pack(tenant, "r")))

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
        row since. Any other is read from ``P``, one seek; a source with no ``P`` row by then is left out:
        it had not been heard.
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


def _take_near(found: list[Candidate], rows: Iterator[tuple[bytes, bytes]], entity_type: str | None,
               known_at: int | None) -> None:
    """The first ``NEIGHBOURS`` aliases of ``entity_type`` recorded by ``known_at`` among ``rows`` (an
    alias table's rows from a probe outwards), reading ``SCANNED`` rows at most."""
    kept = 0
    for read, (_, value) in enumerate(rows, 1):
        tx, entity_id, alias = codec.decode_alias(value)
        of_type = entity_type_of(entity_id)
        if (entity_type is None or of_type == entity_type) and (known_at is None or tx <= known_at):
            found.append(Candidate(entity_id, of_type, alias))
            kept += 1
        if kept == NEIGHBOURS or read == SCANNED:
            return
