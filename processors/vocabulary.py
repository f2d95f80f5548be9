"""The ontology's rules as the ledger applies them to every assertion and retraction.

``schemas.ontology`` holds the vocabulary as data (a pydantic model read from a file); this is the
check over it, kept in plain objects. Speed: the ledger asks it once or twice per event, and each
read of a pydantic model's attribute goes through the model's ``__getattr__`` hook.
"""

from __future__ import annotations

from schemas.ontology import ANY, Ontology, Relationship


class _Rule:
    def __init__(self, relationship: Relationship) -> None:
        self.domain = relationship.domain
        self.range = relationship.range
        self.any_domain = ANY in relationship.domain
        self.any_range = ANY in relationship.range
        self.single_valued = relationship.cardinality == "one"
        self.requires_phrase = relationship.requires_phrase


class Vocabulary:
    def __init__(self, ontology: Ontology) -> None:
        self.entity_types = frozenset(ontology.entity_types)
        self._rules = {name: _Rule(relationship) for name, relationship in ontology.relationships.items()}

    def is_single_valued(self, rel: str) -> bool:
        """``cardinality: one``: a source entity has at most one value at a time per authority."""
        rule = self._rules.get(rel)
        return rule is not None and rule.single_valued

    def violation(self, src_type: str, rel: str, dst_type: str, phrase: str | None,
                  check_phrase: bool = True) -> str | None:
        """Why an edge breaks the vocabulary, or ``None`` when it fits. A retraction names an edge
        that was asserted with its phrase, so it passes ``check_phrase=False``."""
        if src_type not in self.entity_types:
            return f"entity type {src_type!r} is not in the ontology"
        if dst_type not in self.entity_types:
            return f"entity type {dst_type!r} is not in the ontology"
        rule = self._rules.get(rel)
        if rule is None:
            return (
                f"relationship {rel!r} is not in the vocabulary; send it as rel 'other' with the "
                "source's wording in 'phrase' to keep it"
            )
        if not rule.any_domain and src_type not in rule.domain:
            return f"{rel!r} cannot start at a {src_type} (domain: {', '.join(rule.domain)})"
        if not rule.any_range and dst_type not in rule.range:
            return f"{rel!r} cannot end at a {dst_type} (range: {', '.join(rule.range)})"
        if check_phrase and rule.requires_phrase and not phrase:
            return f"{rel!r} needs the source's own wording in 'phrase'"
        return None
