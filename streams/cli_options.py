"""Command-line options that several commands share, with the rules every one of them keeps."""

from __future__ import annotations

from typing import Annotated

import typer

NO_TENANT = "empty; there is no default tenant"


def refuse_empty_tenant(tenant: str | None) -> str | None:
    """``--tenant ''`` names no tenant. An event's tenant is a non-empty string, so an empty one
    could only match the dead letters of events that named none (``dead-letters --untenanted``)."""
    if tenant == "":
        raise typer.BadParameter(NO_TENANT, param_hint="'--tenant'")
    return tenant


Tenant = Annotated[str, typer.Option("--tenant", help="Tenant to read; required, there is no default.",
                                     callback=refuse_empty_tenant)]
