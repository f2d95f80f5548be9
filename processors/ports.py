"""The small read interfaces the pure core needs; ``state/`` implements them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

from processors.identity_map import IdentityMap
from processors.matching import Candidate
from processors.model import Decision, Direction, EdgeVersion, Entity, Filing, Merge, ReviewItem


class LedgerReader(Protocol):
    """What versioning needs to read. Every method is scoped to one tenant."""

    def believed_edge(self, tenant: str, src: str, rel: str, dst: str) -> list[EdgeVersion]:
        """The still-believed versions of one (src, rel, dst), any authority. Closed versions never
        change again, so versioning never needs them."""
        ...

    def believed_out(self, tenant: str, src: str, rel: str) -> list[EdgeVersion]:
        """The still-believed versions of every ``rel`` edge leaving ``src``."""
        ...

    def version(self, tenant: str, edge_id: str) -> EdgeVersion | None: ...

    def believed_by_source(self, tenant: str, system: str, record: str | None) -> list[EdgeVersion]:
        """The still-believed versions asserted by ``system`` (from ``record``, when given)."""
        ...

    def record_filings(self, tenant: str, system: str, record: str) -> list[Filing]:
        """What was filed about the record's statements (``processors.model.Filing``), in order of
        transaction time."""
        ...

    def version_revoked(self, tenant: str, system: str, record: str, version: str | None) -> bool:
        """Whether a ``revoke_source`` ever named this version of the record (or the whole record)."""
        ...

    def lineage_joins(self, tenant: str, lineage: str) -> list[str]:
        """The records, besides the one that made it, that stated the fact (``Filing.joined``)."""
        ...

    def record_joins(self, tenant: str, system: str, record: str) -> list[str]:
        """The lineages of the facts of other records of ``system`` that ``record`` stated too."""
        ...

    def entity(self, tenant: str, entity_id: str) -> Entity | None: ...

    def alias_targets(self, tenant: str, normalised: str, known_at: int | None = None) -> list[str]:
        """Entity ids the alias names, as of ``known_at`` (``None``: everything recorded)."""
        ...

    def neighbours(self, tenant: str, entity_type: str | None, normalised: str,
                   known_at: int | None = None) -> list[Candidate]:
        """The aliases next to the name ``normalised`` in the alias table's orderings (``matching.probes``),
        of ``entity_type`` (``None``: any), as of ``known_at``: ``matching.NEIGHBOURS`` on each side of
        each probe."""
        ...

    def believed_from_record(self, tenant: str, system: str, record: str) -> list[EdgeVersion]:
        """The still-believed versions whose provenance is this source record (what it says now)."""
        ...

    def merges(self, tenant: str) -> Sequence[Merge]:
        """Every merge the tenant ever had, split ones too (empty, at the cost of a dictionary lookup,
        for a tenant that never had one)."""
        ...

    def merge(self, tenant: str, merge_id: str) -> Merge | None: ...

    def identity(self, tenant: str, known_at: int | None) -> IdentityMap | None:
        """The merges in effect at ``known_at`` (``None``: now); None when none is (and for a tenant
        that never had one, at the cost of a dictionary lookup)."""
        ...

    def has_placeholders(self, tenant: str) -> bool:
        """Whether the tenant has any ``Type:~name`` entity (none: no absorption to look for)."""
        ...

    def placeholders_near(self, tenant: str, entity_type: str, normalised: str) -> list[tuple[str, str]]:
        """(placeholder id, its name) of the placeholders of ``entity_type`` next to the name ``normalised``
        in the placeholders' own two orders (as ``neighbours`` in the alias table's)."""
        ...

    def event_seen(self, tenant: str, event_id: str) -> bool: ...

    def review_item(self, tenant: str, review_id: str) -> ReviewItem | None: ...

    def decision(self, tenant: str, review_id: str) -> Decision | None:
        """The decision that closed the review item, or None while it is open."""
        ...

    def events_seen(self, keys: list[tuple[str, str]]) -> list[bool]:
        """``event_seen`` of each (tenant, event id), in order, in one read."""
        ...

    def last_tx(self) -> int: ...


class GraphReader(Protocol):
    """What traversals need to read."""

    def adjacent(self, tenant: str, node: str, rel: str, direction: Direction) -> Iterable[EdgeVersion]:
        """Every version of every ``rel`` edge at ``node`` in ``direction``, in order of recording
        (``tx_from``, then edge id): the versions known at a past transaction time come first."""
        ...

    def iter_adjacent(self, tenant: str, node: str, rel: str, direction: Direction,
                      known_at: int | None = None) -> Iterator[EdgeVersion]:
        """``adjacent``, decoded lazily, and only the versions recorded at or before ``known_at``
        (all when ``None``): a walk whose budget runs out stops reading a hub early, and a past read
        stops at the first version recorded after it without decoding it."""
        ...

    def entity(self, tenant: str, entity_id: str) -> Entity | None: ...

    def alias_targets(self, tenant: str, normalised: str, known_at: int | None = None) -> list[str]: ...

    def merges(self, tenant: str) -> Sequence[Merge]:
        """Every merge the tenant ever had (``processors.identity_map.identity_as_of`` reads them as of a time)."""
        ...

    def identity(self, tenant: str, known_at: int | None) -> IdentityMap | None:
        """The identity map as of ``known_at`` (``processors.identity_map``); None when no merge holds."""
        ...

    def neighbours(self, tenant: str, entity_type: str | None, normalised: str,
                   known_at: int | None = None) -> list[Candidate]: ...


class StatementReader(Protocol):
    """What finding a piece's statements reads (``processors.statements``)."""

    def version(self, tenant: str, edge_id: str) -> EdgeVersion | None: ...

    def record_filings(self, tenant: str, system: str, record: str) -> list[Filing]: ...

    def lineage_joins(self, tenant: str, lineage: str) -> list[str]: ...


class HistoryReader(StatementReader, Protocol):
    """What ``history`` reads beside anchors: every version at a node, and what was filed of it."""

    def adjacent_any(self, tenant: str, node: str) -> Iterable[EdgeVersion]:
        """Every version at ``node``, any relationship, both directions."""
        ...
