"""A writer's name-blocking orders in memory: a tenant's aliases in the ``N`` and ``S`` orders and its
placeholders in the ``Z`` orders, as sorted lists.

Why: a fuzzy lookup, the rival check of a placeholder and a new entity's search for placeholders each
seek six times, and a RocksDB seek positions an iterator over every memtable and table file (about
80,000 instructions a seek while loading). A bisect of a sorted list answers the same question for a
few thousand. The lists are the tables' rows exactly (``tests/state/test_blocking.py`` holds the two
to the same answers): loaded from them the first time a tenant is asked, and kept in step by the
commits of the store that holds them. The tenants share a budget of ``limit`` aliases: a tenant that
would take the lists past it is left to the seeks, so memory stays bounded however many tenants a
writer serves (about 500 bytes an alias of some 20 characters). A row carries what a
lookup would otherwise work out at every read (the entity's type, the placeholder's name), and holds
only strings and ints: the garbage collector then stops tracking it, where a row holding an object
(a ``Candidate``) would be walked by every full collection, a tenth of a second per 100,000 aliases.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable
from sys import intern
from typing import Any, Final

from processors.identity_map import placeholder_name
from processors.matching import NEIGHBOURS, PLACEHOLDER_REACH, SCANNED, Candidate, entity_type_of, sort_key
from processors.model import AliasEntry
from state import codec
from state.keys import pack
from state.kv import OrderedKV

NAMES_IN_MEMORY: Final = 1_000_000
"""Aliases a writer keeps in memory at most, over all its tenants (about 500 MB at the limit); a tenant
that does not fit is read by seeks."""


_CHUNK: Final = 512
"""Rows a chunk of ``SortedRows`` starts with; one splits in two past twice that."""

Row = tuple[Any, ...]


class SortedRows:
    """Tuples in sorted order, kept in sorted chunks with each chunk's last row beside them: a lookup
    is two C bisects, and an insertion moves at most one chunk, however many rows there are (a flat
    list would move half of them)."""

    def __init__(self, rows: list[Row]) -> None:
        """``rows``: sorted."""
        self._chunks: list[list[Row]] = [rows[at:at + _CHUNK] for at in range(0, len(rows), _CHUNK)]
        self._lasts: list[Row] = [chunk[-1] for chunk in self._chunks]
        self.count = len(rows)

    def add(self, row: Row) -> None:
        if not self._chunks:
            self._chunks.append([row])
            self._lasts.append(row)
            self.count = 1
            return
        at = min(bisect_left(self._lasts, row), len(self._chunks) - 1)
        chunk = self._chunks[at]
        insort(chunk, row)
        self._lasts[at] = chunk[-1]
        self.count += 1
        if len(chunk) > 2 * _CHUNK:
            self._chunks[at:at + 1] = [chunk[:_CHUNK], chunk[_CHUNK:]]
            self._lasts[at:at + 1] = [chunk[_CHUNK - 1], chunk[-1]]

    def discard(self, row: Row) -> None:
        at = bisect_left(self._lasts, row)
        if at == len(self._chunks):
            return
        chunk = self._chunks[at]
        index = bisect_left(chunk, row)
        if chunk[index] != row:
            return
        del chunk[index]
        self.count -= 1
        if chunk:
            self._lasts[at] = chunk[-1]
        else:
            del self._chunks[at]
            del self._lasts[at]

    def after(self, probe: Row, count: int) -> list[Row]:
        """The first ``count`` rows at or after ``probe``, in order."""
        found: list[Row] = []
        at = bisect_left(self._lasts, probe)
        if at == len(self._chunks):
            return found
        index = bisect_left(self._chunks[at], probe)
        while at < len(self._chunks) and len(found) < count:
            found += self._chunks[at][index:index + count - len(found)]
            at, index = at + 1, 0
        return found

    def before(self, probe: Row, count: int) -> list[Row]:
        """The last ``count`` rows before ``probe``, nearest first."""
        found: list[Row] = []
        at = bisect_left(self._lasts, probe)
        if at == len(self._chunks):
            at -= 1
            index = len(self._chunks[at]) if at >= 0 else 0
        else:
            index = bisect_left(self._chunks[at], probe)
        while at >= 0 and len(found) < count:
            chunk = self._chunks[at]
            found += reversed(chunk[max(0, index - (count - len(found))):index])
            at -= 1
            if at >= 0:
                index = len(self._chunks[at])
        return found

    def __contains__(self, row: Row) -> bool:
        return self.after(row, 1) == [row]


class TenantNames:
    """One tenant's aliases in two orders, (sort key | reversed, alias, entity id, tx, entity type), and
    its placeholders by type in two orders, (sort key | reversed, entity id, name). A row's first three
    items are unique, so the last ones never take part in an order."""

    def __init__(self, forward: list[Row], backward: list[Row]) -> None:
        """``forward`` and ``backward``: the alias rows, each sorted."""
        self.forward = SortedRows(forward)
        self.backward = SortedRows(backward)
        self.placeholders: dict[str, tuple[SortedRows, SortedRows]] = {}

    def add_alias(self, normalised: str, entity_id: str, tx: int) -> None:
        ordered = sort_key(normalised)
        of_type = intern(entity_type_of(entity_id))  # a handful of types: one string each
        for order, key in ((self.forward, ordered), (self.backward, ordered[::-1])):
            for held in order.after((key, normalised, entity_id), 1):
                if held[:3] == (key, normalised, entity_id):
                    order.discard(held)  # the row is written again: its value (the tx) is the new one
            order.add((key, normalised, entity_id, tx, of_type))

    def add_placeholder(self, entity_id: str) -> None:
        name = placeholder_name(entity_id)
        ordered = sort_key(name)
        orders = self.placeholders.get(entity_type_of(entity_id))
        if orders is None:
            orders = self.placeholders[entity_type_of(entity_id)] = (SortedRows([]), SortedRows([]))
        for order, key in ((orders[0], ordered), (orders[1], ordered[::-1])):
            if (key, entity_id, name) not in order:
                order.add((key, entity_id, name))

    def neighbours(self, entity_type: str | None, forward: tuple[str, ...], backward: str,
                   known_at: int | None) -> list[Candidate]:
        """``StoreReads.neighbours`` over the rows: each probe's rows outwards, after it then before it."""
        found: list[Candidate] = []
        for order, probe in [(self.forward, key) for key in forward] + [(self.backward, backward)]:
            _take(found, order.after((probe,), SCANNED), entity_type, known_at)
            _take(found, order.before((probe,), SCANNED), entity_type, known_at)
        return found

    def placeholders_near(self, entity_type: str, forward: tuple[str, ...], backward: str) -> list[tuple[str, str]]:
        """``StoreReads.placeholders_near`` over the rows."""
        orders = self.placeholders.get(entity_type)
        if orders is None:
            return []
        found: list[tuple[str, str]] = []
        for order, probe in [(orders[0], key) for key in forward] + [(orders[1], backward)]:
            for side in (order.after((probe,), PLACEHOLDER_REACH), order.before((probe,), PLACEHOLDER_REACH)):
                found += [(row[1], row[2]) for row in side]
        return found


def _take(found: list[Candidate], rows: list[Row], entity_type: str | None, known_at: int | None) -> None:
    """As ``state.reads._take_near``: the first ``NEIGHBOURS`` aliases of the type recorded by
    ``known_at``, reading ``SCANNED`` rows at most."""
    kept = 0
    for read, row in enumerate(rows, 1):
        of_type: str = row[4]
        if (entity_type is None or of_type == entity_type) and (known_at is None or row[3] <= known_at):
            found.append(Candidate(row[2], of_type, row[1]))
            kept += 1
        if kept == NEIGHBOURS or read == SCANNED:
            return


class NameBlocks:
    """Every tenant's ``TenantNames`` a writer has asked for, loaded from the KV on first use. ``of``
    answers None for a tenant that did not fit in what ``limit`` left: its reads seek."""

    def __init__(self, kv: OrderedKV, limit: int = NAMES_IN_MEMORY) -> None:
        self.kv = kv
        self.limit = limit
        self._held = 0
        """Aliases held, over the tenants loaded."""
        self._tenants: dict[str, TenantNames | None] = {}

    def of(self, tenant: str) -> TenantNames | None:
        if tenant in self._tenants:
            return self._tenants[tenant]
        rows: list[Row] = []
        for _, value in self.kv.scan(b"N" + pack(tenant)):
            if len(rows) == self.limit - self._held:
                self._tenants[tenant] = None
                return None
            tx, entity_id, alias = codec.decode_alias(value)
            rows.append((sort_key(alias), alias, entity_id, tx, intern(entity_type_of(entity_id))))
        # Sorted once each (the N rows come nearly in the forward order already, which sorts fast).
        names = TenantNames(sorted(rows), sorted([(str(row[0])[::-1], *row[1:]) for row in rows]))
        for _, value in self.kv.scan(b"Z" + pack(tenant, "f")):
            names.add_placeholder(value.decode())
        self._tenants[tenant] = names
        self._held += len(rows)
        return names

    def recorded(self, aliases: Iterable[AliasEntry], placeholders: Iterable[tuple[str, str]]) -> None:
        """A commit's new rows, into the tenants already loaded (the others read them when loaded)."""
        for alias in aliases:
            names = self._tenants.get(alias.tenant)
            if names is not None:
                held = names.forward.count
                names.add_alias(alias.normalised, alias.entity_id, alias.tx_from)
                self._held += names.forward.count - held  # an alias written again adds no row
                if self._held > self.limit:
                    self._held -= names.forward.count
                    self._tenants[alias.tenant] = None
        for tenant, entity_id in placeholders:
            names = self._tenants.get(tenant)
            if names is not None:
                names.add_placeholder(entity_id)

    def clear(self) -> None:
        self._tenants.clear()
        self._held = 0
