"""Query results, edge versions and corrections as users and agents receive them (see CONTRACT.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Disposition = Literal["answer", "none", "unknown", "ambiguous"]
AnchorResolution = Literal["identifier", "alias", "match", "ambiguous", "unresolved"]


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SourceOut(Out):
    system: str
    record: str | None = None
    version: str | None = None


class StatementOut(Out):
    """One statement of the edge: by its source record (the first made the edge version, a later version
    asserted it again unchanged) or by another record of the same source that asserted the same edge.
    ``valid_from``/``valid_to``: the part it states (both null and ``ended``: none any more, its record
    stopped saying it); ``withdrawn_at``: when its version was revoked (null: it stands)."""

    record: str | None
    version: str | None
    evidence: str
    event_id: str
    stated_at: str
    valid_from: str | None
    valid_to: str | None
    ended: bool = False
    withdrawn_at: str | None = None


class EdgeVersionOut(Out):
    """One edge version with both intervals; ``tx_to: null`` means still believed."""

    edge_id: str
    tenant: str
    src: str
    rel: str
    dst: str
    valid_from: str | None
    valid_to: str | None
    tx_from: str
    tx_to: str | None
    source: SourceOut
    evidence: str | None
    confidence: float
    origin: str
    supersedes: list[str] = Field(default_factory=list)
    event_id: str
    detected_at: str | None = None
    phrase: str | None = None
    evidence_omitted: bool = False
    corroborated_by: list[str] = Field(default_factory=list)
    stated_by: list[StatementOut] | None = None
    """In ``history``: every version of the source record that stated this edge version, as known at its
    ``known_at``; null elsewhere."""


class CorrectionOut(Out):
    kind: Literal["correction"] = "correction"
    correction_id: str
    tenant: str
    event_id: str
    tx_at: str
    cause: str
    old_edge_ids: list[str]
    new_edge_ids: list[str]


class AnchorOut(Out):
    input: str
    entity: str | None
    resolution: AnchorResolution
    candidates: list[str] = Field(default_factory=list)


class ResultEntity(Out):
    entity: str
    type: str
    name: str | None


class PathOut(Out):
    nodes: list[str]
    edges: list[str]


class Counts(Out):
    edges_read: int = 0
    """Edge records examined while expanding, before filtering and de-duplication."""
    edges_unique: int = 0
    nodes_unique: int = 0
    paths: int = 0
    results: int = 0


class FrontierNode(Out):
    node: str
    depth: int
    reason: str


class Coverage(Out):
    stale_sources: list[str] = Field(default_factory=list)
    note: str = ""


class Change(Out):
    edge_id: str
    change: Literal["started", "ended", "appended", "closed"]
    at: str | None


class QueryOut(Out):
    name: str
    tenant: str
    entity: str
    limits: dict[str, Any] = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict)


class QueryResult(Out):
    query: QueryOut
    valid_at: str
    known_at: str
    anchor: AnchorOut
    disposition: Disposition
    results: list[ResultEntity] = Field(default_factory=list)
    paths: list[PathOut] = Field(default_factory=list)
    edges: dict[str, EdgeVersionOut] = Field(default_factory=dict)
    counts: Counts = Field(default_factory=Counts)
    truncated: bool = False
    limits_hit: list[str] = Field(default_factory=list)
    frontier: list[FrontierNode] = Field(default_factory=list)
    coverage: Coverage = Field(default_factory=Coverage)
    changes: list[Change] | None = None


class HistoryResult(Out):
    tenant: str
    entity: str
    anchor: AnchorOut
    known_at: str
    valid_at: str | None
    rel: str | None
    versions: list[EdgeVersionOut]
