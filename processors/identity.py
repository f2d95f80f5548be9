"""Entity identity: identifiers first, then the alias table, then blocking and fuzzy matching.

A mention with a system-of-record id is ``Type:id``; its name and aliases become aliases of that
id. A mention with only a name resolves through the alias table (an exact normalised name) to
exactly one entity of its type; several such entities, and we abstain. With no exact hit, the name
is matched against the aliases next to it in the alias table (``processors.matching``): a clear
match resolves to that entity (and its name becomes an alias of it), a name like none becomes a new
entity keyed by its normalised name (``Type:~name``), a *placeholder*, and anything in between
abstains: the event waits in the review queue. A review decision resolves a parked mention through
``decided``. Names of entities merged into one (``processors.identity_map``) name that one, and a new
system-of-record entity absorbs, by a merge, each placeholder the matcher says it is (``_absorbs``).
"""

from __future__ import annotations

import re
from functools import lru_cache
from sys import intern
from typing import Literal, NamedTuple

from processors.identity_map import (
    MATCHER,
    IdentityMap,
    MatchPredicate,
    canonical_ids,
    is_placeholder,
    placeholders_to_absorb,
)
from processors.matching import MATCH_AT, Candidate, Match, Scored, best_match, similarities
from processors.model import AliasEntry, Entity, Merge, fields_of
from processors.pending import PendingLedger
from processors.ports import LedgerReader
from processors.versioning import derive_id
from schemas.events import EntityMention

_NOT_WORD = re.compile(r"[^0-9a-z]+")
ResolutionKind = Literal["identifier", "alias", "match", "new", "ambiguous"]
Decided = dict[tuple[str, str], str]
"""(entity type, normalised name) -> the entity a review decision resolved that mention to."""


@lru_cache(maxsize=1 << 16)  # Speed: the same names recur in every feed; the result depends on the name only.
def normalise_name(name: str) -> str:
    """Case-fold, punctuation to spaces, collapse white space: 'Settlement-Connector ' -> 'settlement connector'."""
    return " ".join(_NOT_WORD.sub(" ", name.casefold()).split())


class Mention:
    """An entity as an event names it. Built once per mention from the event schema's
    ``EntityMention``: resolution reads its fields several times, and each read of a pydantic
    model's attribute goes through the model's ``__getattr__`` hook (about 0.1 µs)."""

    def __init__(self, type: str, id: str | None, name: str | None, aliases: tuple[str, ...] = ()) -> None:
        self.type = type
        self.id = id
        self.name = name
        self.aliases = aliases

    @staticmethod
    def of(mention: EntityMention) -> Mention:
        stated = fields_of(mention)
        return Mention(stated["type"], stated["id"], stated["name"], stated["aliases"])

    def as_json(self) -> dict[str, object]:
        """As the event stated it (the fields of ``EntityMention``, in its order), for a review item."""
        return {"type": self.type, "id": self.id, "name": self.name, "aliases": list(self.aliases)}


class Resolution:
    """What a mention resolved to (a plain class: one is built per mention, see ``versioning.Fact``)."""

    def __init__(self, kind: ResolutionKind, entity_id: str | None, candidates: tuple[str, ...] = (),
                 scored: tuple[Scored, ...] = ()) -> None:
        self.kind = kind
        self.entity_id = entity_id
        self.candidates = candidates
        self.scored = scored
        """The fuzzy matcher's best candidates with their scores (a ``match``, or an abstention by it)."""


class Beside(NamedTuple):
    """The fact a mention is one end of: its relationship, the entity at the other end (None while
    that end is unresolved, or a name itself), and which end the mention is."""

    rel: str
    other: str | None
    mention_is_src: bool


class MentionResolver:
    """Resolves the mentions of one event; registers new entities and aliases only on ``commit``."""

    # Speed: a plain class, not a dataclass (see ``Versioner``): one is built per event.
    def __init__(self, reader: LedgerReader, tenant: str, event_id: str = "",
                 decided: Decided | None = None, audit: tuple[str, str] | None = None) -> None:
        """``audit``: (actor, reason) of a person's command, kept with the aliases it records."""
        self.reader = reader
        self.tenant = tenant
        self.event_id = event_id
        self.decided = decided
        self.audit = audit
        self._planned_entities: dict[str, tuple[str, str | None]] = {}
        """entity id -> (type, latest name mentioned)"""
        self._planned_aliases: dict[tuple[str, str], None] = {}

    def resolve(self, mention: Mention, beside: Beside | None = None) -> Resolution:
        """The mention's entity. Its id is interned (see ``LedgerProcessor._apply_change``). ``beside``:
        the fact the mention comes with, evidence for a fuzzy match (``shares``)."""
        if mention.id is not None:
            entity_id = intern(f"{mention.type}:{mention.id}")
            self._plan(entity_id, mention)
            return Resolution("identifier", entity_id)
        assert mention.name is not None
        normalised = normalise_name(mention.name)
        if self.decided is not None:
            chosen = self.decided.get((mention.type, normalised))
            if chosen is not None:
                self._plan(chosen, mention)
                return Resolution("alias", chosen)
        prefix = f"{mention.type}:"
        matches = [e for e in self.reader.alias_targets(self.tenant, normalised) if e.startswith(prefix)]
        matches += [
            e for (e, alias) in self._planned_aliases if alias == normalised and e.startswith(prefix)
            and e not in matches
        ]
        if matches:
            identity = self._identity_now()
            if identity is not None:
                matches = canonical_ids(identity, matches)  # two names of one merged entity name it once
        if len(matches) > 1:
            return Resolution("ambiguous", None, tuple(sorted(matches)))
        if matches:
            entity_id = intern(matches[0])
            self._plan(entity_id, mention)
            return Resolution("alias", entity_id)
        # No exact hit: only now is the name compared with others (the fast paths above cost nothing more).
        match = self.match(mention.type, normalised, beside)
        if match.kind == "match":
            assert match.entity_id is not None
            entity_id = intern(match.entity_id)
            self._plan(entity_id, mention)
            return Resolution("match", entity_id, scored=match.candidates)
        if match.kind == "abstain":
            return Resolution("ambiguous", None, tuple(s.entity_id for s in match.candidates), match.candidates)
        entity_id = intern(f"{mention.type}:~{normalised}")
        self._plan(entity_id, mention)
        return Resolution("new", entity_id, scored=match.candidates)

    def candidates(self, entity_type: str, normalised: str) -> list[Candidate]:
        """The aliases next to ``normalised`` in the ledger, and every alias of the type this event
        plans (an event names a handful of entities)."""
        found = self.reader.neighbours(self.tenant, entity_type, normalised)
        if self._planned_aliases:
            prefix = f"{entity_type}:"
            found += [Candidate(e, entity_type, alias) for (e, alias) in self._planned_aliases
                      if e.startswith(prefix) and alias]
        return found

    def match(self, entity_type: str, normalised: str, beside: Beside | None = None) -> Match:
        """The fuzzy matcher's decision on a name no alias names exactly (read only). An abstention is
        looked at again with the candidates that already have the fact the mention comes with."""
        candidates = self.candidates(entity_type, normalised)
        match = best_match(entity_type, normalised, candidates)
        if match.kind != "abstain" or beside is None or beside.other is None:
            return match
        shared = frozenset(s.entity_id for s in match.candidates if self.shares(s.entity_id, beside))
        return best_match(entity_type, normalised, candidates, shared) if shared else match

    def shares(self, candidate: str, beside: Beside) -> bool:
        """Whether ``candidate`` already has the fact ``beside`` states of the mention."""
        assert beside.other is not None
        if beside.mention_is_src:
            return bool(self.reader.believed_edge(self.tenant, candidate, beside.rel, beside.other))
        return bool(self.reader.believed_edge(self.tenant, beside.other, beside.rel, candidate))

    def _identity_now(self) -> IdentityMap | None:
        return self.reader.identity(self.tenant, None)

    def _plan(self, entity_id: str, mention: Mention) -> None:
        planned = self._planned_entities.get(entity_id)
        if planned is None:
            self._planned_entities[entity_id] = (mention.type, mention.name)
        elif mention.name:
            self._planned_entities[entity_id] = (planned[0], mention.name)
        for name in (mention.name, *mention.aliases):
            if name:
                self._planned_aliases[(entity_id, normalise_name(name))] = None

    def commit(self, ledger: PendingLedger, tx: int) -> None:
        """Record entities that are new or renamed and aliases not yet known, at transaction time ``tx``."""
        # An entity's recorded name got its alias in the commit that recorded it (aliases are never
        # removed), so a mention repeating that name needs no alias lookup. Speed: most mentions do.
        # Nor does an entity recorded only now: an alias is recorded with its entity or for a known
        # one (an alias command for an unknown entity is refused), so none can name it yet. Speed:
        # each such lookup of a name the store has never seen was a seek.
        recorded_names: set[tuple[str, str]] = set()
        new_entities: set[str] | None = None  # Speed: most commits record no entity; no set is built for them
        for entity_id, (entity_type, name) in self._planned_entities.items():
            known = ledger.entity(self.tenant, entity_id)
            if known is None:
                ledger.add_entity(Entity(self.tenant, entity_id, entity_type, name, tx))
                if new_entities is None:
                    new_entities = set()
                new_entities.add(entity_id)
                if is_placeholder(entity_id):
                    ledger.add_placeholder(self.tenant, entity_id)
            elif name and name != known.name:
                ledger.add_entity(Entity(self.tenant, entity_id, known.type, name, known.first_tx))
            elif name:
                recorded_names.add((entity_id, normalise_name(name)))
        for entity_id, normalised in self._planned_aliases:
            if not normalised or (entity_id, normalised) in recorded_names:
                continue
            if (new_entities is not None and entity_id in new_entities) \
                    or entity_id not in ledger.alias_targets(self.tenant, normalised):
                if self.audit is None:
                    ledger.add_alias(AliasEntry(self.tenant, normalised, entity_id, tx))
                else:
                    ledger.add_alias(AliasEntry(self.tenant, normalised, entity_id, tx, *self.audit))
        # Speed: only a commit that records an entity, in a tenant that has placeholders, looks for any.
        if new_entities is not None and ledger.has_placeholders(self.tenant):
            self._absorb_placeholders(ledger, new_entities, tx)

    def _absorb_placeholders(self, ledger: PendingLedger, new_entities: set[str], tx: int) -> None:
        """Each new system-of-record entity absorbs the placeholders the matcher says it is: an
        ordinary merge by ``matcher``, which a split undoes. The placeholders judged are those next
        to the entity's names in the placeholders' own orders."""

        now = ledger.identity(self.tenant, None)
        names_of: dict[str, list[str]] = {}
        for named, name in self._planned_aliases:
            if name and named in new_entities:
                names_of.setdefault(named, []).append(name)
        for entity_id in sorted(new_entities):
            if is_placeholder(entity_id):
                continue
            entity = ledger.entity(self.tenant, entity_id)
            assert entity is not None  # recorded above
            names = names_of.get(entity_id, [])
            # Each placeholder once, however many probes found it, and none already absorbed.
            offered = [near for near in dict.fromkeys(
                near for name in names for near in ledger.placeholders_near(self.tenant, entity.type, name))
                if now is None or now.absorbed_by(near[0]) is None]
            if not offered:
                continue
            # Speed: the names are scored in one call each; only a pair alike enough is judged with rivals.
            offered_names = list(dict.fromkeys(name for _, name in offered))
            alike = {(offered_name, name) for name in names
                     for offered_name, score in zip(offered_names, similarities(name, offered_names), strict=True)
                     if score >= MATCH_AT}
            if not alike:
                continue
            absorbs = _names_placeholder(ledger, entity, alike)
            for placeholder in placeholders_to_absorb(offered, entity, names, now, absorbs):
                merge = Merge(self.tenant, derive_id("m", self.tenant, self.event_id, placeholder), entity_id,
                              placeholder, MATCHER, f"the placeholder {placeholder!r} names {entity_id!r}", tx)
                ledger.add_merge(merge)
                now = ledger.identity(self.tenant, None)


def _names_placeholder(ledger: PendingLedger, entity: Entity, alike: set[tuple[str, str]]) -> MatchPredicate:
    """Whether a placeholder's name names the new ``entity`` (by one of its names): the matcher's
    answer for the placeholder's name, among the system-of-record entities next to it and the new
    one, is a clear match to the new one. A rival as alike keeps the placeholder apart. ``alike``:
    the (placeholder name, name) pairs that score ``MATCH_AT`` or more; no other pair can match."""
    others: dict[str, list[Candidate]] = {}

    def judge(placeholder_name: str, name: str) -> bool:
        if (placeholder_name, name) not in alike:
            return False
        rivals = others.get(placeholder_name)
        if rivals is None:
            near = ledger.neighbours(entity.tenant, entity.type, placeholder_name)
            rivals = others[placeholder_name] = [c for c in near if not is_placeholder(c.entity_id)]
        decided = best_match(entity.type, placeholder_name, [*rivals, Candidate(entity.entity_id, entity.type, name)])
        return decided.kind == "match" and decided.entity_id == entity.entity_id

    return judge
