"""A query's parameters, validated by ``schemas.query_params``, turned into the engine's request
(``processors.queries.QueryRequest``): the instants parsed, the clocks defaulted, relationships and
entity types checked against the ontology, and a ``changed-between`` window that is empty refused.
The CLI and the HTTP API refuse the same requests with the same reasons."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from processors.model import Direction
from processors.queries import QueryRequest
from processors.traversal import Limits
from schemas.ontology import Ontology
from schemas.query_params import (
    ApprovalParams,
    ChangedParams,
    DepthParams,
    HistoryParams,
    QueryParams,
    TraverseParams,
    TypedParams,
)
from schemas.times import parse_micros


def unknown_relationships(label: str, relationships: Iterable[str], ontology: Ontology,
                          one: bool = False) -> str | None:
    """Why ``relationships`` (those of an ``edges`` list, or with ``one`` the one a reader named) cannot
    be read with ``ontology``, as ``"{label}: unknown relationship(s) ...; one of: ..."``; None if all
    are known. The CLI and the HTTP API refuse a request with it before reading anything."""
    unknown = sorted(set(relationships) - set(ontology.relationships))
    if not unknown:
        return None
    named = f"relationship {unknown[0]!r}" if one else f"relationship(s) {', '.join(unknown)}"
    return f"{label}: unknown {named}; one of: {', '.join(ontology.relationships)}"


def empty_window(start: int, end: int | None, known_at: int, axis: str = "valid", label: Callable[[str], str] = str,
                 known_at_given: bool = True) -> str | None:
    """Why a ``changed-between`` window [start, end) is refused, or None: it must not be empty. With no
    ``end`` the window ends at ``known_at``; on the ``tx`` axis it ends there at the latest, since
    nothing recorded after ``known_at`` is read."""
    start_label, end_label = label("from"), label("to")
    known_at_label = label("known_at") if known_at_given else f"now (the default {label('known_at')})"
    if end is not None and end <= start:
        return f"{start_label} must be before {end_label}: the window is [{start_label}, {end_label})"
    if (end is None or axis == "tx") and known_at <= start:
        why = (f"with no {end_label}, the window is [{start_label}, {known_at_label})" if end is None else
               f"on the tx axis nothing recorded after {known_at_label} is read")
        return f"{start_label} must be before {known_at_label}: {why}"
    return None


def parse_edge_allowlist(text: str) -> tuple[tuple[str, Direction], ...]:
    """``depends_on:in,owned_by:out`` -> ((depends_on, in), (owned_by, out)); a bare rel means both ways."""
    allowed: list[tuple[str, Direction]] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        rel, _, direction = item.partition(":")
        if direction in ("", "both"):
            allowed += [(rel, "out"), (rel, "in")]
        elif direction in ("out", "in"):
            allowed.append((rel, direction))  # type: ignore[arg-type]
        else:
            raise ValueError(f"edge {item!r}: direction must be 'out', 'in' or 'both'")
    if not allowed:
        raise ValueError("--edges needs at least one relationship, e.g. depends_on:in,owned_by:out")
    return tuple(allowed)


class InvalidQuery(ValueError):
    """A query parameter that parsed but means nothing: a bad date, an unknown relationship or entity
    type, an empty window."""


class UnknownToOntology(InvalidQuery):
    """A relationship or entity type the ontology does not have (the reader may have the wrong one)."""


def instant_param(text: str | None, parameter: str, label: Callable[[str], str] = str) -> int | None:
    """An ISO-8601 parameter in microseconds (None when not given); ``InvalidQuery`` names it as ``label`` does."""
    if text is None:
        return None
    try:
        return parse_micros(text)
    except (ValueError, OverflowError) as error:
        raise InvalidQuery(f"{label(parameter)}: {text!r} is not an ISO-8601 date or datetime with a "
                           f"timezone ({error})") from None


def request_from(name: str, tenant: str, params: QueryParams, ontology: Ontology, now: int,
                 label: Callable[[str], str] = str) -> QueryRequest:
    """The engine's request for query ``name`` from its validated parameters (``schemas.query_params``);
    the clocks default to ``now``. Raises ``InvalidQuery``, naming each parameter as ``label`` does."""
    options: dict[str, Any] = {}
    if isinstance(params, TypedParams) and params.types:
        wanted = frozenset(t.strip() for t in params.types.split(",") if t.strip())
        unknown = sorted(wanted - set(ontology.entity_types))
        if unknown or not wanted:
            raise UnknownToOntology(f"{label('types')}: unknown entity type(s) {', '.join(unknown) or '(none given)'}; "
                                    f"one of: {', '.join(ontology.entity_types)}")
        options["node_types"] = wanted
    if isinstance(params, DepthParams | ApprovalParams):
        options["depth"] = params.depth
    if isinstance(params, TraverseParams):
        try:
            edges = parse_edge_allowlist(params.edges)
        except ValueError as error:
            raise InvalidQuery(f"{label('edges')}: {error}") from None
        refused = unknown_relationships(label("edges"), (rel for rel, _ in edges), ontology)
        if refused:
            raise UnknownToOntology(refused)
        options["edges"] = edges
    valid_at = instant_param(params.valid_at, "valid_at", label)
    given_known_at = instant_param(params.known_at, "known_at", label)
    known_at = now if given_known_at is None else given_known_at
    if isinstance(params, ChangedParams):
        start, end = instant_param(params.from_, "from", label), instant_param(params.to, "to", label)
        assert start is not None  # a required parameter
        refused = empty_window(start, end, known_at, params.axis, label, given_known_at is not None)
        if refused:
            raise InvalidQuery(refused)
        options.update(changed_from=start, changed_to=end, axis=params.axis)
    return QueryRequest(
        name=name,
        tenant=tenant,
        entity=params.entity,
        valid_at=now if valid_at is None else valid_at,
        known_at=known_at,
        limits=Limits(params.max_depth, params.max_expansions, params.max_paths, params.max_evidence_tokens,
                      params.max_degree),
        **options,
    )


class HistoryRequest(NamedTuple):
    tenant: str
    entity: str
    known_at: int
    valid_at: int | None
    """Only the versions valid then; None: every version."""
    rel: str | None


def history_request_from(tenant: str, params: HistoryParams, ontology: Ontology, now: int,
                         label: Callable[[str], str] = str) -> HistoryRequest:
    """What ``history`` reads, from its validated parameters: ``known_at`` defaults to ``now``, and a
    ``rel`` the ontology lacks is refused (``UnknownToOntology``)."""
    if params.rel is not None and (refused := unknown_relationships(label("rel"), [params.rel], ontology, one=True)):
        raise UnknownToOntology(refused)
    known_at = instant_param(params.known_at, "known_at", label)
    return HistoryRequest(tenant, params.entity, now if known_at is None else known_at,
                          instant_param(params.valid_at, "valid_at", label), params.rel)
