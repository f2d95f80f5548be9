"""The controlled vocabulary: entity types and relationship types with domain, range, cardinality.

The default lives in ``ontology.json`` beside this module; a deployment may pass its own file.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

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

    def is_single_valued(self, rel: str) -> bool:
        spec = self.relationships.get(rel)
        return spec is not None and spec.cardinality == "one"

    def violation(self, src_type: str, rel: str, dst_type: str, phrase: str | None,
                  check_phrase: bool = True) -> str | None:
        """Why an edge breaks the vocabulary, or ``None`` when it fits. A retraction names an edge
        that was asserted with its phrase, so it passes ``check_phrase=False``."""
        if src_type not in self.entity_types:
            return f"entity type {src_type!r} is not in the ontology"
        if dst_type not in self.entity_types:
            return f"entity type {dst_type!r} is not in the ontology"
        spec = self.relationships.get(rel)
        if spec is None:
            return (
                f"relationship {rel!r} is not in the vocabulary; send it as rel 'other' with the "
                "source's wording in 'phrase' to keep it"
            )
        if ANY not in spec.domain and src_type not in spec.domain:
            return f"{rel!r} cannot start at a {src_type} (domain: {', '.join(spec.domain)})"
        if ANY not in spec.range and dst_type not in spec.range:
            return f"{rel!r} cannot end at a {dst_type} (range: {', '.join(spec.range)})"
        if check_phrase and spec.requires_phrase and not phrase:
            return f"{rel!r} needs the source's own wording in 'phrase'"
        return None


def load_ontology(path: Path | str) -> Ontology:
    return Ontology.model_validate(json.loads(Path(path).read_text()))


@cache
def default_ontology() -> Ontology:
    return load_ontology(DEFAULT_ONTOLOGY_PATH)
