"""The contract's result shape, built from a walk: edges as the contract's JSON, evidence within its
token budget, paths, answers, counts, and the disposition that says what an empty answer means."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from processors.matching import entity_type_of
from processors.model import EdgeVersion
from processors.ports import GraphReader
from processors.traversal import Limits, Traversal
from schemas.results import (
    Counts,
    Disposition,
    EdgeVersionOut,
    FrontierNode,
    PathOut,
    QueryResult,
    ResultEntity,
)
from schemas.times import format_micros

if TYPE_CHECKING:
    from processors.queries import QueryRequest


def estimate_tokens(text: str) -> int:
    """Evidence tokens are estimated as one per four characters, rounded up (a common rule of thumb)."""
    return math.ceil(len(text) / 4)


def edge_json(version: EdgeVersion, known_at: int | None = None, evidence: bool = True) -> dict[str, Any]:
    """The contract's edge shape as plain JSON; ``known_at`` hides a closing that happened after it.
    The one definition of that shape, which results wrap."""
    tx_to = version.tx_to if known_at is None else version.closed_as_known_at(known_at)
    return {
        "edge_id": version.edge_id, "tenant": version.tenant, "src": version.src, "rel": version.rel,
        "dst": version.dst, "valid_from": format_micros(version.valid_from),
        "valid_to": format_micros(version.valid_to), "tx_from": format_micros(version.tx_from) or "",
        "tx_to": format_micros(tx_to),
        "source": {"system": version.authority, "record": version.source_record, "version": version.source_version},
        "evidence": version.evidence if evidence else None, "confidence": version.confidence,
        "origin": version.origin, "supersedes": list(version.supersedes), "event_id": version.event_id,
        "detected_at": format_micros(version.detected_at), "phrase": version.phrase,
    }


def edge_out(version: EdgeVersion, known_at: int | None = None, evidence: bool = True,
             corroborated_by: list[str] | None = None) -> EdgeVersionOut:
    """``edge_json`` as the result model. Speed: validating the plain dict (pydantic-core, in Rust) is
    faster than ``model_construct``, whose per-field loop runs in Python."""
    data = edge_json(version, known_at, evidence)
    data["evidence_omitted"] = not evidence
    data["corroborated_by"] = corroborated_by or []
    return EdgeVersionOut.model_validate(data)


def fill_result(result: QueryResult, walk: Traversal, request: QueryRequest, reader: GraphReader) -> None:
    """Put what ``walk`` found into ``result``: its edges (evidence while ``max_evidence_tokens`` lasts),
    paths, the entities they end at, and what cut the walk short."""
    tokens = 0
    for edge_id, version in walk.edges.items():
        cost = estimate_tokens(version.evidence)
        admit = tokens + cost <= request.limits.max_evidence_tokens
        if admit:
            tokens += cost
        else:
            walk.hit("max_evidence_tokens")
        result.edges[edge_id] = edge_out(version, request.known_at, evidence=admit,
                                         corroborated_by=walk.corroborating.get(edge_id))
    answers: dict[str, None] = {}
    for path in walk.paths:
        result.paths.append(PathOut.model_validate({"nodes": path.nodes, "edges": path.edges}))
        answers.setdefault(path.nodes[-1], None)
    for entity_id in answers:
        entity = reader.entity(request.tenant, entity_id)
        result.results.append(ResultEntity.model_validate(
            {"entity": entity_id, "type": entity_type_of(entity_id), "name": entity.name if entity else None}))
    result.truncated = walk.truncated
    result.limits_hit = list(walk.limits_hit)
    result.frontier = [FrontierNode(node=n, depth=d, reason=r) for n, d, r in walk.frontier]
    nodes = {node for path in walk.paths for node in path.nodes}
    result.counts = Counts(edges_read=walk.edges_read, edges_unique=len(walk.edges),
                           nodes_unique=len(nodes), paths=len(walk.paths), results=len(answers))


def disposition(has_results: bool, truncated: bool, stale: list[str]) -> tuple[Disposition, str]:
    """What the result means, and the note that says so: an answer, none, or unknown (an empty result
    after a ceiling was hit, or with stale sources, is not none)."""
    if has_results:
        notes = []
        if truncated:
            notes.append("a ceiling was hit: there may be more answers beyond the frontier")
        if stale:
            notes.append(f"depends on stale source(s) {', '.join(stale)}: answers may be out of date")
        return "answer", "; ".join(notes) or "complete within the stated limits"
    if truncated:
        return "unknown", "nothing found before a ceiling was hit: the answer is unknown, not none"
    if stale:
        return "unknown", f"nothing found, but source(s) {', '.join(stale)} are stale: unknown, not none"
    return "none", "the anchor resolved, nothing was truncated and the sources are fresh: there is none"


def limits_dict(limits: Limits) -> dict[str, int]:
    return {name: getattr(limits, name) for name in limits.__dataclass_fields__}
