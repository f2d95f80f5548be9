"""The MCP tools: schemas from the same parameter models as the CLI and HTTP API, the HTTP API's answers
as structured content, bad calls as tool errors, the tenant the server's; over the SDK's in-process
client, standard streams (`edgeledger mcp`) and streamable HTTP (`/mcp` in serve)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest
from fastapi.testclient import TestClient
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from schemas.query_params import PARAMS, HistoryParams
from schemas.slo import default_slo
from schemas.times import parse_micros
from streams.agents.server import build_server
from streams.agents.tools import Toolbox, tool_name
from streams.api.http import create_app
from streams.api.parameters import INSTANT_PATTERN
from tests.support.api import BASE, CONNECTOR, ONE_QUESTION_EACH
from tests.support.mcp import ListSink, served, toolbox

NOW = parse_micros("2026-06-01T12:00:00Z")
CLOCKS = {"valid_at": "2026-04-22", "known_at": "2026-05-04"}
QUESTIONS = ONE_QUESTION_EACH


@pytest.fixture
def tools(demo_ledger: Path) -> Iterator[Toolbox]:
    with toolbox(demo_ledger, "acme", NOW) as box:
        yield box


@pytest.fixture
def http(demo_ledger: Path, tmp_path: Path) -> Iterator[TestClient]:
    """The API as serve runs it: with the bundled SLOs."""
    with TestClient(create_app(demo_ledger, cache_dir=tmp_path / "cache", refresh_interval_s=0, slo=default_slo(),
                               wall_clock=lambda: NOW, trace_sink=ListSink())) as client:
        yield client


def calls(server: Any, *requests: tuple[str, dict[str, Any]]) -> list[Any]:
    """Each (tool, arguments) called in order through the SDK's own client."""

    async def run() -> list[Any]:
        async with Client(server) as client:
            return [await client.call_tool(name, arguments) for name, arguments in requests]

    return anyio.run(run)


def listed(server: Any) -> list[Any]:
    async def run() -> list[Any]:
        async with Client(server) as client:
            return (await client.list_tools()).tools

    return anyio.run(run)


# -- the catalogue ----------------------------------------------------------------------------------------------
def test_every_tool_is_listed_with_its_schema_from_the_shared_parameter_models(tools: Toolbox) -> None:
    found = {tool.name: tool for tool in listed(build_server(tools))}
    assert set(found) == {*(tool_name(q) for q in PARAMS), "history", "freshness", "record_trace"}
    for query, model in PARAMS.items():
        schema = found[tool_name(query)].input_schema
        taken = {field.alias or key for key, field in model.model_fields.items()} - {"record", "action"}
        assert set(schema["properties"]) == taken, query
        assert "entity" in schema["required"] and schema["additionalProperties"] is False
        assert schema["properties"]["known_at"]["pattern"] == INSTANT_PATTERN
    assert set(found["history"].input_schema["properties"]) == set(HistoryParams.model_fields)
    assert "enum" in found["history"].input_schema["properties"]["rel"]
    for tool in found.values():
        assert "tenant" not in tool.input_schema["properties"], tool.name
        assert "Not for" in (tool.description or ""), tool.name


# -- answers ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("query", list(QUESTIONS))
def test_each_traversal_tool_answers_what_the_http_api_answers(tools: Toolbox, http: TestClient, query: str) -> None:
    arguments = {**QUESTIONS[query], **CLOCKS}
    [result] = calls(build_server(tools), (tool_name(query), arguments))
    expected = http.get(f"{BASE}/{query}", params=arguments).json()
    assert not result.is_error, result.content
    assert result.structured_content == expected
    text = result.content[0].text
    assert f"disposition: {expected['disposition']}" in text and expected["coverage"]["note"] in text
    assert all(f"edge {edge_id}" in text for edge_id in expected["edges"])


def test_history_and_freshness_answer_what_the_http_api_answers(tools: Toolbox, http: TestClient) -> None:
    history = {"entity": CONNECTOR, "rel": "owned_by", "known_at": "2026-05-04"}
    freshness = {"known_at": "2026-05-04", "since": "2026-03-01"}
    got = calls(build_server(tools), ("history", history), ("freshness", freshness))
    assert got[0].structured_content == http.get(f"{BASE}/history", params=history).json()
    assert got[1].structured_content == http.get(f"{BASE}/freshness", params=freshness).json()
    assert "cmdb" in got[1].content[0].text and "owned_by" in got[0].content[0].text


@pytest.mark.parametrize(("tool", "arguments", "says"), [
    ("owners_of", {"entity": CONNECTOR, "tenant": "globex"}, "tools take no tenant"),
    ("record_trace", {"tenant": "globex", "query": {}, "valid_at": "2026-04-22", "known_at": "2026-04-22"},
     "tools take no tenant"),
    ("owners_of", {"entity": CONNECTOR, "record": True}, "record: unknown parameter"),
    ("owners_of", {"entity": CONNECTOR, "valid_at": "last tuesday"}, "valid_at"),
    ("owners_of", {}, "entity"),
    ("dependents_of", {"entity": CONNECTOR, "depth": 0}, "depth"),
    ("traverse", {"entity": CONNECTOR, "edges": "depends_on:sideways"}, "direction one of out, in, both"),
    ("traverse", {"entity": CONNECTOR}, "edges"),
    ("changed_between", {"entity": CONNECTOR, "from": "2026-05-01", "to": "2026-04-01"}, "before"),
    ("freshness", {"since": "2026-05-04", "until": "2026-05-01"}, "until: must be after since"),
    ("history", {"entity": CONNECTOR, "rel": "likes"}, "likes"),
    ("record_trace", {"query": {"name": "owners-of"}, "valid_at": "soon", "known_at": "2026-04-22"}, "valid_at"),
    ("record_trace", {"valid_at": "2026-04-22", "known_at": "2026-04-22"}, "query"),
    ("who_knows", {}, "no tool 'who_knows'"),
])
def test_a_bad_call_is_a_tool_error_with_the_reason(tools: Toolbox, tool: str, arguments: dict, says: str) -> None:
    [result] = calls(build_server(tools), (tool, arguments))
    assert result.is_error and says in result.content[0].text, result.content
    assert calls(build_server(tools), ("owners_of", {"entity": CONNECTOR}))[0].is_error is False, "still serving"


def test_record_trace_records_what_the_http_route_records(demo_ledger: Path, tmp_path: Path) -> None:
    body = {"query": {"name": "owners-of", "entity": "settlement connector"}, "valid_at": "2026-04-22",
            "known_at": "2026-04-22", "edge_ids": ["e1"], "action": "approval_routing"}
    sink, posted = ListSink(), ListSink()
    with toolbox(demo_ledger, "acme", NOW, sink) as box:
        [result] = calls(build_server(box), ("record_trace", body))
    with TestClient(create_app(demo_ledger, cache_dir=tmp_path / "cache", wall_clock=lambda: NOW,
                               trace_sink=posted)) as client:
        response = client.post(f"{BASE}/traces", json=body)
    assert response.status_code == 202
    assert sink.events == posted.events and sink.events[0]["tenant"] == "acme"
    assert result.structured_content == {"trace_id": response.json()["trace_id"]}


# -- transports -----------------------------------------------------------------------------------------------------
def test_edgeledger_mcp_serves_the_tools_over_standard_streams(demo_ledger: Path) -> None:
    server = StdioServerParameters(command=sys.executable, args=[
        "-m", "streams.cli.main", "mcp", "--state", str(demo_ledger), "--tenant", "acme"])
    [owners, refused] = calls(server, ("owners_of", {"entity": "settlement connector", **CLOCKS}),
                              ("owners_of", {"entity": CONNECTOR, "tenant": "globex"}))
    assert [r["entity"] for r in owners.structured_content["results"]] == ["Team:hr:T-PLAT"]
    assert owners.structured_content["query"]["tenant"] == "acme"
    assert refused.is_error


def test_serve_answers_at_mcp_for_its_mcp_tenant_only(demo_ledger: Path, tmp_path: Path) -> None:
    app = create_app(demo_ledger, cache_dir=tmp_path / "cache", mcp_tenant="acme", trace_sink=ListSink())
    with served(app) as port:
        [owners] = calls(f"http://127.0.0.1:{port}/mcp", ("owners_of", {"entity": "settlement connector", **CLOCKS}))
    assert owners.structured_content["query"]["tenant"] == "acme"
    assert [r["entity"] for r in owners.structured_content["results"]] == ["Team:hr:T-PLAT"]
    with TestClient(create_app(demo_ledger, cache_dir=tmp_path / "plain")) as client:
        assert client.post("/mcp", content=orjson.dumps({})).status_code == 404, "no tenant configured, no /mcp"


def test_mcp_on_a_loopback_host_refuses_requests_addressed_elsewhere(demo_ledger: Path, tmp_path: Path) -> None:
    """DNS rebinding: a page on another site that resolves its name to 127.0.0.1 must not reach the tools."""
    app = create_app(demo_ledger, cache_dir=tmp_path / "cache", mcp_tenant="acme", trace_sink=ListSink(),
                     mcp_allowed_hosts=["127.0.0.1:*"])
    with served(app) as port:
        asked = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        elsewhere = httpx.post(f"http://127.0.0.1:{port}/mcp", json=asked, headers={**headers, "Host": "evil.test"})
        [owners] = calls(f"http://127.0.0.1:{port}/mcp", ("owners_of", {"entity": CONNECTOR, **CLOCKS}))
    assert elsewhere.status_code in (403, 421), elsewhere.text
    assert not owners.is_error
