"""`edgeledger mcp`: the MCP tool server over standard streams, for one tenant."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from schemas.slo import slo_or_default
from streams.cli.options import OntologyFile, StateDir, Tenant, ontology_from


def mcp(
    state: StateDir,
    tenant: Tenant,
    slo: Annotated[Path | None, typer.Option("--slo", help="Source SLOs for coverage (default: bundled).")] = None,
    ontology_file: OntologyFile = None,
) -> None:
    """MCP tool server (stdio) for one tenant: the traversals, history, freshness and record_trace. Reads the
    ledger beside any writer; recorded traces go to <state>.recorded-traces.jsonl for `edgeledger load`."""
    from streams.agents.transports import run_stdio

    # Standard output is the protocol's: logs go to standard error only.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    run_stdio(state, tenant, ontology_from(ontology_file), slo_or_default(slo))
