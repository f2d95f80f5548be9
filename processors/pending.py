"""A unit of work: the changes of a batch of events, readable before they are committed.

Versioning reads through a ``PendingLedger`` so that an event sees its own appends and closings
and those of the events before it in the same batch; the store then writes the whole batch in
one atomic write. Nothing here touches storage.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from processors.identity_map import IdentityMap, identity_as_of, placeholder_name
from processors.matching import NEIGHBOURS, PLACEHOLDER_REACH, SCANNED, Candidate, entity_type_of, probes, sort_key
from processors.model import (
    AliasEntry,
    Correction,
    DeadLetter,
    Decision,
    EdgeVersion,
    Entity,
    EventOutcome,
    Filing,
    Heartbeat,
    Merge,
    Outcome,
    ReviewItem,
    Trace,
)
from processors.ports import LedgerReader


@dataclass
class BatchCounts:
    events_read: int = 0
    applied: int = 0
    dead_lettered: int = 0
    queued_for_review: int = 0
    duplicates: int = 0
    versions_appended: int = 0
    versions_closed: int = 0
    corrections: int = 0
    conflicts_flagged: int = 0
    review_decided: int = 0
    """Decision events that closed a review item (each is also counted applied)."""
    review_rejected: int = 0
    """Of those, the rejections: the parked event was closed with nothing applied."""

    def add(self, other: BatchCounts) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def balanced(self) -> bool:
        """Every event read ended applied, dead-lettered, queued for review, or was a re-delivery."""
        return self.events_read == (
            self.applied + self.dead_lettered + self.queued_for_review + self.duplicates
        )


@dataclass
class PendingLedger:
    base: LedgerReader
    versions: dict[tuple[str, str], EdgeVersion] = field(default_factory=dict)
    appended: list[tuple[str, str]] = field(default_factory=list)
    closed: list[tuple[str, str]] = field(default_factory=list)
    entities: dict[tuple[str, str], Entity] = field(default_factory=dict)
    aliases: list[AliasEntry] = field(default_factory=list)
    seen: dict[tuple[str, str], Outcome] = field(default_factory=dict)
    recalled: dict[tuple[str, str], bool] = field(default_factory=dict)
    """Whether the store had seen an event, read ahead for a batch in one multi-get (``recall_seen``)."""
    corrections: list[Correction] = field(default_factory=list)
    review_items: list[ReviewItem] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    traces: list[Trace] = field(default_factory=list)
    filings: list[Filing] = field(default_factory=list)
    """What the batch filed about source records' statements: restatements by other versions, revocations."""
    merge_rows: dict[tuple[str, str], Merge] = field(default_factory=dict)
    """Merges made or split in this batch, in their final state, by (tenant, merge id)."""
    placeholders: list[tuple[str, str]] = field(default_factory=list)
    """(tenant, entity id) of each ``Type:~name`` entity this batch recorded."""
    heartbeats: list[Heartbeat] = field(default_factory=list)
    outcomes: list[EventOutcome] = field(default_factory=list)
    counts: BatchCounts = field(default_factory=BatchCounts)
    tx: int | None = None
    _by_out: dict[tuple[str, str, str], list[str]] = field(default_factory=lambda: defaultdict(list))
    _by_edge: dict[tuple[str, str, str, str], list[str]] = field(default_factory=lambda: defaultdict(list))
    """Appended versions per (tenant, src, rel, dst). ``_by_out`` filtered by dst would say the same,
    but a policy snapshot can assert thousands of edges from one source, and filtering per assertion
    made that quadratic (32,000 assertions: 37 s)."""
    _touched_out: set[tuple[str, str, str]] = field(default_factory=set)
    """(tenant, src, rel) whose believed out-edges this batch changed (appended or closed a version)."""
    _new_by_source: dict[tuple[str, str, str | None], list[str]] = field(default_factory=lambda: defaultdict(list))
    """Appended versions per (tenant, system, record): a snapshot reads what its record says now once
    per event, and walking every version the batch appended made snapshot feeds quadratic per batch."""
    _alias_index: dict[tuple[str, str], list[AliasEntry]] = field(default_factory=lambda: defaultdict(list))
    _by_key: list[tuple[str, str, int]] = field(default_factory=list)
    """The batch's aliases as (tenant, sort key, index in ``aliases``), sorted, and ``_by_suffix`` with
    the key reversed: the two orders of the alias table, filed when a fuzzy lookup first needs them
    (``neighbours``): a batch that never matches by name never computes a key."""
    _by_suffix: list[tuple[str, str, int]] = field(default_factory=list)
    _identity_now: dict[str, IdentityMap | None] = field(default_factory=dict)
    """A tenant's identity map now, once a batch with identity edits read it: extended by each new merge."""
    _ordered_upto: int = 0
    """How many of ``aliases`` are filed in ``_by_key`` and ``_by_suffix``."""
    _filed: list[Candidate] = field(default_factory=list)
    """Each filed alias as the ``Candidate`` a lookup returns, and ``_filed_placeholders`` each filed
    placeholder's (type, name): worked out once a batch, not at every lookup that reads them."""
    _filed_placeholders: list[tuple[str, str]] = field(default_factory=list)
    _placeholders_by_key: list[tuple[str, str, int]] = field(default_factory=list)
    """The batch's placeholders in the same two orders (index in ``placeholders``), for ``placeholders_near``."""
    _placeholders_by_suffix: list[tuple[str, str, int]] = field(default_factory=list)
    _placeholders_upto: int = 0
    _revoked: set[tuple[str, str, str, str | None]] = field(default_factory=set)
    """(tenant, system, record, version) of each version this batch revoked (None: the whole record)."""
    _joins_by_lineage: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    """The batch's joins (``Filing.joined``): records by (tenant, lineage), lineages by (tenant, system,
    record)."""
    _joins_by_record: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)

    # -- writes -------------------------------------------------------------------------------
    def append(self, version: EdgeVersion) -> None:
        key = (version.tenant, version.edge_id)
        self.versions[key] = version
        self.appended.append(key)
        for ids in self._indexed_under(version):
            ids.append(version.edge_id)
        self._touched_out.add((version.tenant, version.src, version.rel))
        self.counts.versions_appended += 1

    def discard_new(self, version: EdgeVersion) -> None:
        """Forget a version appended earlier in the same transaction: it was never believed outside it."""
        key = (version.tenant, version.edge_id)
        del self.versions[key]
        self.appended.remove(key)
        for ids in self._indexed_under(version):
            ids.remove(version.edge_id)
        self.counts.versions_appended -= 1

    def settle_new(self, version: EdgeVersion) -> None:
        """Put ``version`` in place of the uncommitted version of the same edge id that this transaction
        appended: a field settled once its event was done (a fact's origin). Indexes hold ids, not versions."""
        key = (version.tenant, version.edge_id)
        assert key in self.versions and self.versions[key].tx_to is None, "only an appended, open version is settled"
        self.versions[key] = version

    def _indexed_under(self, version: EdgeVersion) -> tuple[list[str], list[str], list[str]]:
        """The index lists an appended version is filed in; ``append`` and ``discard_new`` share them,
        so an index cannot be added to one and forgotten in the other."""
        return (self._by_out[(version.tenant, version.src, version.rel)],
                self._by_edge[(version.tenant, version.src, version.rel, version.dst)],
                self._new_by_source[(version.tenant, version.authority, version.source_record)])

    def close(self, version: EdgeVersion, tx: int) -> EdgeVersion:
        closed = version.close_belief(tx)
        key = (version.tenant, version.edge_id)
        self.versions[key] = closed
        self.closed.append(key)
        self._touched_out.add((version.tenant, version.src, version.rel))
        self.counts.versions_closed += 1
        return closed

    def add_filing(self, filing: Filing) -> None:
        self.filings.append(filing)
        if filing.revoked:
            self._revoked.add((filing.tenant, filing.system, filing.record, filing.version))
        for lineage, _ in filing.joined:
            self._joins_by_lineage.setdefault((filing.tenant, lineage), []).append(filing.record)
            self._joins_by_record.setdefault((filing.tenant, filing.system, filing.record), []).append(lineage)

    def add_entity(self, entity: Entity) -> None:
        self.entities[(entity.tenant, entity.entity_id)] = entity

    def add_alias(self, alias: AliasEntry) -> None:
        self.aliases.append(alias)
        self._alias_index[(alias.tenant, alias.normalised)].append(alias)

    def add_merge(self, merge: Merge) -> None:
        """A new merge, or a merge closed by a split (the same id: the later state wins)."""
        tenant = merge.tenant
        fresh = merge.tx_to is None and self.merge(tenant, merge.merge_id) is None
        known = tenant in self._identity_now or not any(of_tenant == tenant for of_tenant, _ in self.merge_rows)
        now = self._identity_now.pop(tenant) if tenant in self._identity_now else self.base.identity(tenant, None)
        self.merge_rows[(tenant, merge.merge_id)] = merge
        if fresh and known:
            # Speed: a new merge extends the map as the batch has it; after a split (rare) it is built again.
            self._identity_now[tenant] = (now or IdentityMap(())).with_merge(merge)

    def identity_built(self, tenant: str) -> tuple[bool, IdentityMap | None]:
        """(whether the batch built it, the tenant's identity map now): a store keeps it on commit."""
        return tenant in self._identity_now, self._identity_now.get(tenant)

    def add_placeholder(self, tenant: str, entity_id: str) -> None:
        self.placeholders.append((tenant, entity_id))

    def mark_seen(self, tenant: str, event_id: str, outcome: Outcome) -> None:
        self.seen[(tenant, event_id)] = outcome

    # -- reads (LedgerReader) -------------------------------------------------------------------
    def _overlay(self, tenant: str, base: list[EdgeVersion], new_ids: list[str]) -> list[EdgeVersion]:
        if not self.versions:
            return base
        merged = [self.versions.get((tenant, v.edge_id), v) for v in base]
        merged.extend(self.versions[(tenant, edge_id)] for edge_id in new_ids)
        return merged

    def believed_edge(self, tenant: str, src: str, rel: str, dst: str) -> list[EdgeVersion]:
        base = self.base.believed_edge(tenant, src, rel, dst)
        if (tenant, src, rel) not in self._touched_out:
            return base  # Speed: nothing in this batch changed these edges; the base answer stands.
        new_ids = self._by_edge.get((tenant, src, rel, dst), [])
        return _still_believed(self._overlay(tenant, base, new_ids))

    def believed_out(self, tenant: str, src: str, rel: str) -> list[EdgeVersion]:
        base = self.base.believed_out(tenant, src, rel)
        if (tenant, src, rel) not in self._touched_out:
            return base
        return _still_believed(self._overlay(tenant, base, self._by_out.get((tenant, src, rel), [])))

    def version(self, tenant: str, edge_id: str) -> EdgeVersion | None:
        pending = self.versions.get((tenant, edge_id))
        return pending if pending is not None else self.base.version(tenant, edge_id)

    def believed_by_source(self, tenant: str, system: str, record: str | None) -> list[EdgeVersion]:
        base = self.base.believed_by_source(tenant, system, record)
        new_ids = [
            edge_id
            for (of_tenant, of_system, of_record), edge_ids in self._new_by_source.items()
            if of_tenant == tenant and of_system == system and (record is None or of_record == record)
            for edge_id in edge_ids
        ]
        return _still_believed(self._overlay(tenant, base, new_ids))

    def version_revoked(self, tenant: str, system: str, record: str, version: str | None) -> bool:
        return ((tenant, system, record, version) in self._revoked or (tenant, system, record, None) in self._revoked
                or self.base.version_revoked(tenant, system, record, version))

    def lineage_joins(self, tenant: str, lineage: str) -> list[str]:
        found = self.base.lineage_joins(tenant, lineage)
        if self._joins_by_lineage:
            found = list(dict.fromkeys([*found, *self._joins_by_lineage.get((tenant, lineage), ())]))
        return found

    def record_joins(self, tenant: str, system: str, record: str) -> list[str]:
        found = self.base.record_joins(tenant, system, record)
        if self._joins_by_record:
            found = list(dict.fromkeys([*found, *self._joins_by_record.get((tenant, system, record), ())]))
        return found

    def record_filings(self, tenant: str, system: str, record: str) -> list[Filing]:
        found = self.base.record_filings(tenant, system, record)
        found += [f for f in self.filings if f.tenant == tenant and f.system == system and f.record == record]
        return found

    def entity(self, tenant: str, entity_id: str) -> Entity | None:
        pending = self.entities.get((tenant, entity_id))
        return pending if pending is not None else self.base.entity(tenant, entity_id)

    def alias_targets(self, tenant: str, normalised: str, known_at: int | None = None) -> list[str]:
        targets = self.base.alias_targets(tenant, normalised, known_at)
        for alias in self._alias_index.get((tenant, normalised), []):
            if alias.entity_id not in targets and (known_at is None or alias.tx_from <= known_at):
                targets.append(alias.entity_id)
        return targets

    def neighbours(self, tenant: str, entity_type: str | None, normalised: str,
                   known_at: int | None = None) -> list[Candidate]:
        found = self.base.neighbours(tenant, entity_type, normalised, known_at)
        if not self.aliases:
            return found
        for index in range(self._ordered_upto, len(self.aliases)):
            alias = self.aliases[index]
            ordered = sort_key(alias.normalised)
            self._filed.append(Candidate(alias.entity_id, entity_type_of(alias.entity_id), alias.normalised))
            insort(self._by_key, (alias.tenant, ordered, index))
            insort(self._by_suffix, (alias.tenant, ordered[::-1], index))
        self._ordered_upto = len(self.aliases)
        for side in _beside(self._by_key, self._by_suffix, tenant, normalised):
            kept = 0
            for index in side:
                candidate = self._filed[index]
                recorded = known_at is None or self.aliases[index].tx_from <= known_at
                if (entity_type is None or candidate.type == entity_type) and recorded:
                    found.append(candidate)
                    kept += 1
                    if kept == NEIGHBOURS:
                        break
        return found

    def placeholders_near(self, tenant: str, entity_type: str, normalised: str) -> list[tuple[str, str]]:
        found = self.base.placeholders_near(tenant, entity_type, normalised)
        if not self.placeholders:
            return found
        for index in range(self._placeholders_upto, len(self.placeholders)):
            of_tenant, entity_id = self.placeholders[index]
            name = placeholder_name(entity_id)
            self._filed_placeholders.append((entity_type_of(entity_id), name))
            ordered = sort_key(name)
            insort(self._placeholders_by_key, (of_tenant, ordered, index))
            insort(self._placeholders_by_suffix, (of_tenant, ordered[::-1], index))
        self._placeholders_upto = len(self.placeholders)
        for side in _beside(self._placeholders_by_key, self._placeholders_by_suffix, tenant, normalised):
            kept = 0
            for index in side:
                of_type, name = self._filed_placeholders[index]
                if of_type == entity_type:
                    found.append((self.placeholders[index][1], name))
                    kept += 1
                    if kept == PLACEHOLDER_REACH:
                        break
        return found

    def review_item(self, tenant: str, review_id: str) -> ReviewItem | None:
        for item in self.review_items:
            if item.tenant == tenant and item.review_id == review_id:
                return item
        return self.base.review_item(tenant, review_id)

    def decision(self, tenant: str, review_id: str) -> Decision | None:
        for decision in self.decisions:
            if decision.tenant == tenant and decision.review_id == review_id:
                return decision
        return self.base.decision(tenant, review_id)

    def believed_from_record(self, tenant: str, system: str, record: str) -> list[EdgeVersion]:
        base = self.base.believed_from_record(tenant, system, record)
        new_ids = self._new_by_source.get((tenant, system, record), [])
        return [v for v in self._overlay(tenant, base, new_ids) if v.tx_to is None]

    def merges(self, tenant: str) -> Sequence[Merge]:
        base = self.base.merges(tenant)
        if not self.merge_rows:
            return base  # Speed: a batch with no identity edit (nearly all) adds nothing to look at
        mine = {merge_id: merge for (of_tenant, merge_id), merge in self.merge_rows.items() if of_tenant == tenant}
        if not mine:
            return base
        return [*(mine.pop(m.merge_id, m) for m in base), *mine.values()]

    def identity(self, tenant: str, known_at: int | None) -> IdentityMap | None:
        if not self.merge_rows:
            return self.base.identity(tenant, known_at)  # Speed: the store's map, built once
        if known_at is not None:
            return identity_as_of(self.merges(tenant), known_at)
        if tenant not in self._identity_now:
            self._identity_now[tenant] = identity_as_of(self.merges(tenant), None)
        return self._identity_now[tenant]

    def merge(self, tenant: str, merge_id: str) -> Merge | None:
        pending = self.merge_rows.get((tenant, merge_id))
        return pending if pending is not None else self.base.merge(tenant, merge_id)

    def has_placeholders(self, tenant: str) -> bool:
        return any(of_tenant == tenant for of_tenant, _ in self.placeholders) or self.base.has_placeholders(tenant)

    def event_seen(self, tenant: str, event_id: str) -> bool:
        key = (tenant, event_id)
        if key in self.seen:
            return True
        stored = self.recalled.get(key)
        return self.base.event_seen(tenant, event_id) if stored is None else stored

    def events_seen(self, keys: list[tuple[str, str]]) -> list[bool]:
        return [key in self.seen or stored for key, stored in zip(keys, self.base.events_seen(keys), strict=True)]

    def recall_seen(self, keys: list[tuple[str, str]]) -> None:
        """Read ahead, in one read of the store, whether it had seen these events: a batch's re-delivery
        checks then cost a dictionary lookup each. The store does not change under a batch until it
        commits, so the answers hold for the batch; ``seen`` still answers for the batch's own events."""
        self.recalled.update(zip(keys, self.base.events_seen(keys), strict=True))

    def last_tx(self) -> int:
        return self.tx if self.tx is not None else self.base.last_tx()

    # -- what the store writes ----------------------------------------------------------------------
    def final_versions(self) -> list[tuple[EdgeVersion, bool, bool]]:
        """Each touched version in its final state, with (is_new, was_closed_now)."""
        new = set(self.appended)
        closed = set(self.closed)
        return [(v, key in new, key in closed) for key, v in self.versions.items()]


def _still_believed(versions: list[EdgeVersion]) -> list[EdgeVersion]:
    return [v for v in versions if v.tx_to is None]


def _beside(by_key: list[tuple[str, str, int]], by_suffix: list[tuple[str, str, int]], tenant: str,
            normalised: str) -> list[list[int]]:
    """The indexes on each side of each probe of ``normalised`` (``matching.probes``) in two sorted
    (tenant, key, index) lists, nearest first, ``SCANNED`` at most a side: a batch's share of a lookup
    that the store answers from its ordered tables."""
    forward, backward = probes(normalised)
    sides = []
    for table, probe in [(by_key, key) for key in forward] + [(by_suffix, backward)]:
        at = bisect_left(table, (tenant, probe))
        for side in (table[at:at + SCANNED], table[max(0, at - SCANNED):at][::-1]):
            sides.append([index for of_tenant, _, index in side if of_tenant == tenant])
    return sides
