"""The ledger's store: its reads (``state.reads``) and the one atomic write of a batch, over the
layout of ``state.layout``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from processors.identity_map import placeholder_name
from processors.matching import entity_type_of, sort_key
from processors.model import Correction, EdgeVersion, EncodedVersion, Merge, SourceActivity, last_heard_tx
from processors.pending import PendingLedger
from state import codec
from state.blocking import NAMES_IN_MEMORY
from state.keys import encode_int, encode_int_desc, encode_str, pack
from state.kv import OrderedKV
from state.layout import FORMAT, FORMAT_VERSION, IN, INDEX, LAST_TX, OUT, digest, listing_rows, recorded_format
from state.reads import StoreReads

NO_TRANSACTION: Final = -(1 << 62)
"""``last_tx`` of a store that has recorded nothing yet."""

LogRows = Callable[[list[EncodedVersion]], Sequence[tuple[bytes, bytes]]]
"""Given every version a batch touched, the rows that park what the batch must emit (a worker's
outbox), written in the batch's own WriteBatch."""


def _correction_order(correction: Correction) -> tuple[int, str]:
    return (correction.tx_at, correction.correction_id)


class LedgerStore(StoreReads):
    """Implements ``LedgerReader`` and ``GraphReader`` over an ``OrderedKV``: ``StoreReads``'s reads,
    the last transaction time, and ``commit``."""

    def __init__(self, kv: OrderedKV, cache_entries: int = 200_000, believed_fan_out: int = 10_000,
                 names_in_memory: int = NAMES_IN_MEMORY) -> None:
        """``names_in_memory``: the aliases kept in memory for name blocking, over all tenants
        (``state.blocking``), 0 for none (a reader)."""
        super().__init__(kv, cache_entries, believed_fan_out, names_in_memory)
        self._parts: dict[str, bytes] = {}
        """Key parts encoded once: ``_parts["acme"] == pack("acme")`` (tenants, relationships, source systems)."""
        self._read_persisted()

    def _read_persisted(self) -> None:
        """The state's format (refused unless this edgeledger reads it) and its last transaction time,
        as the KV holds them."""
        self._format_recorded = recorded_format(self.kv)
        raw = self.kv.get(LAST_TX)
        self._last_tx = int(raw) if raw else NO_TRANSACTION

    def reset(self) -> None:
        """Delete all state and forget every cache: the store is then as if new (a worker whose state
        diverged from the log discards it and rebuilds from the log)."""
        self.kv.clear()
        self._drop_caches()
        self._parts.clear()
        self._read_persisted()

    def last_tx(self) -> int:
        return self._last_tx

    def _activity_rows(self, pending: PendingLedger) -> list[tuple[bytes, bytes]]:
        """The batch's ``L`` row and ``P`` row of each (tenant, source) it applied an event from."""
        # Speed: one mutable row per source rather than a dataclass ``replace`` per applied event.
        # Row: [last_change_detected_at, last_change_tx, last_heartbeat_detected_at, last_heartbeat_tx];
        # the source's P entries beside it, each [tx, *row] (the first one the row as found, if heard).
        rows: dict[tuple[str, str], tuple[list[int | None], list[list[int | None]], int]] = {}
        for outcome in pending.outcomes:
            if outcome.outcome != "applied" or outcome.tenant is None or outcome.system is None:
                continue
            key = (outcome.tenant, outcome.system)
            found = rows.get(key)
            if found is None:
                raw = self.kv.get(b"L" + pack(*key))
                current = codec.decode_activity(raw) if raw else SourceActivity(*key)
                row = [current.last_change_detected_at, current.last_change_tx,
                       current.last_heartbeat_detected_at, current.last_heartbeat_tx]
                heard = last_heard_tx(current)
                entries: list[list[int | None]] = [] if heard is None else [[heard, *row]]
                rows[key] = (row, entries, len(entries))
            else:
                row, entries = found[0], found[1]
            # Heard at the event's transaction time whatever its detected_at says (an old one is a
            # late fact, not silence, see processors.freshness); detected_at keeps the newest seen.
            tx, detected = outcome.tx_at, outcome.detected_at
            if outcome.kind == "heartbeat":
                at = 2
            elif outcome.kind == "change":
                at = 0
            else:
                continue
            seen = row[at]
            if detected is not None and (seen is None or detected > seen):
                row[at] = detected
            row[at + 1] = tx
            if tx is not None:
                entries.append([tx, row[0], row[1], row[2], row[3]])
        puts: list[tuple[bytes, bytes]] = []
        for (tenant, system), (row, entries, seeded) in rows.items():
            parts = pack(tenant, system)
            puts.append((b"L" + parts, codec.encode_record(SourceActivity(tenant, system, *row))))
            first = entries[0][0] if len(entries) > seeded else None
            if first is not None:
                puts.append((b"P" + parts + encode_int_desc(first), codec.encode_activity_entries(entries)))
        return puts

    def _write_through(self, pending: PendingLedger) -> None:
        """After a commit: the entity and alias caches take the batch's entities and aliases (the
        believed-edges cache was kept in step while the rows were built)."""
        for key, entity in pending.entities.items():
            self._entities[key] = entity
        for alias in pending.aliases:
            key = (alias.tenant, alias.normalised)
            entries = self._aliases.get(key)
            if entries is not None:
                # Keep the cached scan result exact: one entry per entity id, in key (= id) order.
                others = [entry for entry in entries if entry[0] != alias.entity_id]
                self._aliases[key] = tuple(sorted([*others, (alias.entity_id, alias.tx_from)]))
        if pending.merge_rows:
            by_tenant: dict[str, dict[str, Merge]] = {}
            for (tenant, merge_id), merge in pending.merge_rows.items():
                by_tenant.setdefault(tenant, {})[merge_id] = merge
            for tenant, changed in by_tenant.items():
                known = {merge.merge_id: merge for merge in self.merges(tenant)}
                known.update(changed)  # a tenant read only now reads the rows just written: the same
                self._merges[tenant] = tuple(known[merge_id] for merge_id in sorted(known))
                timeline = self._identities.pop(tenant, None)
                built, now = pending.identity_built(tenant)
                if timeline is not None and built:
                    # Speed: the batch extended the map merge by merge; building it again reads every merge.
                    self._identities[tenant] = timeline.extended(self._merges[tenant], now)
        for tenant, _ in pending.placeholders:
            self._placeholders[tenant] = True
        if self._blocks is not None:
            self._blocks.recorded(pending.aliases, pending.placeholders)
        for filing in pending.filings:
            revoked = self._revoked.get(filing.tenant)
            if filing.revoked and revoked is not None:
                revoked.add((filing.system, filing.record, filing.version))
            joins = self._joins.get(filing.tenant)
            if joins is not None:
                for lineage, _ in filing.joined:
                    joins.add(lineage, filing.system, filing.record)

    def _keep_believed(self, version: EdgeVersion) -> None:
        """Keep a cached believed-out entry exact: a believed version enters it, a closed one leaves."""
        key = (version.tenant, version.src, version.rel)
        by_dst = self._believed_out.get(key)
        if by_dst is None:
            return
        believed = by_dst.get(version.dst)
        if version.tx_to is None:
            if believed is None:
                if len(by_dst) >= self._believed_fan_out:
                    # Grown too wide since it was cached: drop it, as a read would not cache it.
                    del self._believed_out[key]
                    self._remember(self._too_wide, key, None)
                    return
                believed = by_dst[version.dst] = {}
            believed[version.edge_id] = version
        elif believed is not None and believed.pop(version.edge_id, None) is not None and not believed:
            del by_dst[version.dst]

    def _encoded_part(self, part: str) -> bytes:
        encoded = self._parts.get(part)
        if encoded is None:
            encoded = self._parts[part] = pack(part)
        return encoded

    def _believed_key(self, version: EdgeVersion, tenant: bytes, edge: bytes) -> bytes:
        """The version's ``B`` key. Source records are non-empty, so "" files the versions that name none."""
        return b"".join((b"B", tenant, self._encoded_part(version.authority),
                         encode_str(version.source_record or ""), edge))

    def _version_rows(self, pending: PendingLedger, puts: list[tuple[bytes, bytes]], deletes: list[bytes],
                      encoded: list[EncodedVersion]) -> None:
        """The rows of each touched version: V; when it is new, both A ends (keys only) and, while it is
        believed, B (deleted when it is closed); then per tenant one T row listing what was appended and closed.
        The believed-edges cache takes each version as its rows are built (one pass over the batch, not
        two); ``commit`` drops the caches if the write then fails. Each version is also listed in
        ``encoded`` with its encoding."""
        # Speed: the value is encoded once and shared by V and B, and the key parts that every
        # batch repeats (tenant, relationship, source system) are encoded once and kept across
        # batches. Node ids and source records are encoded each time: there are about as many as entities,
        # and late in a large load a lookup among them missed the CPU caches and cost more than
        # encoding. Compiled, a direct call or ``puts.append`` beats the same through a local alias.
        if len(self._parts) > self._cache_entries:
            self._parts.clear()  # still bounded: tenants and source systems are strings the events choose
        changes: dict[str, list[tuple[int, str, str]]] = {}
        for version, is_new, closed_now in pending.final_versions():
            self._keep_believed(version)
            tenant, edge = self._encoded_part(version.tenant), encode_str(version.edge_id)
            rel = self._encoded_part(version.rel)
            value = codec.encode_version(version)
            encoded.append((version, is_new, closed_now, value))
            puts.append((b"V" + tenant + edge, value))
            if is_new:
                recorded = encode_int(version.tx_from) + edge
                puts.append((b"".join((b"A", tenant, encode_str(version.src), rel, OUT, recorded)), INDEX))
                puts.append((b"".join((b"A", tenant, encode_str(version.dst), rel, IN, recorded)), INDEX))
            if is_new or closed_now:
                changed = changes.get(version.tenant)
                if changed is None:
                    changed = changes[version.tenant] = []
                if is_new:
                    changed.append((version.tx_from, "a", version.edge_id))
                if closed_now and version.tx_to is not None:
                    changed.append((version.tx_to, "c", version.edge_id))
            if is_new:
                if version.tx_to is None:
                    puts.append((self._believed_key(version, tenant, edge), value))
            elif closed_now:
                deletes.append(self._believed_key(version, tenant, edge))
        puts += listing_rows(b"T", changes, None, codec.encode_changes)  # (tx, a/c, edge_id): key order

    # -- the one atomic write -----------------------------------------------------------------------------------
    def commit(self, pending: PendingLedger, extra_puts: Sequence[tuple[bytes, bytes]] = (),
               log_rows: LogRows | None = None) -> None:
        """Write everything a batch of events did, with their event ids, in one WriteBatch, together
        with ``extra_puts`` and the rows ``log_rows`` makes of the batch's versions (see ``LogRows``:
        the versions are encoded once, for their rows and for what the batch emits)."""
        try:
            self._write(pending, extra_puts, log_rows)
        except BaseException:
            self._drop_caches()
            raise
        self._format_recorded = True
        self._write_through(pending)
        self._last_tx = max(self._last_tx, pending.last_tx())

    def _write(self, pending: PendingLedger, extra_puts: Sequence[tuple[bytes, bytes]],
               log_rows: LogRows | None) -> None:
        puts: list[tuple[bytes, bytes]] = list(extra_puts)
        deletes: list[bytes] = []
        encoded: list[EncodedVersion] = []
        self._version_rows(pending, puts, deletes, encoded)
        if log_rows is not None:
            puts += log_rows(encoded)
        for entity in pending.entities.values():
            puts.append((b"E" + pack(entity.tenant, entity.entity_id), codec.encode_entity(entity)))
        for alias in pending.aliases:
            row, ordered = codec.encode_alias(alias.tx_from, alias.entity_id, alias.normalised), \
                sort_key(alias.normalised)
            puts.append((b"N" + pack(alias.tenant, ordered, alias.normalised, alias.entity_id), row))
            puts.append((b"S" + pack(alias.tenant, ordered[::-1], alias.normalised, alias.entity_id), row))
            if alias.actor is not None:
                puts.append((b"C" + pack(alias.tenant, alias.entity_id, alias.normalised),
                             codec.encode_alias_audit(alias.actor, alias.reason)))
        for merge in pending.merge_rows.values():
            puts.append((b"Q" + pack(merge.tenant, "m", merge.merge_id), codec.encode_merge(merge)))
            for entity_id in (merge.keep, merge.absorb):  # rewritten unchanged by a split: no harm, and rare
                puts.append((b"Q" + pack(merge.tenant, "e", entity_id, merge.merge_id), INDEX))
        filed: dict[bytes, int] = {}
        for filing in pending.filings:
            key = b"O" + pack(filing.tenant, "f", filing.system, filing.record) + encode_int(filing.tx)
            # An event files once a record, but can file for a record twice (joins carried at two
            # versions): the second and later rows take a sequence after the tx.
            seen = filed[key] = filed.get(key, -1) + 1
            puts.append((key + encode_int(seen) if seen else key, codec.encode_filing(filing)))
            if filing.revoked:  # the few revoked versions (no version: the whole record), read whole
                named = (filing.system, filing.record) if filing.version is None else (
                    filing.system, filing.record, filing.version)
                puts.append((b"O" + pack(filing.tenant, "r", *named), str(filing.tx).encode()))
            for lineage, _ in filing.joined:  # once a (fact, record): a resend joins again, writes nothing
                if filing.record not in self.lineage_joins(filing.tenant, lineage):
                    puts.append((b"O" + pack(filing.tenant, "l", lineage, filing.system, filing.record), INDEX))
        for tenant, entity_id in pending.placeholders:
            ordered, entity_type = sort_key(placeholder_name(entity_id)), entity_type_of(entity_id)
            row = entity_id.encode()  # the value a lookup reads, not the key (no key decoded)
            puts.append((b"Z" + pack(tenant, "f", entity_type, ordered, entity_id), row))
            puts.append((b"Z" + pack(tenant, "s", entity_type, ordered[::-1], entity_id), row))
        for (tenant, event_id), outcome in pending.seen.items():
            puts.append((b"I" + pack(tenant, event_id), outcome.encode()))
        corrections: dict[str, list[Correction]] = {}
        for correction in pending.corrections:
            corrections.setdefault(correction.tenant, []).append(correction)
        puts += listing_rows(b"K", corrections, _correction_order, codec.encode_corrections)
        for item in pending.review_items:
            puts.append((b"R" + pack(item.tenant, item.review_id), codec.encode_record(item)))
        for decision in pending.decisions:
            puts.append((b"U" + pack(decision.tenant, "r", decision.review_id), codec.encode_decision(decision)))
            for entity_id in decision.entities():
                puts.append((b"U" + pack(decision.tenant, "e", entity_id, decision.tx_at, decision.review_id), b""))
        for letter in pending.dead_letters:
            record = codec.encode_record(letter)
            puts.append((b"D" + pack(letter.tx_at, digest(record)), record))
        for trace in pending.traces:
            puts.append((b"X" + pack(trace.tenant, trace.trace_id), codec.encode_record(trace)))
            for edge_id in trace.edge_ids or ():
                puts.append((b"Y" + pack(trace.tenant, edge_id, trace.trace_id), b""))
            # In order of recording, so the trace index catches up from where it stopped.
            puts.append((b"J" + pack(trace.tenant, trace.tx_at, trace.trace_id), b""))
        for beat in pending.heartbeats:
            puts.append((b"H" + pack(beat.tenant, beat.system), codec.encode_record(beat)))
        puts += self._activity_rows(pending)
        last_tx = pending.last_tx()
        if last_tx > self._last_tx:
            puts.append((LAST_TX, str(last_tx).encode()))
        if not self._format_recorded:
            puts.append((FORMAT, FORMAT_VERSION))
        self.kv.write(puts, deletes)

