"""The traversal cache: what an answer depends on, how it is keyed, and exactly what invalidates it.

**Current or past.** A request is *current* when ``known_at >= last_tx``, the transaction time of
the last change the reader has seen. Every version's ``tx_from`` and ``tx_to`` are at most
``last_tx``, so all current requests see the same beliefs whatever their ``known_at``; they share
one entry, and the ``known_at`` in the returned JSON is the caller's. A *past* request
(``known_at < last_tx``) is keyed by its exact ``known_at``. Its beliefs can never change
(transaction time strictly increases, so a later version or closing is invisible to it). Every
query, ``changed-between`` too, stops reading an adjacency at the first version recorded after
``known_at``, so its past answers, counts included, do not change. Past entries are still indexed
and invalidated by the same rule as current ones: one rule, exact for every query.

**Valid time.** An answer depends on ``valid_at`` only through ``version.valid_at(valid_at)`` on
the versions the traversal read, so it is the same for every ``valid_at`` between two consecutive
``valid_from``/``valid_to`` boundaries of those versions. Each entry stores that window and serves
any ``valid_at`` inside it: a request without an explicit ``valid_at`` ("now", which moves with the
wall clock) hits until now crosses a boundary of the data it read, then misses and recomputes.

**Invalidation.** An entry records its read set: the (tenant, node, relationship, direction)
adjacencies it read. An appended or closed version (src, rel, dst) changes exactly the adjacency
lists (tenant, src, rel, out) and (tenant, dst, rel, in), so it invalidates exactly the entries
whose read set holds one of them, including answers it would *add* to, whose evidence does not
contain it. ``CachedQueryEngine`` catches up before each request: it asks for the tenant's
versions changed since the last transaction it processed and invalidates by them.

**Identity and coverage are checked on every hit.** Anchor resolution (identifiers, aliases),
entity names in ``results`` and stale sources do not come from adjacencies: an ``alias`` command
or a rename appends no edge version, and a current answer's staleness moves with the wall clock (a
past answer's is judged at its ``known_at`` on the activity recorded by then, so it holds). A hit re-resolves
the anchor, re-reads result names and re-asks for stale sources (a few point reads, no traversal)
and is dropped and recomputed when any of them differs.

**Merges and splits** append no edge version. ``catch_up`` also reads the tenant's identity edits
since the last transaction it processed (``identity_map.identity_edits``; a tenant with no merge has
none to read) and drops, per edit, every entry that read any adjacency of either entity or named it
on a path (``identity_map.IDENTITY_READ``): an answer reading neither stays cached. Anchors are
re-resolved on every hit as well.

``changed-between`` without ``to`` ends its window at ``known_at``, so its current answers depend on
the exact ``known_at``; they are not cached (``bypass``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from processors.cache_keys import (
    CacheBackend,
    CacheEntry,
    entry_key,
    is_cacheable,
    is_current,
    request_key,
    touched_read_keys,
    valid_window,
)
from processors.identity_map import IdentityMap, identity_edits
from processors.matching import Candidate
from processors.model import Direction, EdgeVersion, Entity, Merge
from processors.ports import GraphReader
from processors.queries import QueryEngine, QueryRequest, StaleSources, no_stale_sources, plan_for, resolve_anchor
from schemas.cache import CacheInvalidation
from schemas.ontology import Ontology
from schemas.results import QueryResult
from schemas.times import format_micros

CacheStatus = Literal["hit", "miss", "bypass"]
ChangesSince = Callable[[str, int], list[EdgeVersion]]
"""(tenant, after_tx) -> the tenant's versions appended or closed at a transaction time after ``after_tx``."""


@dataclass
class RecordingReader:
    """Passes reads through and remembers the valid-time boundaries of every version it returned."""

    inner: GraphReader
    boundaries: set[int] = field(default_factory=set)

    def adjacent(self, tenant: str, node: str, rel: str, direction: Direction) -> list[EdgeVersion]:
        return list(self.iter_adjacent(tenant, node, rel, direction))

    def iter_adjacent(self, tenant: str, node: str, rel: str, direction: Direction,
                      known_at: int | None = None) -> Iterator[EdgeVersion]:
        """Records the valid-time bounds of the versions actually read. Which records a walk reads
        does not depend on valid_at (the budget counts records before the time filter), so the
        answer holds for any valid_at between two recorded bounds."""
        for version in self.inner.iter_adjacent(tenant, node, rel, direction, known_at):
            if version.valid_from is not None:
                self.boundaries.add(version.valid_from)
            if version.valid_to is not None:
                self.boundaries.add(version.valid_to)
            yield version

    def entity(self, tenant: str, entity_id: str) -> Entity | None:
        return self.inner.entity(tenant, entity_id)

    def alias_targets(self, tenant: str, normalised: str, known_at: int | None = None) -> list[str]:
        return self.inner.alias_targets(tenant, normalised, known_at)

    def merges(self, tenant: str) -> Sequence[Merge]:
        return self.inner.merges(tenant)

    def identity(self, tenant: str, known_at: int | None) -> IdentityMap | None:
        return self.inner.identity(tenant, known_at)

    def neighbours(self, tenant: str, entity_type: str | None, normalised: str,
                   known_at: int | None = None) -> list[Candidate]:
        return self.inner.neighbours(tenant, entity_type, normalised, known_at)


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    bypassed: int = 0
    invalidated: int = 0
    """Entries dropped because a changed version touched their read set (or an identity change)."""
    revalidation_misses: int = 0
    """Hits refused because the anchor, a result name or the stale sources had changed."""
    evicted: int = 0


def fan_out(versions: Iterable[EdgeVersion], backend: CacheBackend) -> dict[str, dict[str, set[str]]]:
    """tenant -> entry key -> ids of the versions that touched its read set."""
    causes: dict[str, dict[str, set[str]]] = {}
    for version in versions:
        for read_key in touched_read_keys(version):
            for key in backend.keys_reading(read_key):
                causes.setdefault(version.tenant, {}).setdefault(key, set()).add(version.edge_id)
    return causes


def invalidation_record(tenant: str, caused_by: Mapping[str, Iterable[str]]) -> CacheInvalidation:
    by_key = {key: sorted(set(edge_ids)) for key, edge_ids in sorted(caused_by.items())}
    return CacheInvalidation(
        tenant=tenant,
        causing_edge_ids=sorted({edge_id for edge_ids in by_key.values() for edge_id in edge_ids}),
        invalidated_keys=list(by_key),
        caused_by=by_key,
    )


def _ignore(record: CacheInvalidation) -> None:
    return None


@dataclass
class CachedQueryEngine:
    """``QueryEngine`` behind the cache. A cached answer equals the uncached one for the same reader view.

    The backend must hold no current entries the engine did not put there (it is cleared on
    construction): the engine learns a tenant's changes from the transaction time it first saw.
    """

    reader: GraphReader
    ontology: Ontology
    backend: CacheBackend
    last_tx: Callable[[], int]
    changes_since: ChangesSince
    stale_sources: StaleSources = no_stale_sources
    on_invalidation: Callable[[CacheInvalidation], None] = _ignore
    """Called with each non-empty invalidation record (the ``cache-invalidations`` topic hooks in here)."""
    stats: CacheStats = field(default_factory=CacheStats)
    decoded_entries: int = 1_024
    """Decoded results kept beside the backend, so a hit costs no JSON parsing (a miss puts its freshly
    computed result here, so even the first hit after it parses nothing)."""
    decoded_bytes: int = 16 << 20
    """The decoded results' JSON, at most, and a sixteenth of it for one result: a larger one is parsed
    at each hit. A review held 19 MB per decoded 5.7 MB answer; by count alone, gigabytes."""
    _synced: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _decoded: OrderedDict[str, tuple[bytes, QueryResult]] = field(default_factory=OrderedDict, init=False,
                                                                   repr=False)
    _decoded_used: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        self.backend.clear()

    def run(self, request: QueryRequest) -> QueryResult:
        return self.run_with_status(request)[0]

    def run_with_status(self, request: QueryRequest) -> tuple[QueryResult, CacheStatus]:
        """The answer and where it came from. A hit or a miss shares nested objects with the cache
        (a miss's result is kept as the entry's decoded form): treat results as read-only (serialise
        them, do not edit them)."""
        current = is_current(request.known_at, self.last_tx())
        self.catch_up(request.tenant)
        if not is_cacheable(request, current):
            self.stats.bypassed += 1
            return QueryEngine(self.reader, self.ontology, self.stale_sources).run(request), "bypass"
        base = request_key(request, current)
        entry = self.backend.find(base, request.valid_at)
        if entry is not None:
            result = self._decode(entry)
            if self._still_holds(result, request):
                self.stats.hits += 1
                clocks = {"valid_at": format_micros(request.valid_at) or "",
                          "known_at": format_micros(request.known_at) or ""}
                return result.model_copy(update=clocks), "hit"
            self.stats.revalidation_misses += 1
            self.backend.remove([entry.key])
        self.stats.misses += 1
        recorder = RecordingReader(self.reader)
        result, read_set = QueryEngine(recorder, self.ontology, self.stale_sources).run_with_read_set(request)
        window = valid_window(recorder.boundaries, request.valid_at)
        tenant = request.tenant
        entry = CacheEntry(
            key=entry_key(base, window),
            base=base,
            tenant=tenant,
            current=current,
            window=window,
            read_set=frozenset((tenant, node, rel, d) for node, rel, d in read_set),
            result_json=result.model_dump_json().encode(),
        )
        self.stats.evicted += self.backend.put(entry)
        # The next hit on this entry finds its bytes here and parses nothing.
        self._remember_decoded(entry.key, entry.result_json, result)
        return result, "miss"

    def catch_up(self, tenant: str) -> list[CacheInvalidation]:
        """Invalidate by the tenant's versions changed since the last transaction time processed for it."""
        last = self.last_tx()
        synced = self._synced.get(tenant)
        if synced is None:
            self._synced[tenant] = last
            return []
        if last < synced:
            self.backend.clear()
            self._synced = {tenant: last}
            return []
        if last == synced:
            return []
        records = self.invalidate_with_records(self.changes_since(tenant, synced))
        edits = identity_edits(self.reader.merges(tenant), synced)
        if edits:
            records += self._invalidate_identity(tenant, edits)
        self._synced[tenant] = last
        return records

    def _invalidate_identity(self, tenant: str, edits: list[tuple[int, str, Merge]]) -> list[CacheInvalidation]:
        """Drop the entries that read or named either entity of each merge or split."""
        caused_by: dict[str, set[str]] = {}
        for _, edit_id, merge in edits:
            for key in self.invalidate_entities(tenant, (merge.keep, merge.absorb)):
                caused_by.setdefault(key, set()).add(edit_id)
        if not caused_by:
            return []
        record = invalidation_record(tenant, caused_by).model_copy(
            update={"causing_edge_ids": [], "causing_identity_edits": sorted({e for _, e, _ in edits})})
        self.on_invalidation(record)
        return [record]

    def invalidate(self, versions: Iterable[EdgeVersion]) -> list[str]:
        """Drop every entry whose read set an appended or closed version touches; their keys."""
        return sorted(key for record in self.invalidate_with_records(versions) for key in record.invalidated_keys)

    def invalidate_with_records(self, versions: Iterable[EdgeVersion]) -> list[CacheInvalidation]:
        records = []
        for tenant, caused_by in sorted(fan_out(versions, self.backend).items()):
            self.stats.invalidated += self.backend.remove(caused_by)
            record = invalidation_record(tenant, caused_by)
            self.on_invalidation(record)
            records.append(record)
        return records

    def invalidate_entities(self, tenant: str, entity_ids: Iterable[str]) -> list[str]:
        """The hook for identity merges and splits: drop entries that read anything at these entities."""
        keys = sorted({key for entity_id in entity_ids for key in self.backend.keys_reading_node(tenant, entity_id)})
        self.stats.invalidated += self.backend.remove(keys)
        return keys

    def _decode(self, entry: CacheEntry) -> QueryResult:
        """The entry's result, parsed once while its bytes stay the same (a replaced entry has new bytes)."""
        known = self._decoded.get(entry.key)
        if known is not None and (known[0] is entry.result_json or known[0] == entry.result_json):
            self._decoded.move_to_end(entry.key)
            return known[1]
        result = QueryResult.model_validate_json(entry.result_json)
        self._remember_decoded(entry.key, entry.result_json, result)
        return result

    def _remember_decoded(self, key: str, result_json: bytes, result: QueryResult) -> None:
        """Keep ``result`` as the parse of ``result_json`` (the bytes stored under ``key``), most recent
        last, within ``decoded_entries`` and ``decoded_bytes``."""
        replaced = self._decoded.pop(key, None)
        if replaced is not None:
            self._decoded_used -= len(replaced[0])
        if len(result_json) > self.decoded_bytes // 16:
            return
        self._decoded[key] = (result_json, result)
        self._decoded_used += len(result_json)
        while len(self._decoded) > self.decoded_entries or self._decoded_used > self.decoded_bytes:
            self._decoded_used -= len(self._decoded.popitem(last=False)[1][0])

    def _still_holds(self, result: QueryResult, request: QueryRequest) -> bool:
        """What the adjacency read set does not cover: the anchor, result names, stale sources."""
        tenant = request.tenant
        anchor = resolve_anchor(self.reader, tenant, request.entity, request.known_at,
                                entity_types=self.ontology.entity_types)
        if anchor != result.anchor:
            return False
        for answer in result.results:
            entity = self.reader.entity(tenant, answer.entity)
            if (entity.name if entity else None) != answer.name:
                return False
        if anchor.entity is None:
            return True
        stale = self.stale_sources(tenant, self._relationships(request), request.known_at)
        return stale == result.coverage.stale_sources

    def _relationships(self, request: QueryRequest) -> frozenset[str]:
        if request.name == "changed-between":
            return frozenset(self.ontology.relationships)
        return plan_for(request, self.ontology).relationships
