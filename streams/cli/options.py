"""Command-line options that several commands share, with the rules every one of them keeps."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from processors.query_requests import instant_param
from schemas.ontology import Ontology, default_ontology, load_ontology
from streams.processor import wall_clock_micros

NO_TENANT = "empty; there is no default tenant"


def refuse_empty_tenant(tenant: str | None) -> str | None:
    """``--tenant ''`` names no tenant. An event's tenant is a non-empty string, so an empty one
    could only match the dead letters of events that named none (``dead-letters --untenanted``)."""
    if tenant == "":
        raise typer.BadParameter(NO_TENANT, param_hint="'--tenant'")
    return tenant


Tenant = Annotated[str, typer.Option("--tenant", help="Tenant to read; required, there is no default.",
                                     callback=refuse_empty_tenant)]
StateDir = Annotated[Path, typer.Option("--state", help="Ledger state directory (RocksDB).")]
Entity = Annotated[str, typer.Option("--entity", help="Canonical id (Type:system-id), an alias, or Type:name.")]
ValidAt = Annotated[str | None, typer.Option("--valid-at", help="When in the world (ISO-8601). Default: now.")]
KnownAt = Annotated[
    str | None, typer.Option("--known-at", help="As the ledger believed at this time (ISO-8601). Default: now.")
]
RecordedBy = Annotated[str | None, typer.Option(
    "--known-at", help="List only what the ledger had recorded by this time (ISO-8601; transaction time). "
                       "Default: now.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the contract's JSON instead of text.")]
OntologyFile = Annotated[Path | None, typer.Option(
    "--ontology", help="Ontology file replacing the default: for reads, the one the state was loaded with "
                       "(`load --ontology`). Default: the bundled one.")]


ConsumerOptions = Annotated[list[str] | None, typer.Option(
    "--consumer-option", help="librdkafka consumer setting KEY=VALUE (repeatable); a disk-backed `edgeledger "
                              "broker` names the ones its clients need.")]
BrokerTimeout = Annotated[float, typer.Option(
    "--broker-timeout", min=1.0, help="Seconds the Kafka cluster may stay out of reach before the process exits "
                                      "non-zero, saying what it could not reach.")]


class CliError(Exception):
    """A user-facing error: printed as one line."""


def flag(parameter: str) -> str:
    """The option that sets a query parameter: ``valid_at`` is ``--valid-at``."""
    return "--" + parameter.replace("_", "-")


def instant(text: str | None, option: str) -> int:
    """The instant an option gives, now when it is not given."""
    given = instant_param(text, option)  # InvalidQuery is a ValueError: one line, like a CliError
    return wall_clock_micros() if given is None else given


def ontology_from(path: Path | None) -> Ontology:
    """The ontology file at ``path`` (the same loader as ``load --ontology``), or the bundled default."""
    return load_ontology(path) if path is not None else default_ontology()


def default_ontology_hint(path: Path | None) -> str:
    return " (the bundled ontology: give --ontology FILE if the state was loaded with another)" if path is None else ""


def emit(data: object) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


def emit_listing(items: list[dict[str, Any]], as_json: bool, line: Callable[[dict[str, Any]], str],
                 empty: str) -> None:
    """A listing command's output: the items as JSON (what the HTTP list reads return), or ``line`` of
    each as text, and ``empty`` when there is none."""
    if as_json:
        emit(items)
        return
    sys.stdout.write("".join(line(item) + "\n" for item in items) if items else empty + "\n")


def given_bootstrap(bootstrap: str, absent_means: str = "") -> str:
    """A ``--bootstrap`` that names servers, stripped; an empty one is refused in one line, not
    handed to librdkafka (``absent_means``: what leaving the option out does instead)."""
    if not bootstrap.strip():
        raise CliError(f"--bootstrap is empty: give host:port[,host:port...]{absent_means}")
    return bootstrap.strip()


def consumer_settings(options: list[str] | None) -> dict[str, str]:
    """``--consumer-option KEY=VALUE`` settings as a dict; one without ``=`` is refused in one line."""
    settings = {}
    for option in options or []:
        key, separator, value = option.partition("=")
        if not separator or not key.strip():
            raise CliError(f"--consumer-option {option!r}: expected KEY=VALUE")
        settings[key.strip()] = value.strip()
    return settings
