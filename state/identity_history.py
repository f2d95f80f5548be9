"""Reading one entity's identity edits from the ledger: each kind of edit has a source here, and the
listing merges them in transaction-time order (``processors.identity_history``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from processors.identity_history import IdentityEdit, alias_edits, decision_edits, in_tx_order, merge_edits
from processors.model import AliasEntry
from state import codec
from state.keys import pack, unpack
from state.reads import StoreReads

EditSource = Callable[[StoreReads, str, str], Iterable[IdentityEdit]]
"""(store, tenant, entity id) -> the entity's edits of one kind."""


def merges_and_splits(store: StoreReads, tenant: str, entity: str) -> list[IdentityEdit]:
    return merge_edits(store.merges_naming(tenant, entity), entity)


def aliases(store: StoreReads, tenant: str, entity: str) -> list[IdentityEdit]:
    """The entity's rows of the alias table. ``N`` is keyed by name, so this scans the tenant's aliases:
    fine for an audit listing, not for a hot path."""
    audits = {str(unpack(key[1:])[-1]): codec.decode_alias_audit(value)
              for key, value in store.kv.scan(b"C" + pack(tenant, entity))}
    found = []
    for _, value in store.kv.scan(b"N" + pack(tenant)):
        tx, entity_id, normalised = codec.decode_alias(value)
        if entity_id == entity:
            actor, reason = audits.get(normalised, (None, ""))
            found.append(AliasEntry(tenant, normalised, entity, tx, actor, reason))
    return alias_edits(found)


def decisions(store: StoreReads, tenant: str, entity: str) -> list[IdentityEdit]:
    return decision_edits(store.decisions_for(tenant, entity), entity)


EDIT_SOURCES: dict[str, EditSource] = {"merge": merges_and_splits, "alias": aliases, "decision": decisions}
"""The kinds of identity edit ``identity history`` lists, by name."""


def identity_history(store: StoreReads, tenant: str, entity: str, known_at: int | None = None,
                     sources: dict[str, EditSource] | None = None) -> list[IdentityEdit]:
    """Every identity edit of ``entity`` recorded by ``known_at``, oldest first."""
    chosen = EDIT_SOURCES if sources is None else sources
    return in_tx_order((source(store, tenant, entity) for source in chosen.values()), known_at)
