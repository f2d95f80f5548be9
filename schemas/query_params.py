"""The parameters of each query, as users give them: one definition for the CLI, the HTTP API (whose
OpenAPI document is generated from these models) and trace replay, so that the three accept and
refuse the same questions. ``processors.query_requests.request_from`` turns them into the engine's request.

Values arrive as text or numbers; instants stay text here (ISO-8601) and are parsed with the rest
of a request's meaning (an unknown relationship or entity type, an empty window), which needs the
ontology and the clock. Unknown parameters, and parameters of another query, are refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.json_schema import SkipJsonSchema

from schemas.bounds import ENTITY_TEXT, MOST_EXPANSIONS
from schemas.times import MAX_INSTANT_TEXT

MAX_DEPTH: Final = 6
MAX_EXPANSIONS: Final = 200
MAX_PATHS: Final = 25
MAX_EVIDENCE_TOKENS: Final = 2000
MAX_DEGREE: Final = 50
"""The default ceilings of a traversal (``processors.traversal.Limits`` takes them too)."""

LIMIT_FIELDS: Final = ("max_depth", "max_expansions", "max_paths", "max_evidence_tokens", "max_degree")

Instant = Annotated[
    str | SkipJsonSchema[None],
    Field(max_length=MAX_INSTANT_TEXT,
          description="ISO-8601 date or datetime with a timezone ('Z' or an offset); a date alone is midnight "
                      "UTC. Default: now.", examples=["2026-04-22", "2026-04-22T10:14:00Z"]),
]


class QueryParams(BaseModel):
    """Parameters every traversal takes. Unknown parameters are refused rather than ignored."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    entity: str = Field(min_length=1, max_length=ENTITY_TEXT,
                        description="Canonical id (Type:system-id, e.g. Component:cmdb:CI0042), an alias "
                                    "('settlement connector') or Type:name.")
    valid_at: Instant = None
    known_at: Instant = None
    max_depth: int = Field(MAX_DEPTH, ge=1, le=20, description="Hops from the anchor.")
    max_expansions: int = Field(MAX_EXPANSIONS, ge=1, le=MOST_EXPANSIONS,
                                description="Edge records read (before filtering), across the whole walk.")
    max_paths: int = Field(MAX_PATHS, ge=1, le=10_000, description="Paths returned.")
    max_evidence_tokens: int = Field(MAX_EVIDENCE_TOKENS, ge=1, le=1_000_000,
                                     description="Evidence text returned, ~4 characters a token; beyond it an "
                                                 "edge comes with evidence_omitted: true.")
    max_degree: int = Field(MAX_DEGREE, ge=1, le=10_000,
                            description="Neighbours taken per node (hubs are cut and reported).")
    record: bool = Field(False, description="Record the answer as a trace; the response carries its id in the "
                                            "X-Edgeledger-Trace-Id header.")
    action: Literal["approval_routing", "permission_change", "external_change", "none"] = Field(
        "none", description="What the recorded answer drives (with record=true).")


class TypedParams(QueryParams):
    types: str | SkipJsonSchema[None] = Field(
        None, max_length=512, description="Only enter nodes of these entity types (comma list, e.g. Team,Person).")


class DepthParams(TypedParams):
    depth: int = Field(1, ge=1, le=10, description="Hops of the first step (1: direct neighbours only).")


class ApprovalParams(QueryParams):
    depth: int = Field(1, ge=1, le=10, description="Hops of reverse depends_on before following ownership.")


class TraverseParams(TypedParams):
    edges: str = Field(min_length=1, max_length=1024,
                       description="Allowlist of relationship:direction, comma separated: "
                                   "depends_on:in,owned_by:out. Direction is out, in or both (the default).")


class ChangedParams(QueryParams):
    from_: str = Field(alias="from", min_length=1, max_length=64,
                       description="Window start (ISO-8601), inclusive.", examples=["2026-04-01"])
    to: str | SkipJsonSchema[None] = Field(None, max_length=64,
                                           description="Window end (ISO-8601), exclusive. Default: known_at.")
    axis: Literal["valid", "tx"] = Field("valid", description="valid: when the facts started or ended in the "
                                                              "world; tx: when the ledger appended or closed them.")


class HistoryParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    entity: str = Field(min_length=1, max_length=ENTITY_TEXT, description="Canonical id, alias or Type:name.")
    known_at: Instant = None
    valid_at: str | SkipJsonSchema[None] = Field(None, max_length=64,
                                                 description="Only versions valid at this time (ISO-8601).")
    rel: str | SkipJsonSchema[None] = Field(None, max_length=64, description="Only this relationship.")


PARAMS: Final[dict[str, type[QueryParams]]] = {
    "owners-of": TypedParams,
    "dependents-of": DepthParams,
    "approvals-required-for": ApprovalParams,
    "changed-between": ChangedParams,
    "neighbourhood": DepthParams,
    "traverse": TraverseParams,
}
"""Each query's parameters, by query name."""

QUERY_NAMES: Final = tuple(PARAMS)


def parameter_errors(error: ValidationError, query: str, label: Callable[[str], str] = str) -> str:
    """What is wrong with the parameters of ``query``, in one line, each named by ``label`` (the CLI
    names ``valid_at`` ``--valid-at``); a parameter the query does not take is said to be one."""
    parts = []
    for item in error.errors(include_url=False):
        field = ".".join(str(part) for part in item.get("loc", ()))
        if item.get("type") == "extra_forbidden":
            parts.append(f"{label(field)}: {query} takes no such parameter")
        else:
            message = str(item.get("msg", "invalid")).removeprefix("Value error, ")
            parts.append(f"{label(field)}: {message}" if field else message)
    return "; ".join(parts) or "invalid parameters"
