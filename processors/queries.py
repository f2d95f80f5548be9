"""The query engine: named, parameterised traversals over a ``GraphReader``.

Every query takes a tenant and both clocks: ``valid_at`` (when in the world) and ``known_at``
(as the ledger believed at that transaction time). The anchor is resolved as of ``known_at``
too, so an as-known query sees the identities of its time: an id merged into another at ``known_at``
resolves to its survivor, and the survivor's walk reads the adjacencies of every id merged into it
(``processors.identity_map``). ``processors.query_requests`` makes a
request of a query's parameters; ``processors.query_results`` builds the result's shape.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Literal

from processors.identity import normalise_name
from processors.identity_map import IDENTITY_READ, canonical_ids
from processors.matching import best_match, entity_type_of
from processors.model import Direction, EdgeVersion, Filing
from processors.ports import GraphReader, HistoryReader
from processors.query_results import disposition, edge_out, fill_result, limits_dict
from processors.statements import StatementIndex
from processors.traversal import (
    UNBOUNDED_HOPS,
    ExpansionBudgetSpent,
    Limits,
    Path,
    Plan,
    PlanRefused,
    Step,
    Traversal,
    traverse,
)
from schemas.ontology import Ontology
from schemas.query_params import QUERY_NAMES
from schemas.results import AnchorOut, Change, EdgeVersionOut, HistoryResult, QueryOut, QueryResult, StatementOut
from schemas.times import format_micros


@dataclass(frozen=True)
class QueryRequest:
    name: str
    tenant: str
    entity: str
    valid_at: int
    known_at: int
    limits: Limits = field(default_factory=Limits)
    depth: int = 1
    edges: tuple[tuple[str, Direction], ...] = ()
    node_types: frozenset[str] | None = None
    changed_from: int | None = None
    changed_to: int | None = None
    axis: Literal["valid", "tx"] = "valid"

    def params(self) -> dict[str, object]:
        params: dict[str, object] = {}
        if self.name in ("dependents-of", "approvals-required-for", "neighbourhood"):
            params["depth"] = self.depth
        if self.name == "traverse":
            params["edges"] = [f"{rel}:{d}" for rel, d in self.edges]
        if self.node_types:
            params["node_types"] = sorted(self.node_types)
        if self.name == "changed-between":
            params.update(
                {"from": format_micros(self.changed_from), "to": format_micros(self.changed_to), "axis": self.axis}
            )
        return params


def plan_for(request: QueryRequest, ontology: Ontology) -> Plan:
    name = request.name
    if request.depth < 1:
        raise PlanRefused("depth must be at least 1")
    if name == "owners-of":
        return Plan(name, (Step((("owned_by", "out"),)),), request.node_types)
    if name == "dependents-of":
        return Plan(name, (Step((("depends_on", "in"),), 1, request.depth),), request.node_types)
    if name == "approvals-required-for":
        return Plan(
            name,
            (
                Step((("depends_on", "in"),), 1, request.depth),
                Step((("owned_by", "out"),)),
                Step((("governed_by", "out"),)),
                Step((("requires", "out"),)),
            ),
        )
    if name == "neighbourhood":
        directions: tuple[Direction, ...] = ("out", "in")
        every = tuple((rel, d) for rel in ontology.relationships for d in directions)
        return Plan(name, (Step(every, 1, request.depth),), request.node_types)
    if name == "traverse":
        if not request.edges:
            raise PlanRefused("traverse needs --edges, e.g. depends_on:in,owned_by:out")
        unknown = sorted({rel for rel, _ in request.edges} - set(ontology.relationships))
        if unknown:
            raise PlanRefused(f"unknown relationship(s) in --edges: {', '.join(unknown)}")
        # No hop limit of its own: max_depth is a ceiling here as everywhere, so a walk it cuts (paths
        # that could go on) says truncated, max_depth and the frontier, as dependents-of does. A step of
        # max_depth hops would run out exactly there and never reach the ceiling's check.
        return Plan(name, (Step(request.edges, 1, UNBOUNDED_HOPS),), request.node_types)
    raise PlanRefused(f"unknown query {name!r}; one of: {', '.join(QUERY_NAMES)}")


# -- anchor resolution -----------------------------------------------------------------------------------
def resolve_anchor(reader: GraphReader, tenant: str, text: str, known_at: int, *,
                   entity_types: Collection[str]) -> AnchorOut:
    """Identifier first, then the alias table, then the fuzzy matcher over blocked aliases (read only),
    as of ``known_at``.

    ``Type:name`` looks ``name`` up among the entities of that type when ``Type`` is one of
    ``entity_types`` (the ontology in use). When the prefix is no such type, or that lookup finds
    nothing, the whole text is the name: an alias may hold a colon ("Ledger: Writer"). A capitalised
    prefix the ontology does not know is still tried as a type, after the whole text, so that data
    loaded under another ontology than the reader's (``query`` reads with the default one) resolves
    as before. A name no alias holds exactly is matched as a mention is (``processors.matching``): a
    clear match resolves (``match``), two alike answer ``ambiguous`` with the candidates, and a name
    like none is ``unresolved``; ``Type:name`` matches among that type only.
    """
    identity = reader.identity(tenant, known_at)
    entity = reader.entity(tenant, text)
    if entity is not None and entity.first_tx <= known_at:
        return AnchorOut(input=text, entity=identity.canonical(text) if identity is not None else text,
                         resolution="identifier")
    wanted_type, _, rest = text.partition(":")

    def whole() -> list[str]:
        return reader.alias_targets(tenant, normalise_name(text), known_at)

    def typed() -> list[str]:
        return [e for e in reader.alias_targets(tenant, normalise_name(rest), known_at)
                if entity_type_of(e) == wanted_type]

    lookups: tuple[Callable[[], list[str]], ...] = (whole,)
    if rest and entity is None:
        if wanted_type in entity_types:
            lookups = (typed, whole)
        elif wanted_type[:1].isupper():
            lookups = (whole, typed)
    candidates: list[str] = []
    for lookup in lookups:
        candidates = canonical_ids(identity, lookup())  # names of merged entities name their survivor
        if candidates:
            break
    if len(candidates) == 1:
        return AnchorOut(input=text, entity=candidates[0], resolution="alias")
    if candidates:
        return AnchorOut(input=text, entity=None, resolution="ambiguous", candidates=sorted(candidates))
    match_type = wanted_type if rest and wanted_type in entity_types else None
    name = normalise_name(rest if match_type is not None else text)
    match = best_match(match_type, name, reader.neighbours(tenant, match_type, name, known_at))
    if match.kind == "match":
        return AnchorOut(input=text, entity=match.entity_id, resolution="match")
    if match.kind == "abstain":
        return AnchorOut(input=text, entity=None, resolution="ambiguous",
                         candidates=[s.entity_id for s in match.candidates])
    return AnchorOut(input=text, entity=None, resolution="unresolved")


StaleSources = Callable[[str, frozenset[str], int], list[str]]
"""(tenant, relationships the query reads, its known_at) -> stale source systems they depend on, as
the ledger knew them at known_at (a past answer's coverage is as reproducible as its edges)."""


def no_stale_sources(tenant: str, relationships: frozenset[str], known_at: int) -> list[str]:
    return []


@dataclass
class QueryEngine:
    reader: GraphReader
    ontology: Ontology
    stale_sources: StaleSources = no_stale_sources

    def run(self, request: QueryRequest) -> QueryResult:
        result, _ = self.run_with_read_set(request)
        return result

    def run_with_read_set(self, request: QueryRequest) -> tuple[QueryResult, set[tuple[str, str, Direction]]]:
        if not request.tenant:
            raise PlanRefused("a query needs a tenant; there is no default tenant")
        plan = None if request.name == "changed-between" else plan_for(request, self.ontology)
        anchor = resolve_anchor(self.reader, request.tenant, request.entity, request.known_at,
                                entity_types=self.ontology.entity_types)
        result = QueryResult(
            query=QueryOut(name=request.name, tenant=request.tenant, entity=request.entity,
                           limits=limits_dict(request.limits), params=request.params()),
            valid_at=format_micros(request.valid_at) or "",
            known_at=format_micros(request.known_at) or "",
            anchor=anchor,
            disposition="unknown",
        )
        read_set: set[tuple[str, str, Direction]] = set()
        if anchor.resolution == "ambiguous":
            result.disposition = "ambiguous"
            result.coverage.note = "the anchor names several entities; pick one of the candidates"
            return result, read_set
        if anchor.entity is None:
            result.coverage.note = (
                "the anchor did not resolve to a known entity as of known_at: the answer is unknown, not none"
            )
            return result, read_set
        if plan is None:
            walk = self._changed_between(request, anchor.entity, result)
            relationships = frozenset(self.ontology.relationships)
        else:
            walk = traverse(self.reader, request.tenant, anchor.entity, plan, request.limits,
                            request.valid_at, request.known_at)
            relationships = plan.relationships
        read_set = walk.read_set
        # Every node the answer names, so that an identity edit there finds it (``IDENTITY_READ``).
        read_set.update((node, IDENTITY_READ, "out") for path in walk.paths for node in path.nodes)
        fill_result(result, walk, request, self.reader)
        stale = self.stale_sources(request.tenant, relationships, request.known_at)
        result.coverage.stale_sources = stale
        result.disposition, result.coverage.note = disposition(bool(result.results), walk.truncated, stale)
        return result, read_set

    def _changed_between(self, request: QueryRequest, anchor: str, result: QueryResult) -> Traversal:
        """Edges at the anchor that started or ended in [from, to) in valid time (as known at
        ``known_at``), or, with ``axis='tx'``, that the ledger appended or closed in that window."""
        start = request.changed_from
        end = request.changed_to if request.changed_to is not None else request.known_at
        if start is None:
            raise PlanRefused("changed-between needs --from")

        def within(instant: int | None) -> bool:
            return instant is not None and start <= instant < end

        walk = Traversal()
        changes: list[tuple[int, Change]] = []
        identity = self.reader.identity(request.tenant, request.known_at)
        members = (anchor,) if identity is None else identity.members(anchor)
        try:
            for rel in self.ontology.relationships:
                for direction in ("out", "in"):
                    for member in members:
                        self._changes_at(request, anchor, member, rel, direction, within, walk, changes)
        except ExpansionBudgetSpent:
            pass  # the walk says which ceiling stopped it, and the anchor is its frontier
        changes.sort(key=lambda item: (item[0], item[1].edge_id))
        result.changes = [change for _, change in changes]
        return walk

    def _changes_at(self, request: QueryRequest, anchor: str, member: str, rel: str, direction: Direction,
                    within: Callable[[int | None], bool], walk: Traversal, changes: list[tuple[int, Change]]) -> None:
        """One adjacency of the anchor (of ``member``, one of the ids merged into it), under the ceilings
        every walk has (``traversal._expand``): each edge record read counts against ``max_expansions``,
        at most ``max_degree`` neighbours per adjacency, at most ``max_paths`` changed edges in all."""
        limits = request.limits
        walk.read_set.add((member, rel, direction))
        neighbours: set[str] = set()
        # Only what was recorded by known_at is read or counted, so a past answer's counts hold.
        for version in self.reader.iter_adjacent(request.tenant, member, rel, direction, request.known_at):
            if walk.edges_read >= limits.max_expansions:
                walk.cut(anchor, 0, "max_expansions")
                raise ExpansionBudgetSpent
            walk.edges_read += 1
            found = _changes_of(version, request, within)
            if not found:
                continue
            other = version.dst if direction == "out" else version.src
            if other not in neighbours and len(neighbours) >= limits.max_degree:
                if (anchor, 0, "max_degree") not in walk.frontier:  # once, though several adjacencies hit it
                    walk.cut(anchor, 0, "max_degree")
                continue  # as ``_expand``: the first neighbours keep all their changes
            if len(walk.paths) >= limits.max_paths:
                walk.cut(anchor, 0, "max_paths")
                raise ExpansionBudgetSpent
            neighbours.add(other)
            changes.extend(found)
            walk.edges[version.edge_id] = version
            walk.paths.append(_single(anchor, other, version.edge_id))

    def history(self, tenant: str, entity: str, known_at: int, valid_at: int | None, rel: str | None,
                store: HistoryReader) -> HistoryResult:
        if not tenant:
            raise PlanRefused("history needs a tenant; there is no default tenant")
        anchor = resolve_anchor(self.reader, tenant, entity, known_at, entity_types=self.ontology.entity_types)
        versions: list[EdgeVersion] = []
        if anchor.entity is not None:
            seen: set[str] = set()
            identity = self.reader.identity(tenant, known_at)
            members = (anchor.entity,) if identity is None else identity.members(anchor.entity)
            for version in (v for member in members for v in store.adjacent_any(tenant, member)):
                if version.edge_id in seen or version.tx_from > known_at:
                    continue
                if rel is not None and version.rel != rel:
                    continue
                if valid_at is not None and not version.valid_at(valid_at):
                    continue
                seen.add(version.edge_id)
                versions.append(version)
        versions.sort(key=lambda v: (v.src, v.rel, v.dst, v.tx_from, v.valid_from or -(1 << 62), v.edge_id))
        return HistoryResult(
            tenant=tenant, entity=entity, anchor=anchor, known_at=format_micros(known_at) or "",
            valid_at=format_micros(valid_at), rel=rel,
            versions=_with_statements([(edge_out(v, known_at), v) for v in versions], known_at, store),
        )


def _with_statements(versions: list[tuple[EdgeVersionOut, EdgeVersion]], known_at: int,
                     store: HistoryReader) -> list[EdgeVersionOut]:
    """Each version's result with every statement of it, as known at ``known_at`` (a closed version:
    those filed before its closing). Each record's filings are read once."""
    index = StatementIndex(_KnownAt(store, known_at), versions[0][1].tenant) if versions else None
    for out, version in versions:
        assert index is not None
        out.stated_by = [
            StatementOut(record=s.record or None, version=s.version, evidence=s.evidence, event_id=s.event_id,
                         stated_at=format_micros(s.tx) or "",
                         valid_from=format_micros(s.valid[0]) if s.valid else None,
                         valid_to=format_micros(s.valid[1]) if s.valid else None,
                         ended=s.valid is None, withdrawn_at=format_micros(s.withdrawn_at))
            for s in index.of(version, until=version.closed_as_known_at(known_at))
        ]
    return [out for out, _ in versions]


class _KnownAt:
    """A history reader showing only what was filed by ``known_at``."""

    def __init__(self, store: HistoryReader, known_at: int) -> None:
        self.store = store
        self.known_at = known_at

    def version(self, tenant: str, edge_id: str) -> EdgeVersion | None:
        return self.store.version(tenant, edge_id)

    def record_filings(self, tenant: str, system: str, record: str) -> list[Filing]:
        return [f for f in self.store.record_filings(tenant, system, record) if f.tx <= self.known_at]

    def lineage_joins(self, tenant: str, lineage: str) -> list[str]:
        return self.store.lineage_joins(tenant, lineage)


def _single(anchor: str, other: str, edge_id: str) -> Path:
    return Path((anchor, other), (edge_id,))


def _changes_of(version: EdgeVersion, request: QueryRequest,
                within: Callable[[int | None], bool]) -> list[tuple[int, Change]]:
    """The version's changes in the window, each with its instant (``Change.at`` is its text, and text
    does not sort as time: ``...00.000001Z`` comes before ``...00Z``)."""
    moments: list[tuple[int | None, Literal["started", "ended", "appended", "closed"]]]
    if request.axis == "tx":
        closed = version.tx_to if version.tx_to is not None and version.tx_to <= request.known_at else None
        moments = [(version.tx_from if version.tx_from <= request.known_at else None, "appended"), (closed, "closed")]
    elif version.known_at(request.known_at):
        moments = [(version.valid_from, "started"), (version.valid_to, "ended")]
    else:
        return []
    return [(instant, Change(edge_id=version.edge_id, change=change, at=format_micros(instant)))
            for instant, change in moments if instant is not None and within(instant)]

