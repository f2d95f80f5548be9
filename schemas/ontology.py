"""The controlled vocabulary: entity types and relationship types with domain, range, cardinality.

The ledger checks edges against it with ``processors.vocabulary``.

The default lives in ``ontology.json`` beside this module; a deployment may pass its own file.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.config_files import load_model

ANY = "*"
DEFAULT_ONTOLOGY_PATH = Path(__file__).with_name("ontology.json")


class Relationship(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    domain: tuple[str, ...]
    range: tuple[str, ...]
    cardinality: Literal["one", "many"] = "many"
    """``one``: a source entity has at most one value at a time per authority (source system)."""
    requires_phrase: bool = False
    sources: tuple[str, ...] = ()
    """Source systems this relationship's edges come from; a stale one makes coverage unknown."""


class Ontology(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    entity_types: tuple[str, ...]
    relationships: dict[str, Relationship] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _types_are_declared(self) -> Ontology:
        known = set(self.entity_types) | {ANY}
        for name, rel in self.relationships.items():
            unknown = (set(rel.domain) | set(rel.range)) - known
            if unknown:
                raise ValueError(f"relationship {name!r} names undeclared entity types {sorted(unknown)}")
        return self


def load_ontology(path: Path | str) -> Ontology:
    """The ontology file at ``path``; ``ConfigFileError`` (a ValueError) naming the file and each bad field."""
    return load_model(path, Ontology, "ontology")


@cache
def default_ontology() -> Ontology:
    return load_ontology(DEFAULT_ONTOLOGY_PATH)
