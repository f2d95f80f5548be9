"""Which recorded answers (traces) a change of belief affected, most consequential first.

A trace is affected when an edge version it used has since been closed: the belief it acted on
was corrected or revoked. Traces that drove an action (approval routing, permission change,
external change) come before those that did not; then the oldest decision first, since it has
stood longest on a corrected belief. Re-running them as of the same valid time is replay's job.

A trace may omit ``edge_ids`` (the contract allows it): an answer as of a past ``known_at`` is
reproducible, so its ids are re-derived here, at read time, by re-running the recorded query
through the same ``QueryEngine`` the CLI's ``query`` uses, as of the trace's ``valid_at`` and
``known_at``. They are then judged exactly as recorded ids are. A trace whose query cannot be
re-run is never dropped: it is listed as ``edge_ids unknown`` with the reason, and ranked by the
same rule as the affected ones, since nothing rules it out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import ValidationError

from processors.model import EdgeVersion, Trace
from processors.queries import QueryEngine, QueryRequest
from processors.query_requests import InvalidQuery, request_from
from processors.traversal import PlanRefused
from schemas.ontology import Ontology
from schemas.query_params import LIMIT_FIELDS, PARAMS, QUERY_NAMES, parameter_errors
from schemas.times import format_micros

ACTION_RANK = {"approval_routing": 0, "permission_change": 0, "external_change": 0, "none": 1}

EdgeIdsSource = Literal["recorded", "re-derived", "unknown"]

_PARAM_FIELDS = ("depth", "edges", "node_types", "from", "to", "axis")


class CannotRederive(Exception):
    """The trace's recorded query cannot be re-run; the message says why."""


@dataclass(frozen=True, slots=True)
class AffectedTrace:
    trace: Trace
    corrected: tuple[EdgeVersion, ...]
    edge_ids: tuple[str, ...] = ()
    edge_ids_source: EdgeIdsSource = "recorded"
    unknown_reason: str | None = None

    @property
    def action_bearing(self) -> bool:
        return self.trace.action != "none"

    @property
    def status(self) -> str:
        """``affected``, or ``edge_ids unknown: <why the query could not be re-run>``."""
        if self.unknown_reason is not None:
            return f"edge_ids unknown: {self.unknown_reason}"
        return "affected"


def affected_traces(traces: Iterable[Trace], version_of: Callable[[str], EdgeVersion | None],
                    engine: QueryEngine) -> list[AffectedTrace]:
    """Affected traces and traces whose edge ids are unknown, ranked together: action-bearing first,
    then the oldest ``known_at``, then trace id. ``engine`` re-derives the ids a trace omitted."""
    affected = []
    for trace in traces:
        source: EdgeIdsSource = "recorded"
        edge_ids = trace.edge_ids
        if edge_ids is None:
            try:
                edge_ids = rederive_edge_ids(engine, trace)
            except CannotRederive as why:
                affected.append(AffectedTrace(trace, (), (), "unknown", str(why)))
                continue
            source = "re-derived"
        corrected = tuple(
            version for version in (version_of(edge_id) for edge_id in edge_ids)
            if version is not None and version.tx_to is not None and version.tx_to > trace.known_at
        )
        if corrected:
            affected.append(AffectedTrace(trace, corrected, edge_ids, source))
    affected.sort(key=lambda a: (ACTION_RANK.get(a.trace.action, 1), a.trace.known_at, a.trace.trace_id))
    return affected


def rederive_edge_ids(engine: QueryEngine, trace: Trace) -> tuple[str, ...]:
    """Every edge id in the answer the trace's query gives as of its two clocks, in answer order.
    Raises ``CannotRederive`` when the query cannot be re-run or its anchor does not resolve."""
    if trace.known_at > trace.tx_at:
        raise CannotRederive(
            f"known_at {format_micros(trace.known_at)} is after the ledger recorded the trace "
            f"({format_micros(trace.tx_at)}): the answer as of it was not final then")
    request = trace_request(trace, engine.ontology)
    try:
        result = engine.run(request)
    except (PlanRefused, ValueError, TypeError) as error:
        raise CannotRederive(f"the recorded query cannot be re-run: {error}") from None
    anchor = result.anchor
    if anchor.resolution == "ambiguous":
        raise CannotRederive(f"anchor {request.entity!r} was ambiguous as of known_at "
                             f"({', '.join(anchor.candidates)})")
    if anchor.entity is None:
        raise CannotRederive(f"anchor {request.entity!r} did not resolve as of known_at")
    ids: dict[str, None] = {}
    for path in result.paths:
        ids.update(dict.fromkeys(path.edges))
    ids.update(dict.fromkeys(result.edges))
    return tuple(ids)


def trace_request(trace: Trace, ontology: Ontology) -> QueryRequest:
    """The ``QueryRequest`` a trace's ``query`` object records, as of the trace's clocks.

    The object is ``{"name", "entity"}`` plus, optionally, what a query result's ``query`` carries:
    ``tenant``, ``limits`` and ``params`` (``depth``, ``edges``, ``node_types``, ``from``, ``to``,
    ``axis``); a limit or parameter may also sit at the top level. They are the query's parameters
    as the CLI and the HTTP API take them (``schemas.query_params``), in JSON's own types; limits not
    recorded take the defaults. A field it does not know is refused rather than ignored: ignoring it
    could re-run a different question."""
    query = dict(trace.query)
    name = query.pop("name", None)
    if not isinstance(name, str) or not name:
        raise CannotRederive("the recorded query has no name")
    model = PARAMS.get(name)
    if model is None:
        raise CannotRederive(f"unknown query {name!r}; one of: {', '.join(QUERY_NAMES)}")
    entity = query.pop("entity", None)
    if not isinstance(entity, str) or not entity:
        raise CannotRederive("the recorded query names no entity")
    tenant = query.pop("tenant", trace.tenant)
    if tenant != trace.tenant:
        raise CannotRederive(f"the recorded query's tenant {tenant!r} is not the trace's {trace.tenant!r}")
    limits = _section(query, "limits", LIMIT_FIELDS)
    params = _section(query, "params", _PARAM_FIELDS)
    if query:
        raise CannotRederive(f"the recorded query has unknown field(s): {', '.join(sorted(query))}")
    given: dict[str, Any] = {"entity": entity, **limits}
    for key, value in params.items():
        if value is None:
            continue  # not given: the result's ``query`` records an open window's end as null
        if key in ("edges", "node_types") and isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = ",".join(value)
        given["types" if key == "node_types" else key] = value
    try:
        request = request_from(name, trace.tenant, model.model_validate(given, strict=True), ontology, trace.known_at)
    except ValidationError as error:
        raise CannotRederive(f"malformed query parameter: {parameter_errors(error, name)}") from None
    except InvalidQuery as error:
        raise CannotRederive(f"malformed query parameter: {error}") from None
    return replace(request, valid_at=trace.valid_at, known_at=trace.known_at)


def _section(query: dict[str, Any], key: str, fields: tuple[str, ...]) -> dict[str, Any]:
    """``query[key]`` (an object) merged with any of ``fields`` given at the top level; both are
    removed from ``query``. Unknown keys inside the object, or one value given twice differently,
    are refused."""
    nested = query.pop(key, None)
    if nested is None:
        nested = {}
    if not isinstance(nested, dict):
        raise CannotRederive(f"the recorded query's {key!r} is not an object")
    unknown = sorted(set(nested) - set(fields))
    if unknown:
        raise CannotRederive(f"the recorded query's {key!r} has unknown field(s): {', '.join(unknown)}")
    merged = dict(nested)
    for name in fields:
        if name in query:
            value = query.pop(name)
            if name in merged and merged[name] != value:
                raise CannotRederive(f"the recorded query gives {name!r} twice, differently")
            merged[name] = value
    return merged
