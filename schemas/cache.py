"""Records the traversal cache publishes (the ``cache-invalidations`` topic)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class CacheInvalidation(BaseModel):
    """Cached answers one tenant's new or closed edge versions made obsolete.

    ``caused_by`` maps each invalidated entry key to the edge ids whose adjacency it had read;
    ``causing_edge_ids`` is their union, so a consumer can go from a correction to the answers it
    touched and back.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["cache_invalidation"] = "cache_invalidation"
    tenant: str
    causing_edge_ids: list[str]
    invalidated_keys: list[str]
    caused_by: dict[str, list[str]] = Field(default_factory=dict)
    causing_identity_edits: list[str] = Field(default_factory=list)
    """The merge and split event ids that invalidated entries (``caused_by`` then names them too)."""
