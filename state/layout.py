"""The ledger's RocksDB layout: its tables, their keys, and the format a state directory records.

Tables (one-byte prefix, then ``state.keys.pack`` parts):

=====  ==========================================================  ==================================
``V``  tenant, edge_id                                             the edge version
``A``  tenant, node, rel, ``o``/``i``, tx_from, edge_id             nothing: an index of ``V`` (adjacency, both ends)
``T``  tenant, last tx of a batch                                  (tx, ``a``/``c``, edge_id) the batch appended/closed
``E``  tenant, entity_id                                            entity (type, latest name)
``N``  tenant, sort key of the alias, alias, entity_id               tx, entity_id, alias (``codec.encode_alias``)
``S``  tenant, sort key reversed, alias, entity_id                  as ``N``: the aliases in suffix order
``U``  tenant, ``r``, review_id / tenant, ``e``, entity_id, tx, id  a review decision / by entity
``G``  (``state.pipeline_store``: a worker's input offsets)
``B``  tenant, system, record or "", edge_id                         the version, while still believed
``I``  tenant, event_id                                             outcome (idempotent re-delivery)
``K``  tenant, last tx of a batch                                  the batch's correction events
``R``  tenant, review_id                                            review item
``D``  tx, digest of the letter                                      dead letter
``X``  tenant, trace_id / ``Y`` tenant, edge_id, trace_id           traces and their edge index
``J``  tenant, tx_at, trace_id                                      nothing: traces in order of recording
``H``  tenant, system                                               last heartbeat
``L``  tenant, system                                               latest change and heartbeat applied
``P``  tenant, system, tx of the row's first entry, newest first   the source's ``L`` row through a batch
``Q``  tenant, ``m``, merge_id                                       the merge (``processors.model.Merge``)
``Q``  tenant, ``e``, entity_id, merge_id                            nothing: the merges that name an entity
``Z``  tenant, ``f``/``s``, type, sort key / reversed, entity_id    entity_id: a placeholder (``Type:~name``)
``C``  tenant, entity_id, normalised                                 who recorded the alias by command, and why
``O``  tenant, ``f``, system, record, tx                             what an event filed of the record's statements
``O``  tenant, ``r``, system, record[, version]                      tx: the version (or record) was revoked
``O``  tenant, ``l``, lineage, system, record                        nothing: the record joined the fact
``F``  (``state.freshness_store``: the last source status emitted)
``W``  (``state.pipeline_store``: a worker's outbox)
``M``  name                                                         meta: last transaction time, format
=====  ==========================================================  ==================================

An adjacency is in order of recording (``tx_from``), so a read as of a past transaction time stops
at the first version recorded after it, and what a query read then is a prefix of what it reads now.
The out-adjacency also serves the versions of one logical edge (tenant, src, rel, o, filtered by dst).
A closed version's ``V`` row is rewritten with its ``tx_to``; that is the only change a stored version
ever sees, and the ``edge-versions`` log carries it as a new record rather than an edit. An ``A`` row
holds no value and is written once, with the version: its key ends with the edge id, and a read of an
adjacency reads each version from ``V``. Closing a belief so writes one row and deletes its ``B`` row.

``T`` and ``K`` are read as whole listings or from a transaction time on, never by one id, so a batch
files its entries for a tenant in one row, keyed by the latest transaction time among them (a row per
entry would be a quarter of the rows a batch writes). A reader from transaction time ``t`` on seeks to
the first row keyed at ``t`` or later: every earlier row holds only entries before ``t``. Within a row
the entries are in the order the keys had.

``L`` is the current view of source activity; ``P`` is the same through transaction time, so that
staleness as of a past ``known_at`` is judged on what the ledger had heard by then. A batch writes, per
source it applied an event from, one row: [tx, the four ``L`` fields] after each event applied from that
source, first the row as the batch found it (so every row alone answers from its key to the next row's
key), keyed by the first entry's tx, newest first. A read as of ``known_at`` seeks once per source to
the first row keyed at or before ``known_at`` and takes its newest entry at or before it. Not one row
per event (as for ``T``): an entry is a five-item list. A batch's span of transaction time is
arbitrary (a simulated-clock load may put weeks in one batch), so rows keyed by the batch's end
could not answer a ``known_at`` inside it, and what they said would depend on where batches ended.

A merge is a row of its own; edges are never rewritten for it. A split closes it by rewriting its
``Q`` row with ``tx_to`` (and the split's id, actor and reason), as a closed version's ``V`` row is
rewritten: an as-known read before the split still sees the merge. A tenant's merges are few and read
whole (``StoreReads.merges``, cached); a tenant with none costs a dictionary lookup per read. ``Z``
lists the placeholders so that a tenant with none skips the absorption check.

A fact's first statement is its versions' own provenance. ``O`` ``f`` rows add every other
statement: an event whose version asserts a fact again unchanged, or whose record asserts an edge
another record of the source made (it joins the fact), files one row with each such fact's lineage
(``origin``) and the interval it stated; a snapshot's omission files where its record stopped
stating a fact that others still state; a revocation files one row per record it concerned. A
resent snapshot so writes one row, not one per fact. A piece's statements are read (each record's
rows, whole) only by ``revoke``, ``revoke_source``, a snapshot's omission of a fact another record
joined, and ``history``: a record that resends at a new version every time accumulates a row per
resend, which those reads decode. ``r`` lists the revoked versions (a version that states a fact
again after its revocation makes a statement of its own) and ``l`` the joins, one row per (fact,
record); both are read whole once per tenant and kept, since a snapshot asks for its record's joins
and an omission for a fact's.

A state directory records its format (``M`` ``format``); a state in any other is refused with
``StateFormatError``, which says to rebuild it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, Final

from processors.model import Direction
from state.keys import pack
from state.kv import OrderedKV

DIRECTION: Final = {"out": "o", "in": "i"}
OUT: Final = pack("o")
IN: Final = pack("i")
INDEX: Final = b""
"""The value of an index row (``A``): the key says it all."""
LAST_TX: Final = b"M" + pack("last_tx")
FORMAT: Final = b"M" + pack("format")
FORMAT_VERSION: Final = b"8"
"""The one layout this edgeledger reads and writes: the tables above."""
TX_BYTES: Final = 9
"""An encoded ``tx_from`` in an ``A`` key (``keys.encode_int``): the edge id follows it."""


class StateFormatError(ValueError):
    """The directory holds ledger state in a layout this version does not read."""


def recorded_format(kv: OrderedKV) -> bool:
    """Whether the KV records this format (False: it holds no ledger state yet, and the first commit
    records it). Raises ``StateFormatError`` for state in any other format, or with none recorded."""
    stored = kv.get(FORMAT)
    if stored is None:
        if _holds_no_versions(kv):
            return False
        stored = b"1"  # versions, and no format: the first format recorded none
    if stored == FORMAT_VERSION:
        return True
    raise StateFormatError(
        f"the state directory holds ledger state in format {stored.decode()}, this edgeledger reads format "
        f"{FORMAT_VERSION.decode()}: load the events again into a new directory, or let a worker rebuild it "
        "from the edge-versions log")


def _holds_no_versions(kv: OrderedKV) -> bool:
    for _ in kv.scan(b"V"):
        return False
    return True


def digest(record: bytes) -> str:
    """A ``D`` key's second part: the letter's own digest, so that a replay that applies the same
    letter again (a rebuild begun again after a crash) writes the same row, and two letters never meet."""
    return hashlib.blake2b(record, digest_size=12).hexdigest()


def adjacency(tenant: str, node: str, rel: str, direction: Direction) -> bytes:
    """The key prefix of a node's adjacency of one relationship and direction."""
    return b"A" + pack(tenant, node, rel, DIRECTION[direction])


def listing_rows(table: bytes, by_tenant: dict[str, list], order: Callable[[Any], tuple] | None,
                 encode: Callable[[list], bytes]) -> list[tuple[bytes, bytes]]:
    """A batch's rows of a listing table (``T``, ``K``): per tenant, its entries in ``order`` (no
    ``order``: entries that are their own sort key), whose first part is a transaction time, in one
    row keyed by the latest of them."""
    rows = []
    for tenant, entries in by_tenant.items():
        if order is None:
            entries.sort()  # Speed: tuples compared as they are, no key tuple built per entry
            last_tx = entries[-1][0]
        else:
            entries.sort(key=order)
            last_tx = order(entries[-1])[0]
        rows.append((table + pack(tenant, last_tx), encode(entries)))
    return rows
