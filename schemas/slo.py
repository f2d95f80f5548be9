"""Freshness SLOs per source system, and the ``source-status`` event that reports a source going
stale or fresh again.

An SLO file maps each source system to two limits, in seconds:

- ``max_silence_seconds``: longer than this without an applied change or heartbeat from the source
  (measured on the ledger's transaction clock) and the source is stale;
- ``max_p99_lag_seconds``: the p99 of freshness lag (transaction time - the source's
  ``detected_at``) above this breaks the SLO (alerted on by Prometheus, see deploy/prometheus).

The packaged default is ``slo_default.json`` beside this module (so it ships with the wheel);
``deploy/slo.json`` is the same file for deployments to copy and edit, and a test keeps the two equal.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.config_files import load_model
from schemas.times import UtcDatetime

DEFAULT_SLO_RESOURCE = "slo_default.json"

PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
SourceName = Annotated[str, Field(min_length=1)]
SourceState = Literal["fresh", "stale"]


class SourceSlo(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    max_silence_seconds: PositiveSeconds
    max_p99_lag_seconds: PositiveSeconds


class SloConfig(BaseModel):
    """Sources without an entry here are never judged stale (there is nothing to judge them by)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    sources: dict[SourceName, SourceSlo]


def load_slo(path: Path | str) -> SloConfig:
    """The SLO file at ``path``; ``ConfigFileError`` (a ValueError) naming the file and each bad field."""
    return load_model(path, SloConfig, "SLO file")


@cache
def default_slo() -> SloConfig:
    text = resources.files("schemas").joinpath(DEFAULT_SLO_RESOURCE).read_text()
    return SloConfig.model_validate(json.loads(text))


def slo_or_default(path: Path | str | None) -> SloConfig:
    """The SLO file at ``path``; the bundled defaults when there is none."""
    return load_slo(path) if path is not None else default_slo()


class SourceStatus(BaseModel):
    """A source changed state: the value of one ``source-status`` record, keyed by tenant and source.

    ``previous`` is null the first time the ledger judges a source. ``last_heard_at`` is the
    transaction time of the newest change or heartbeat applied from it (null if never heard from).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["source_status"] = "source_status"
    tenant: SourceName
    source: SourceName
    status: SourceState
    previous: SourceState | None
    at: UtcDatetime
    last_heard_at: UtcDatetime | None
    silence_seconds: float | None
    max_silence_seconds: float
