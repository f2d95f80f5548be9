"""Bounded traversals: a plan of steps, ceilings on every dimension, filters applied at each edge.

A plan is a sequence of steps; each step allows some (relationship, direction) pairs and a range
of hops. ``owners-of`` is one step of ``owned_by:out``; ``approvals-required-for`` is
``depends_on:in`` (1..depth hops) then ``owned_by:out``, ``governed_by:out``, ``requires:out``.
A path that completes the last step ends at an answer.

Expansion is breadth-first over paths. Each edge record read counts against ``max_expansions``
whether or not it survives the filters; time (both clocks), tenant and node type are checked as
each edge is read, never after. When a ceiling stops the walk, the result says which one and
which nodes were left unexpanded (the frontier): a partial answer never looks complete.

Identity: nodes are entities as the ledger knew them at ``known_at`` (``processors.identity_map``).
Expanding a node reads the adjacencies of every id merged into it and names each neighbour by its
survivor; paths keep the stored edge ids. A tenant with no merge skips all of it.
"""

from __future__ import annotations

import sys
from collections import deque
from dataclasses import dataclass, field

from processors.identity_map import IdentityMap
from processors.matching import entity_type_of
from processors.model import Direction, EdgeVersion
from processors.ports import GraphReader
from schemas.query_params import MAX_DEGREE, MAX_DEPTH, MAX_EVIDENCE_TOKENS, MAX_EXPANSIONS, MAX_PATHS

UNBOUNDED_HOPS = sys.maxsize
"""A step's ``max_hops`` when only the walk's ``max_depth`` bounds it (``traverse``). The ceiling, not
the step, then stops the walk, so reaching it is reported as ``max_depth`` truncation."""


@dataclass(frozen=True, slots=True)
class Step:
    allowed: tuple[tuple[str, Direction], ...]
    min_hops: int = 1
    max_hops: int = 1


@dataclass(frozen=True, slots=True)
class Plan:
    name: str
    steps: tuple[Step, ...]
    node_types: frozenset[str] | None = None
    """When set, only nodes of these types are entered (the anchor excepted)."""

    @property
    def relationships(self) -> frozenset[str]:
        return frozenset(rel for step in self.steps for rel, _ in step.allowed)


@dataclass(frozen=True, slots=True)
class Limits:
    max_depth: int = MAX_DEPTH
    max_expansions: int = MAX_EXPANSIONS
    max_paths: int = MAX_PATHS
    max_evidence_tokens: int = MAX_EVIDENCE_TOKENS
    max_degree: int = MAX_DEGREE

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")


@dataclass(frozen=True, slots=True)
class Path:
    nodes: tuple[str, ...]
    edges: tuple[str, ...]


@dataclass
class Traversal:
    """What a walk found and where it stopped."""

    paths: list[Path] = field(default_factory=list)
    edges: dict[str, EdgeVersion] = field(default_factory=dict)
    corroborating: dict[str, list[str]] = field(default_factory=dict)
    edges_read: int = 0
    limits_hit: list[str] = field(default_factory=list)
    frontier: list[tuple[str, int, str]] = field(default_factory=list)
    read_set: set[tuple[str, str, Direction]] = field(default_factory=set)
    """The adjacencies read: (node, rel, direction). A change touching one may change the answer."""

    def hit(self, limit: str) -> None:
        if limit not in self.limits_hit:
            self.limits_hit.append(limit)

    def cut(self, node: str, depth: int, limit: str) -> None:
        """A ceiling stopped the walk at ``node``: say which, and put the node on the frontier."""
        self.hit(limit)
        self.frontier.append((node, depth, limit))

    @property
    def truncated(self) -> bool:
        return bool(self.limits_hit)


class ExpansionBudgetSpent(Exception):
    pass


class PlanRefused(ValueError):
    """The planner will not run this traversal (for example: no tenant)."""


@dataclass(frozen=True, slots=True)
class _Partial:
    node: str
    step: int
    hops: int
    nodes: tuple[str, ...]
    edges: tuple[str, ...]


def traverse(
    reader: GraphReader,
    tenant: str,
    anchor: str,
    plan: Plan,
    limits: Limits,
    valid_at: int,
    known_at: int,
) -> Traversal:
    if not tenant:
        raise PlanRefused("a traversal needs a tenant; there is no default tenant")
    if not plan.steps:
        raise PlanRefused("a traversal plan needs at least one step")
    walk = Traversal()
    identity = reader.identity(tenant, known_at)
    if identity is not None:
        anchor = identity.canonical(anchor)
    adjacency_cache: dict[tuple[str, str, Direction], list[EdgeVersion]] = {}
    queue: deque[_Partial] = deque([_Partial(anchor, 0, 0, (anchor,), ())])
    last = len(plan.steps) - 1
    try:
        while queue:
            partial = queue.popleft()
            moves = _moves(plan, partial)
            if not moves:
                continue
            depth = len(partial.edges)
            if depth >= limits.max_depth:
                walk.cut(partial.node, depth, "max_depth")
                continue
            for move, (rel, direction, next_step, next_hops) in enumerate(moves):
                chosen = _expand(reader, tenant, partial.node, rel, direction, plan, limits, valid_at,
                                 known_at, walk, adjacency_cache, depth, identity)
                for index, (other, version, also) in enumerate(chosen):
                    if other in partial.nodes:
                        continue
                    walk.edges.setdefault(version.edge_id, version)
                    if also:
                        walk.corroborating[version.edge_id] = [v.edge_id for v in also]
                        for extra in also:
                            walk.edges.setdefault(extra.edge_id, extra)
                    extended = _Partial(other, next_step, next_hops, (*partial.nodes, other),
                                        (*partial.edges, version.edge_id))
                    if next_step == last and next_hops >= plan.steps[last].min_hops:
                        if len(walk.paths) >= limits.max_paths:
                            walk.hit("max_paths")
                            # Cut here: this answer, the rest of this adjacency, and the node's moves not taken.
                            walk.frontier += [(cut, depth + 1, "max_paths") for cut, _, _ in chosen[index:]
                                              if cut not in partial.nodes]
                            if move + 1 < len(moves):
                                walk.frontier.append((partial.node, depth, "max_paths"))
                            raise ExpansionBudgetSpent
                        walk.paths.append(Path(extended.nodes, extended.edges))
                    queue.append(extended)
    except ExpansionBudgetSpent:
        for partial in queue:
            if _moves(plan, partial):
                walk.frontier.append((partial.node, len(partial.edges), walk.limits_hit[-1]))
    _prune_unused_edges(walk)
    return walk


def _moves(plan: Plan, partial: _Partial) -> list[tuple[str, Direction, int, int]]:
    """The (rel, direction, next step, hops in it) a path may take from where it stands."""
    step = plan.steps[partial.step]
    moves: list[tuple[str, Direction, int, int]] = []
    if partial.hops < step.max_hops:
        moves += [(rel, d, partial.step, partial.hops + 1) for rel, d in step.allowed]
    if partial.step + 1 < len(plan.steps) and partial.hops >= step.min_hops:
        following = plan.steps[partial.step + 1]
        moves += [(rel, d, partial.step + 1, 1) for rel, d in following.allowed]
    return moves


def _expand(
    reader: GraphReader,
    tenant: str,
    node: str,
    rel: str,
    direction: Direction,
    plan: Plan,
    limits: Limits,
    valid_at: int,
    known_at: int,
    walk: Traversal,
    cache: dict[tuple[str, str, Direction], list[EdgeVersion]],
    depth: int,
    identity: IdentityMap | None = None,
) -> list[tuple[str, EdgeVersion, list[EdgeVersion]]]:
    """Read one adjacency (of every id merged into ``node``), filter each edge as it is read, group
    versions of the same fact."""
    by_other: dict[str, list[EdgeVersion]] = {}
    for member in (node,) if identity is None else identity.members(node):
        key = (member, rel, direction)
        walk.read_set.add(key)
        cached = cache.get(key)
        read: list[EdgeVersion] = []
        # The reader yields only versions recorded at or before known_at (adjacencies are in order of
        # recording), so a walk then read exactly what this one reads: past answers reproduce, truncation included.
        for version in cached if cached is not None else reader.iter_adjacent(tenant, member, rel, direction,
                                                                               known_at):
            if cached is None:
                read.append(version)
            if walk.edges_read >= limits.max_expansions:
                walk.cut(node, depth, "max_expansions")
                raise ExpansionBudgetSpent
            walk.edges_read += 1
            if version.tenant != tenant or not version.visible(valid_at, known_at):
                continue
            other = version.dst if direction == "out" else version.src
            if identity is not None:
                other = identity.canonical(other)  # an edge to an absorbed id reaches its survivor
            if plan.node_types is not None and entity_type_of(other) not in plan.node_types:
                continue
            by_other.setdefault(other, []).append(version)
        if cached is None:
            cache[key] = read  # the budget did not stop it: this is the whole adjacency as of known_at
    if len(by_other) > limits.max_degree:
        walk.cut(node, depth, "max_degree")
        by_other = dict(list(by_other.items())[: limits.max_degree])
    chosen = []
    for other, versions in by_other.items():
        versions.sort(key=lambda v: (-v.confidence, -v.tx_from, v.edge_id))
        chosen.append((other, versions[0], versions[1:]))
    return chosen


def _prune_unused_edges(walk: Traversal) -> None:
    """Keep only edges on returned paths (and their corroborating versions)."""
    used = {edge_id for path in walk.paths for edge_id in path.edges}
    keep = set(used)
    for edge_id in used:
        keep.update(walk.corroborating.get(edge_id, ()))
    walk.edges = {k: v for k, v in walk.edges.items() if k in keep}
    walk.corroborating = {k: v for k, v in walk.corroborating.items() if k in used}
