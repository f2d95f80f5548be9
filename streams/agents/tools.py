"""The MCP tools: their names, descriptions and input schemas, and what a call does.

Each input schema is generated from the model the CLI and the HTTP API validate with
(``schemas.query_params.PARAMS``, ``HistoryParams``, the HTTP freshness parameters, the ``trace``
event), with the keywords the OpenAPI document adds from the ontology in force
(``streams.api.parameters.parameter_rules``). Descriptions are the HTTP API's: what each tool is
best for and what it is not for. No tool takes a tenant: the server answers for its own.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from processors.query_requests import InvalidQuery, instant_param, request_from
from processors.traversal import PlanRefused
from schemas.events import TraceEvent
from schemas.query_params import PARAMS, HistoryParams, QueryParams, parameter_errors
from streams.api.parameters import COMMON, DESCRIPTIONS, HISTORY_DESCRIPTION, ParameterRules, parameter_rules
from streams.api.reads import FreshnessParams
from streams.api.traces import trace_event
from streams.cli import render
from streams.cli.freshness import freshness_report, render_text

HTTP_ONLY = ("record", "action")
"""Query parameters of the HTTP API that a tool does not take: ``record_trace`` records."""
TRACE_SET_BY_SERVER = ("kind", "tenant", "event_id")

FRESHNESS_DESCRIPTION = (
    "Freshness lag (transaction time - the source's detected_at) p50/p95/p99/max per source for facts appended in "
    "[since, until) of transaction time, and each source's staleness against its SLO as of known_at (default now). "
    "Best for: judging whether an `unknown` answer came from a stale source, before trusting an empty answer.\n\n"
    "Not for: relationship questions (use the traversals), or one answer's coverage (its "
    "`coverage.stale_sources` says it).")
RECORD_DESCRIPTION = (
    "Record an answer you acted on (a trace): the query as you asked it (`query`: name, entity, parameters), both "
    "clocks, the edge ids the answer used and the action it drove. Later corrections that touch it are replayed "
    "and ranked (action-bearing first), so record every answer that routes an approval or changes a permission.\n\n"
    "Best for: after an answer drove an action. Not for: asking a question (use the traversals); a trace "
    "reaches the ledger once it applies it, so `traces` lists it only then.")


class ToolRefused(ValueError):
    """A call whose arguments are wrong: the reason goes back to the model as a tool error."""


@dataclass(frozen=True)
class Answer:
    """What a call returns: the contract's JSON (structured content) and its text rendering."""

    structured: dict[str, Any]
    text: str


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    model: type[BaseModel] | None
    """The parameter model the arguments are validated with (``record_trace`` validates the event)."""


def _schema(model: type[BaseModel], rules: ParameterRules, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    schema = copy.deepcopy(model.model_json_schema(by_alias=True))
    schema.pop("title", None)
    properties = schema.setdefault("properties", {})
    for name in drop:
        properties.pop(name, None)
    schema["required"] = [name for name in schema.get("required", []) if name not in drop]
    for name, keywords in rules.schemas.items():
        if name in properties:
            properties[name].update(keywords)
            properties[name]["description"] = (f"{properties[name].get('description', '')} Takes "
                                               f"{rules.expected[name]}.").lstrip()
    schema["additionalProperties"] = False
    return schema


def tool_name(query: str) -> str:
    return query.replace("-", "_")


def catalogue(rules: ParameterRules) -> dict[str, Tool]:
    """Every tool, by name: the six traversals, history, freshness and record_trace."""
    tools = {}
    for query, model in PARAMS.items():
        summary, description = DESCRIPTIONS[query]
        tools[tool_name(query)] = Tool(tool_name(query), f"{summary}. {description}{COMMON}",
                                       _schema(model, rules, HTTP_ONLY), model)
    tools["history"] = Tool("history", HISTORY_DESCRIPTION, _schema(HistoryParams, rules), HistoryParams)
    tools["freshness"] = Tool("freshness", FRESHNESS_DESCRIPTION, _schema(FreshnessParams, rules), FreshnessParams)
    trace = _schema(TraceEvent, rules, TRACE_SET_BY_SERVER)
    trace["properties"]["trace_id"]["description"] = "Your id for the trace; default: one derived from it."
    trace["required"] = [name for name in trace["required"] if name != "trace_id"]
    tools["record_trace"] = Tool("record_trace", RECORD_DESCRIPTION, trace, None)
    return tools


def _validated(tool: Tool, arguments: Mapping[str, Any], rules: ParameterRules) -> BaseModel:
    if "tenant" in arguments:
        raise ToolRefused("tenant: tools take no tenant; this server answers for its own tenant only")
    unknown = sorted(set(arguments) - set(tool.input_schema["properties"]))
    if unknown:
        raise ToolRefused(f"{', '.join(unknown)}: unknown parameter; {tool.name} takes "
                          f"{', '.join(tool.input_schema['properties'])}")
    refused = rules.refused((name, value) for name, value in arguments.items() if isinstance(value, str))
    if refused:
        raise ToolRefused("; ".join(f"{e['parameter']}: {e['message']}" for e in refused))
    assert tool.model is not None
    try:
        return tool.model.model_validate(dict(arguments))
    except ValidationError as error:
        raise ToolRefused(parameter_errors(error, tool.name)) from None


@dataclass
class Toolbox:
    """The tools over one ledger service (``streams.api.http.LedgerService``) for one tenant."""

    service: Any
    tenant: str
    trace_sink: Any
    slo: Any
    wall_clock: Callable[[], int]

    def __post_init__(self) -> None:
        self.rules = parameter_rules(self.service.ontology)
        self.tools = catalogue(self.rules)

    def call(self, name: str, arguments: Mapping[str, Any] | None) -> Answer:
        """The tool's answer; ``ToolRefused`` with the reason for a bad call."""
        tool = self.tools.get(name)
        if tool is None:
            raise ToolRefused(f"no tool {name!r}; one of: {', '.join(self.tools)}")
        arguments = arguments or {}
        try:
            if name == "record_trace":
                return self._record(arguments)
            params = _validated(tool, arguments, self.rules)
            if isinstance(params, QueryParams):
                request = request_from(name.replace("_", "-"), self.tenant, params, self.service.ontology,
                                       self.wall_clock())
                result, _ = self.service.query(request)
                return Answer(result.model_dump(mode="json"), render.query_text(result))
            if isinstance(params, HistoryParams):
                history = self.service.history(self.tenant, params)
                return Answer(history.model_dump(mode="json"), render.history_text(history))
            assert isinstance(params, FreshnessParams)
            return self._freshness(params)
        except (InvalidQuery, PlanRefused) as error:
            raise ToolRefused(str(error)) from None

    def _freshness(self, params: FreshnessParams) -> Answer:
        start, end = instant_param(params.since, "since"), instant_param(params.until, "until")
        known = instant_param(params.known_at, "known_at")
        moment = self.wall_clock() if known is None else known
        if start is not None and end is not None and end <= start:
            raise ToolRefused("until: must be after since")
        with self.service.lock:
            self.service.follower.refresh()
            report = freshness_report(self.service.follower.store, self.tenant, start,
                                      moment if end is None else end, self.slo, moment)
        return Answer(report.model_dump(mode="json"), render_text(report))

    def _record(self, arguments: Mapping[str, Any]) -> Answer:
        """As ``POST /v1/tenants/{tenant}/traces``: the event to the server's sink, its id back at once."""
        if "tenant" in arguments:
            raise ToolRefused("tenant: tools take no tenant; this server answers for its own tenant only")
        unknown = sorted(set(arguments) - set(self.tools["record_trace"].input_schema["properties"]))
        if unknown:
            raise ToolRefused(f"{', '.join(unknown)}: unknown parameter")
        try:
            event = trace_event(self.tenant, dict(arguments), self.wall_clock())
        except ValueError as error:
            raise ToolRefused(str(error)) from None
        self.trace_sink.record(event)
        return Answer({"trace_id": event["trace_id"]},
                      f"recorded trace {event['trace_id']} ({event.get('action', 'none')}); it is replayed when "
                      "a later change touches what it read\n")
