"""Replaying recorded answers (traces) that a later change of belief touched: re-run, diff, rank.

**What an answer read.** A trace's read set is the (tenant, node, relationship, direction) adjacencies
its query read, re-derived by re-running the query as of its ``valid_at`` and ``known_at`` (a past
answer is reproducible, so the re-run reads exactly what the answer read). It is the rule the
traversal cache invalidates by (``processors.cache``): a version appended or closed on one of those
adjacencies can change the answer, including answers it would *add* to.

**Affected.** A trace is affected by a version when the version lies on its read set, is valid at the
trace's ``valid_at``, and was appended or closed after the trace's ``known_at`` and no later than the
replay's knowledge. A version the trace *used* (its recorded ``edge_ids``) that was closed after its
``known_at`` affects it too, so a trace whose query cannot be re-run is still caught by what it used.

**Replay.** The query is re-run at the trace's own ``valid_at`` twice: as of its ``known_at`` (the
answer it gave) and as of the replay's ``known_at`` (the answer now). The verdict compares them:
``same``, ``changed``, ``now_unknown`` (an answer or ``none`` became unknown) or ``now_known``.

**Identity.** A merge or split appends no version; it touches a trace when it names an entity whose
adjacency the answer read or which the answer named on a path (``identity_map.IDENTITY_READ``), and
it is listed among the changes responsible with cause ``merge`` or ``split``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Literal

from processors.cache_keys import ReadKey, touched_read_keys
from processors.model import Correction, EdgeVersion, Merge, Trace
from processors.queries import QueryEngine
from processors.replay import ACTION_RANK, CannotRederive, trace_request
from processors.traversal import PlanRefused
from schemas.results import QueryResult
from schemas.times import format_micros

Verdict = Literal["same", "changed", "now_unknown", "now_known"]

KNOWN_DISPOSITIONS = frozenset({"answer", "none"})
"""Dispositions that say what the answer is; ``unknown`` and ``ambiguous`` do not."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What a result says, reduced to what a replay compares: its disposition, entities and paths.
    A path is its nodes: the same hops through a re-versioned edge (a remainder after a correction)
    are the same answer, not a change."""

    disposition: str
    results: tuple[str, ...]
    paths: tuple[tuple[str, ...], ...]

    @property
    def known(self) -> bool:
        return self.disposition in KNOWN_DISPOSITIONS

    def as_json(self) -> dict[str, object]:
        return {"disposition": self.disposition, "results": list(self.results),
                "paths": [list(nodes) for nodes in self.paths]}


def answer_of(result: QueryResult) -> Answer:
    return Answer(result.disposition, tuple(sorted({r.entity for r in result.results})),
                  tuple(sorted({tuple(p.nodes) for p in result.paths})))


def read_set_of(engine: QueryEngine, trace: Trace) -> frozenset[ReadKey]:
    """The adjacencies the trace's answer read, by re-running it as of its two clocks. Raises
    ``CannotRederive`` when the query cannot be re-run."""
    return run_trace(engine, trace, trace.known_at)[1]


def run_trace(engine: QueryEngine, trace: Trace, known_at: int) -> tuple[Answer, frozenset[ReadKey]]:
    """The trace's query at its ``valid_at`` as of ``known_at``, and what it read."""
    request = replace(trace_request(trace, engine.ontology), known_at=known_at)
    try:
        result, read_set = engine.run_with_read_set(request)
    except (PlanRefused, ValueError, TypeError) as error:
        raise CannotRederive(f"the recorded query cannot be re-run: {error}") from None
    return answer_of(result), frozenset((trace.tenant, node, rel, d) for node, rel, d in read_set)


def changed_after(version: EdgeVersion, after: int, until: int) -> bool:
    """Whether the version was appended or closed in the transaction-time window ``(after, until]``."""
    if after < version.tx_from <= until:
        return True
    return version.tx_to is not None and after < version.tx_to <= until


def affects(version: EdgeVersion, trace: Trace, until: int) -> bool:
    """The affected rule for a version on the trace's read set (or among the edges it used)."""
    return version.valid_at(trace.valid_at) and changed_after(version, trace.known_at, until)


def touched_traces(changed: Iterable[EdgeVersion], traces_reading: Callable[[ReadKey], Iterable[str]],
                   traces_using: Callable[[str, str], Iterable[str]], trace_of: Callable[[str, str], Trace | None],
                   until: int) -> dict[tuple[str, str], tuple[Trace, list[EdgeVersion]]]:
    """(tenant, trace id) -> the trace and the changed versions that affect it. Candidates come from
    the adjacency index (``traces_reading``) and the used-edge index (``traces_using``), never from a
    scan of all traces; each is then judged by ``affects``."""
    found: dict[tuple[str, str], tuple[Trace, list[EdgeVersion]]] = {}
    for version in changed:
        candidates = set(traces_using(version.tenant, version.edge_id))
        for read_key in touched_read_keys(version):
            candidates.update(traces_reading(read_key))
        for trace_id in sorted(candidates):
            key = (version.tenant, trace_id)
            hit = found.get(key)
            trace = hit[0] if hit is not None else trace_of(version.tenant, trace_id)
            if trace is None or trace.tx_at > until or not affects(version, trace, until):
                continue
            if hit is None:
                found[key] = (trace, [version])
            elif version.edge_id not in {v.edge_id for v in hit[1]}:
                hit[1].append(version)
    return found


def verdict_of(before: Answer, after: Answer) -> Verdict:
    if before.known and not after.known:
        return "now_unknown"
    if after.known and not before.known:
        return "now_known"
    return "same" if before == after else "changed"


@dataclass(frozen=True, slots=True)
class Replay:
    """One affected trace re-run with newer knowledge, and what changed its answer."""

    trace: Trace
    known_at: int
    """The knowledge the trace was replayed with."""
    verdict: Verdict
    before: Answer
    after: Answer
    versions: tuple[EdgeVersion, ...]
    corrections: tuple[Correction, ...]
    error: str | None = None
    """Why the query could not be re-run (then ``before``/``after`` are unknown and the verdict ``same``)."""
    identity_edits: tuple[tuple[int, str, Merge], ...] = ()
    """(tx, merge or split event id, merge) of the identity edits at an entity the answer read or named."""

    @property
    def rank(self) -> tuple[int, int, int, str]:
        """Action-bearing first, then answers that changed, then the oldest ``known_at``, then trace id."""
        return (ACTION_RANK.get(self.trace.action, 1), 1 if self.verdict == "same" else 0,
                self.trace.known_at, self.trace.trace_id)

    def as_json(self) -> dict[str, object]:
        before, after = set(self.before.results), set(self.after.results)
        before_paths, after_paths = set(self.before.paths), set(self.after.paths)
        return {
            "trace_id": self.trace.trace_id, "tenant": self.trace.tenant, "action": self.trace.action,
            "query": self.trace.query, "valid_at": format_micros(self.trace.valid_at),
            "known_at": format_micros(self.trace.known_at), "replayed_known_at": format_micros(self.known_at),
            "verdict": self.verdict, "before": self.before.as_json(), "after": self.after.as_json(),
            "added": sorted(after - before), "removed": sorted(before - after),
            "added_paths": [list(p) for p in sorted(after_paths - before_paths)],
            "removed_paths": [list(p) for p in sorted(before_paths - after_paths)],
            "changes": self.changes_json(),
            "versions": [{"edge_id": v.edge_id, "src": v.src, "rel": v.rel, "dst": v.dst,
                          "change": "appended" if v.tx_from > self.trace.known_at else "closed"}
                         for v in self.versions],
            "error": self.error,
        }

    def changes_json(self) -> list[dict[str, object]]:
        """The correction events that touched the read set and, for versions no correction lists (a
        pure addition makes none), one entry per event that appended or closed them."""
        changes: list[dict[str, object]] = [
            {"event_id": c.event_id, "tx_at": format_micros(c.tx_at), "cause": c.cause,
             "old_edge_ids": list(c.old_edge_ids), "new_edge_ids": list(c.new_edge_ids)}
            for c in self.corrections]
        listed = {e for c in self.corrections for e in (*c.old_edge_ids, *c.new_edge_ids)}
        by_event: dict[str, dict[str, object]] = {}
        for version in self.versions:
            if version.edge_id in listed:
                continue
            appended = version.tx_from > self.trace.known_at
            entry = by_event.setdefault(version.event_id, {
                "event_id": version.event_id, "tx_at": format_micros(version.tx_from if appended else version.tx_to),
                "cause": "addition" if appended else "closing", "old_edge_ids": [], "new_edge_ids": []})
            ids = entry["new_edge_ids" if appended else "old_edge_ids"]
            assert isinstance(ids, list)
            ids.append(version.edge_id)
        for tx, edit_id, merge in self.identity_edits:
            by_event[edit_id] = {"event_id": edit_id, "tx_at": format_micros(tx),
                                 "cause": "merge" if edit_id == merge.merge_id else "split",
                                 "old_edge_ids": [], "new_edge_ids": [], "entities": [merge.keep, merge.absorb]}
        return changes + sorted(by_event.values(), key=lambda e: (str(e["tx_at"]), str(e["event_id"])))


_UNKNOWN = Answer("unknown", (), ())


def identity_touched(edits: Iterable[tuple[int, str, Merge]],
                     traces_reading_node: Callable[[str, str], Iterable[str]],
                     trace_of: Callable[[str, str], Trace | None],
                     until: int) -> dict[tuple[str, str], tuple[Trace, list[tuple[int, str, Merge]]]]:
    """(tenant, trace id) -> the trace and the merges and splits that touch it: an edit at either entity
    of an answer that read an adjacency of it or named it, made after its ``known_at``."""
    found: dict[tuple[str, str], tuple[Trace, list[tuple[int, str, Merge]]]] = {}
    for edit in edits:
        tx, _, merge = edit
        candidates = {*traces_reading_node(merge.tenant, merge.keep), *traces_reading_node(merge.tenant, merge.absorb)}
        for trace_id in sorted(candidates):
            key = (merge.tenant, trace_id)
            hit = found.get(key)
            trace = hit[0] if hit is not None else trace_of(merge.tenant, trace_id)
            if trace is None or trace.tx_at > until or not trace.known_at < tx <= until:
                continue
            if hit is None:
                found[key] = (trace, [edit])
            else:
                hit[1].append(edit)
    return found


def replay_trace(engine: QueryEngine, trace: Trace, versions: Iterable[EdgeVersion],
                 corrections: Iterable[Correction], known_at: int,
                 edits: Iterable[tuple[int, str, Merge]] = ()) -> Replay:
    """Re-run ``trace`` as of its ``known_at`` and as of ``known_at`` (the replay's knowledge), and
    name the corrections that appended or closed any of ``versions`` and the identity ``edits``
    (those that affected it)."""
    edited = tuple(edits)
    touched = tuple(sorted(versions, key=lambda v: v.edge_id))
    ids = {v.edge_id for v in touched}
    responsible = tuple(c for c in corrections
                        if trace.known_at < c.tx_at <= known_at and ids & {*c.old_edge_ids, *c.new_edge_ids})
    try:
        before = run_trace(engine, trace, trace.known_at)[0]
        after = run_trace(engine, trace, known_at)[0]
    except CannotRederive as why:
        return Replay(trace, known_at, "same", _UNKNOWN, _UNKNOWN, touched, responsible, str(why), edited)
    return Replay(trace, known_at, verdict_of(before, after), before, after, touched, responsible, None, edited)


def ranked(replays: Iterable[Replay]) -> list[Replay]:
    return sorted(replays, key=lambda r: r.rank)
