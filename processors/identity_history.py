"""The identity edits of one entity as one listing in transaction-time order: merges, splits, aliases,
review decisions (and any other kind a source adds, see ``state.identity_history.EDIT_SOURCES``)."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field

from processors.model import AliasEntry, Decision, Merge
from schemas.times import format_micros


@dataclass(frozen=True, slots=True)
class IdentityEdit:
    """One audited change to what an entity is. ``other``: the entity on the other side (a merge's or
    split's), or the alias; ``actor`` and ``reason`` as the edit stated them (None where not recorded)."""

    tx: int
    kind: str
    edit_id: str
    entity: str
    other: str | None
    actor: str | None
    reason: str | None
    details: dict[str, object] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        return {"tx_at": format_micros(self.tx), "kind": self.kind, "edit_id": self.edit_id, "entity": self.entity,
                "other": self.other, "actor": self.actor, "reason": self.reason, **self.details}


def merge_edits(merges: Iterable[Merge], entity: str) -> list[IdentityEdit]:
    """Each merge naming ``entity`` and, when split, its split, as the merge's row records them."""
    edits = []
    for merge in merges:
        if entity not in (merge.keep, merge.absorb):
            continue
        other = merge.absorb if entity == merge.keep else merge.keep
        role = {"keep": merge.keep, "absorb": merge.absorb}
        edits.append(IdentityEdit(merge.tx_from, "merge", merge.merge_id, entity, other, merge.actor, merge.reason,
                                  role))
        if merge.tx_to is not None:
            edits.append(IdentityEdit(merge.tx_to, "split", merge.split_id or "", entity, other, merge.split_actor,
                                      merge.split_reason, {**role, "merge": merge.merge_id}))
    return edits


def alias_edits(aliases: Iterable[AliasEntry]) -> list[IdentityEdit]:
    """The aliases recorded for an entity: by a person's command (actor, reason), or from a source's
    mention (no actor)."""
    return [IdentityEdit(alias.tx_from, "alias", f"{alias.entity_id}={alias.normalised}", alias.entity_id,
                         alias.normalised, alias.actor, alias.reason if alias.actor is not None else None)
            for alias in aliases]


def decision_edits(decisions: Iterable[Decision], entity: str) -> list[IdentityEdit]:
    """Each review decision about ``entity``: it was chosen for a parked mention, created for one, or
    offered as a candidate and passed over (``other``: the entity chosen instead, if any)."""
    edits = []
    for decision in decisions:
        role = "chosen" if decision.entity == entity else "candidate"
        other = None if decision.entity == entity else decision.entity
        details: dict[str, object] = {"decision": decision.decision, "role": role, "review_id": decision.review_id}
        if decision.mention is not None:
            details["mention"] = decision.mention
        edits.append(IdentityEdit(decision.tx_at, "decision", decision.event_id, entity, other, decision.actor,
                                  decision.reason, details))
    return edits


def in_tx_order(sources: Iterable[Iterable[IdentityEdit]], known_at: int | None = None) -> list[IdentityEdit]:
    """Every source's edits, merged in transaction-time order; with ``known_at``, those made by then (a
    split made later is not listed, as an as-known query would not see it)."""
    ordered = heapq.merge(*(sorted(source, key=_order) for source in sources), key=_order)
    return [edit for edit in ordered if known_at is None or edit.tx <= known_at]


def _order(edit: IdentityEdit) -> tuple[int, str, str]:
    return (edit.tx, edit.kind, edit.edit_id)
