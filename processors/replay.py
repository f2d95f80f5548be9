"""Which recorded answers (traces) a change of belief affected, most consequential first.

A trace is affected when an edge version it used has since been closed: the belief it acted on
was corrected or revoked. Traces that drove an action (approval routing, permission change,
external change) come before those that did not; then the oldest decision first, since it has
stood longest on a corrected belief. Re-running them as of the same valid time is replay's job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from processors.model import EdgeVersion, Trace

ACTION_RANK = {"approval_routing": 0, "permission_change": 0, "external_change": 0, "none": 1}


@dataclass(frozen=True, slots=True)
class AffectedTrace:
    trace: Trace
    corrected: tuple[EdgeVersion, ...]

    @property
    def action_bearing(self) -> bool:
        return self.trace.action != "none"


def affected_traces(traces: Iterable[Trace], version_of: Callable[[str], EdgeVersion | None]) -> list[AffectedTrace]:
    affected = []
    for trace in traces:
        corrected = tuple(
            version for version in (version_of(edge_id) for edge_id in trace.edge_ids or ())
            if version is not None and version.tx_to is not None and version.tx_to > trace.known_at
        )
        if corrected:
            affected.append(AffectedTrace(trace, corrected))
    affected.sort(key=lambda a: (ACTION_RANK.get(a.trace.action, 1), a.trace.known_at, a.trace.trace_id))
    return affected
