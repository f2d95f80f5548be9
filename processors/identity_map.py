"""Entity identity through merges and splits, as the ledger knew it at a transaction time.

A merge says that ``absorb`` is the same entity as ``keep``; it holds from its transaction time until
a split closes it. The merges in effect at ``known_at`` form a forest: the canonical id of a node is
the root of its tree (an entity that absorbed others may itself be absorbed later) and its members
are the whole tree. Edges are never rewritten: a traversal expanding a node reads the adjacencies of
every member and reports the stored edge ids, so a split restores every answer exactly.

A tenant with no merge has no ``IdentityMap`` (``identity_as_of`` gives None): the traversal and the
apply path then skip identity altogether.

Placeholders (``Type:~name``, made from a name-only mention) are absorbed, by an ordinary merge whose
actor is ``matcher``, into the first system-of-record entity that a ``MatchPredicate`` says they name.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence

from processors.model import Entity, Merge

MATCHER = "matcher"
"""The actor of a placeholder absorption."""

MatchPredicate = Callable[[str, str], bool]
"""(a placeholder's normalised name, a normalised name or alias of a new system-of-record entity of the
same type) -> whether they name the same entity above the high threshold. Only a yes merges: a wrong
merge is worse than a missed one."""


class IdentityMap:
    """The merges in effect at one transaction time: canonical ids and members."""

    __slots__ = ("_by_absorbed", "_into", "_members")

    def __init__(self, merges: Iterable[Merge]) -> None:
        self._into: dict[str, str] = {}
        self._by_absorbed: dict[str, Merge] = {}
        for merge in merges:
            self._into[merge.absorb] = merge.keep
            self._by_absorbed[merge.absorb] = merge
        grouped: dict[str, list[str]] = {}
        for node in {*self._into, *self._into.values()}:
            grouped.setdefault(self.canonical(node), []).append(node)
        # The survivor first, the absorbed after it in id order: the order adjacencies are read in.
        self._members: dict[str, tuple[str, ...]] = {
            root: (root, *sorted(n for n in nodes if n != root)) for root, nodes in grouped.items()}

    def with_merge(self, merge: Merge) -> IdentityMap:
        """This map and one more merge, whose ``absorb`` nothing absorbs yet (``merge_refusal``): a
        copy, so a map others hold never changes, and only the joined tree's members are worked out."""
        joined = (*self.members(merge.keep), *self.members(merge.absorb))
        extended = IdentityMap(())
        extended._into = {**self._into, merge.absorb: merge.keep}
        extended._by_absorbed = {**self._by_absorbed, merge.absorb: merge}
        extended._members = dict(self._members)
        extended._members.pop(merge.absorb, None)
        root = extended.canonical(merge.keep)
        extended._members[root] = (root, *sorted({n for n in joined if n != root}))
        return extended

    def canonical(self, node: str) -> str:
        """The survivor ``node`` is, as of this map (``node`` itself when nothing absorbed it)."""
        into = self._into
        for _ in range(len(into) + 1):  # merges are validated acyclic; the bound only guards a damaged state
            parent = into.get(node)
            if parent is None:
                return node
            node = parent
        return node

    def members(self, node: str) -> tuple[str, ...]:
        """Every id that is the same entity as ``node`` (its survivor first)."""
        root = self.canonical(node)
        return self._members.get(root, (root,))

    def absorbed_by(self, node: str) -> Merge | None:
        """The merge in effect that absorbed ``node``, if any."""
        return self._by_absorbed.get(node)

    def merged(self, node: str) -> bool:
        """Whether ``node`` takes part in a merge in effect (as survivor or absorbed)."""
        return node in self._into or node in self._members


def identity_as_of(merges: Sequence[Merge], known_at: int | None) -> IdentityMap | None:
    """The identity map as the ledger knew it at ``known_at`` (``None``: now); None when no merge holds."""
    if not merges:
        return None
    holding = [merge for merge in merges if merge.in_effect(known_at)]
    return IdentityMap(holding) if holding else None


class IdentityTimeline:
    """A tenant's merges, and the map as of any ``known_at``: the merges in effect change only at a
    merge's or split's transaction time, so one map is built per interval between two of them, once."""

    __slots__ = ("_bounds", "_maps", "merges")

    def __init__(self, merges: Sequence[Merge]) -> None:
        self.merges = tuple(merges)
        self._bounds = sorted({m.tx_from for m in merges} | {m.tx_to for m in merges if m.tx_to is not None})
        self._maps: dict[int, IdentityMap | None] = {}

    def as_of(self, known_at: int | None) -> IdentityMap | None:
        """``identity_as_of(merges, known_at)``, built once per interval."""
        if not self.merges:
            return None
        bounds = self._bounds
        interval = len(bounds) if known_at is None else bisect_right(bounds, known_at)
        if interval == 0:
            return None
        if interval not in self._maps:
            # Past the last edit, ``known_at`` holds what now holds: every closed merge is closed by then.
            self._maps[interval] = identity_as_of(self.merges, None if interval == len(bounds) else known_at)
        return self._maps[interval]

    def extended(self, merges: Sequence[Merge], now: IdentityMap | None) -> IdentityTimeline:
        """The timeline of ``merges`` (these merges and later edits), given the map ``now`` they make:
        the maps already built stay, as no later edit changes an earlier interval."""
        timeline = IdentityTimeline(merges)
        if timeline._bounds[:len(self._bounds)] == self._bounds and len(timeline._bounds) > len(self._bounds):
            timeline._maps = {interval: built for interval, built in self._maps.items() if interval < len(self._bounds)}
            # The interval that was last is still the map from the last earlier edit to the first later one.
            if len(self._bounds) in self._maps:
                timeline._maps[len(self._bounds)] = self._maps[len(self._bounds)]
            timeline._maps[len(timeline._bounds)] = now
        return timeline


def canonical_ids(identity: IdentityMap | None, ids: Iterable[str]) -> list[str]:
    """``ids`` by their survivors, each once, in first-seen order (names of two merged entities are one)."""
    if identity is None:
        return list(ids)
    return list(dict.fromkeys(identity.canonical(entity_id) for entity_id in ids))


IDENTITY_READ = "~identity"
"""The relationship of the read key a query records for every node on its paths: no edge version ever
has it, so only an identity edit at that node (``identity_edits``) touches it, and the cached answers
and traces that named the node are found as those that read its adjacencies are."""


def identity_edits(merges: Iterable[Merge], after_tx: int, until_tx: int | None = None) -> list[tuple[int, str, Merge]]:
    """(tx, edit id, merge) of each merge made and each split in ``(after_tx, until_tx]``, in tx order."""
    edits = []
    for merge in merges:
        if after_tx < merge.tx_from and (until_tx is None or merge.tx_from <= until_tx):
            edits.append((merge.tx_from, merge.merge_id, merge))
        if merge.tx_to is not None and merge.split_id is not None and after_tx < merge.tx_to \
                and (until_tx is None or merge.tx_to <= until_tx):
            edits.append((merge.tx_to, merge.split_id, merge))
    return sorted(edits, key=lambda edit: (edit[0], edit[1]))


# -- validation of the commands ---------------------------------------------------------------------------
def merge_refusal(tenant: str, keep: str, absorb: str, kept: Entity | None, absorbed: Entity | None,
                  now: IdentityMap | None) -> str | None:
    """Why a merge of ``absorb`` into ``keep`` cannot be applied (``now``: the merges in effect), or None."""
    if keep == absorb:
        return f"cannot merge {keep!r} into itself"
    for entity_id, entity in ((keep, kept), (absorb, absorbed)):
        if entity is None:
            return f"unknown entity {entity_id!r} for tenant {tenant!r}"
    assert kept is not None and absorbed is not None
    if kept.type != absorbed.type:
        return (f"cannot merge a {absorbed.type} into a {kept.type}: {absorb!r} and {keep!r} are entities of "
                "different types")
    if now is not None:
        earlier = now.absorbed_by(absorb)
        if earlier is not None:
            return (f"{absorb!r} is already absorbed into {now.canonical(absorb)!r} (merge {earlier.merge_id!r}); "
                    "split that merge first")
        earlier = now.absorbed_by(keep)
        if earlier is not None:
            return (f"{keep!r} is itself absorbed into {now.canonical(keep)!r} (merge {earlier.merge_id!r}); "
                    "merge into that entity instead")
    return None


def split_refusal(tenant: str, merge_id: str, merge: Merge | None) -> str | None:
    """Why the merge ``merge_id`` cannot be split, or None."""
    if merge is None:
        return f"unknown merge {merge_id!r} for tenant {tenant!r}: a split names the event id of an applied merge"
    if merge.tx_to is not None:
        return f"merge {merge_id!r} was already split (by {merge.split_id!r})"
    return None


def split(merge: Merge, split_id: str, actor: str, reason: str, tx: int) -> Merge:
    """The merge closed at ``tx``: the only change a stored merge ever sees."""
    return merge._replace(tx_to=tx, split_id=split_id, split_actor=actor, split_reason=reason)


# -- placeholder absorption -------------------------------------------------------------------------------
def is_placeholder(entity_id: str) -> bool:
    """A ``Type:~name`` entity, made from a name-only mention."""
    return ":~" in entity_id


def placeholder_name(entity_id: str) -> str:
    """The normalised name a placeholder was made from (``Type:~name``, or ``Type:~name~review`` when a
    review decision made it beside an entity of that name: a normalised name has no ``~``)."""
    return entity_id.split(":~", 1)[1].split("~", 1)[0]


def placeholders_to_absorb(offered: Iterable[tuple[str, str]], entity: Entity, names: Sequence[str],
                           now: IdentityMap | None, match: MatchPredicate) -> list[str]:
    """The placeholders a new system-of-record ``entity`` (``names``: its normalised name and aliases)
    absorbs: those ``offered`` (placeholder id, its name), not absorbed already, whose name ``match``
    accepts for one of ``names``, in the order offered."""
    found: list[str] = []
    for placeholder, name_of_placeholder in offered:
        if placeholder in found or placeholder == entity.entity_id:
            continue
        if now is not None and now.absorbed_by(placeholder) is not None:
            continue
        if any(match(name_of_placeholder, name) for name in names):
            found.append(placeholder)
    return found
