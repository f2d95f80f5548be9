"""Human-readable text for CLI output (``--json`` prints the contract's shapes instead)."""

from __future__ import annotations

from dataclasses import asdict

from processors.model import DeadLetter, ReviewItem, Trace
from schemas.results import EdgeVersionOut, HistoryResult, QueryResult
from schemas.times import format_micros


def query_text(result: QueryResult) -> str:
    lines = [
        f"{result.query.name} {result.anchor.input!r}  (tenant {result.query.tenant}, "
        f"valid at {result.valid_at}, known at {result.known_at})",
        f"anchor: {result.anchor.entity or '-'} [{result.anchor.resolution}]"
        + (f" candidates: {', '.join(result.anchor.candidates)}" if result.anchor.candidates else ""),
        f"disposition: {result.disposition} - {result.coverage.note}",
    ]
    for entity in result.results:
        lines.append(f"  => {entity.entity}" + (f"  ({entity.name})" if entity.name else ""))
    for path in result.paths:
        hops = [path.nodes[0]]
        for edge_id, before, node in zip(path.edges, path.nodes, path.nodes[1:], strict=False):
            edge = result.edges[edge_id]
            arrow = f"-{edge.rel}->" if edge.src == before else f"<-{edge.rel}-"
            hops.append(f"{arrow} {node}")
        lines.append("     path: " + " ".join(hops))
    for edge_id, edge in result.edges.items():
        evidence = f' "{edge.evidence}"' if edge.evidence else ""
        lines.append(
            f"     edge {edge_id}: valid [{edge.valid_from or 'start'}, {edge.valid_to or 'inf'}) "
            f"tx [{edge.tx_from}, {edge.tx_to or 'inf'}) from {edge.source.system}{evidence}"
        )
    for change in result.changes or []:
        lines.append(f"     {change.at}: {change.change} {change.edge_id}")
    counts = result.counts
    lines.append(
        f"counts: {counts.edges_read} edge records read, {counts.edges_unique} unique edges, "
        f"{counts.nodes_unique} nodes, {counts.paths} paths, {counts.results} results"
    )
    if result.truncated:
        frontier = ", ".join(f"{f.node}@{f.depth}" for f in result.frontier[:10])
        lines.append(f"TRUNCATED by {', '.join(result.limits_hit)}; frontier: {frontier}")
    return "\n".join(lines) + "\n"


def format_instant(micros: int) -> str:
    return format_micros(micros) or ""


def history_text(result: HistoryResult) -> str:
    lines = [f"history of {result.anchor.entity or result.entity!r} [{result.anchor.resolution}] "
             f"as known at {result.known_at}"]
    for v in result.versions:
        believed = "believed" if v.tx_to is None else "closed"
        lines.append(
            f"  {v.edge_id}  {v.src} -{v.rel}-> {v.dst}  valid [{v.valid_from or 'start'}, {v.valid_to or 'inf'})"
            f"  tx [{v.tx_from}, {v.tx_to or 'inf'})  {believed}  from {v.source.system}"
            + (f"  supersedes {', '.join(v.supersedes)}" if v.supersedes else "")
            + _stated_by(v)
        )
    if not result.versions:
        lines.append("  (no versions)")
    return "\n".join(lines) + "\n"


def _stated_by(version: EdgeVersionOut) -> str:
    """Who stated it (record and version), when more than the statement that made it or one was withdrawn."""
    stated = version.stated_by or []
    if len(stated) < 2 and not any(s.withdrawn_at or s.ended for s in stated):
        return ""
    return "  stated by " + ", ".join(
        f"{s.record or '(no record)'} " + (repr(s.version) if s.version is not None else "(no version)")
        + (f" (revoked {s.withdrawn_at})" if s.withdrawn_at else " (ended)" if s.ended else "") for s in stated)


def review_dict(item: ReviewItem) -> dict[str, object]:
    """The item's fields; for a parked mention also its ``candidates`` (entity ids, best first)."""
    data = asdict(item)
    data["tx_at"] = format_micros(item.tx_at)
    if "mention" in item.details:
        data["candidates"] = item.details.get("candidates", [])
    return data


def dead_letter_dict(letter: DeadLetter) -> dict[str, object]:
    data = asdict(letter)
    data["tx_at"] = format_micros(letter.tx_at)
    return data


def trace_dict(trace: Trace) -> dict[str, object]:
    return {"trace_id": trace.trace_id, "tenant": trace.tenant, "action": trace.action, "query": trace.query,
            "valid_at": format_micros(trace.valid_at), "known_at": format_micros(trace.known_at),
            "recorded_at": format_micros(trace.tx_at),
            "edge_ids": list(trace.edge_ids) if trace.edge_ids is not None else None}
