"""Bi-temporal versioning: the rules that turn assertions, retractions and revocations into
appended edge versions and closed beliefs.

Versions are never updated or deleted. A change of belief closes the old version's transaction
interval (``tx_to = tx``) and appends what is now believed: the unaffected remainders of the old
fact (with the old fact's provenance) and the new fact. Every operation that closes a belief
emits one correction naming the closed and the appended edge ids. A stretch the source already
believes as an assertion states it (from the same record with the same content, or from another
record) is not a change of belief: it is left as it is, the assertion is filed as one more
statement of it (``processors.statements``), and it appends only what it says anew.

A logical edge is (src, rel, dst) *per authority* (source system): a source can supersede and
retract only what it asserted itself, and a single-valued relationship closes only competing
values from the same authority. A competing value from another authority is kept, and the
conflict is flagged for review rather than resolved by guessing. For ``other`` the source's
wording (``phrase``) is part of the edge too: different wordings are different relationships.
"""

from __future__ import annotations

import hashlib
from typing import Final

from processors.conflicts import conflict_item
from processors.intervals import Interval, cut_from, overlaps, subtract
from processors.model import Correction, EdgeVersion, Filing
from processors.pending import PendingLedger
from processors.statements import StatementIndex, carried_filings, ended_from, withdrawing, withdrawn_by
from processors.vocabulary import Vocabulary


def _digest(*parts: str) -> hashlib.blake2b:
    """The hash behind every derived id: the parts joined by the unit separator."""
    return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8)


WORDED: Final = "other"
"""The relationship whose edges are also told apart by their ``phrase``: it keeps what the vocabulary
lacks, and each wording is a relationship of its own."""


def derive_id(prefix: str, *parts: str) -> str:
    """A deterministic id from its parts, so replaying the same events yields the same ids."""
    return f"{prefix}{_digest(*parts).hexdigest()}"


class Fact:
    """A resolved assertion: canonical ids, valid interval and its content. Never changed once built."""

    # Speed: a plain class. Built once or twice per event; a NamedTuple's ``__new__`` runs as
    # interpreted Python even in the compiled core, and a frozen dataclass costs more still.
    def __init__(self, src: str, rel: str, dst: str, valid_from: int | None, valid_to: int | None,
                 evidence: str, confidence: float, phrase: str | None = None) -> None:
        self.src = src
        self.rel = rel
        self.dst = dst
        self.valid_from = valid_from
        self.valid_to = valid_to
        self.evidence = evidence
        self.confidence = confidence
        self.phrase = phrase

    @property
    def interval(self) -> Interval:
        return (self.valid_from, self.valid_to)


class Provenance:
    """Where a fact comes from: the source system (its authority), record and version. Never changed."""

    def __init__(self, authority: str, record: str | None, version: str | None, detected_at: int | None) -> None:
        self.authority = authority
        self.record = record
        self.version = version
        self.detected_at = detected_at


class Versioner:
    """Applies one event's operations at one transaction time ``tx``."""

    # Speed: a plain class, not a dataclass. One is built per event, and the ``__init__`` that
    # ``dataclass`` generates runs as interpreted Python even in the compiled core.
    def __init__(self, ledger: PendingLedger, vocabulary: Vocabulary, tenant: str, event_id: str, tx: int) -> None:
        self.ledger = ledger
        self.vocabulary = vocabulary
        self.tenant = tenant
        self.event_id = event_id
        self.tx = tx
        self._sequence = 0
        self._closed: list[EdgeVersion] = []
        self._appended: list[EdgeVersion] = []
        self._event_digest: hashlib.blake2b | None = None
        self._conflicts: list[tuple[str, list[EdgeVersion], list[EdgeVersion]]] = []
        """(review id, the versions asserting a value, its rivals): judged in ``finish`` on what survives."""
        self._replaced: dict[str, list[EdgeVersion]] = {}
        """A version this event appended and a later assertion of it discarded: the pieces it left."""
        self._orphans: list[str] = []
        """Facts this event asserted whose origin version a later assertion of it discarded (their origin
        ids): ``finish`` gives each a surviving piece as origin. Noted as it happens (rarely) rather than
        found again in ``finish``, which would walk every event's appended versions."""
        self._restated: dict[tuple[str, int | None, int | None], None] = {}
        """(lineage, valid_from, valid_to) of each believed fact this event's record stated again at
        another version: ``finish`` files them (``Filing``), so that revoking one version keeps the rest."""
        self._restating: Provenance | None = None
        self._joined: dict[str, str] = {}
        """Lineages among ``_restated`` that another record of the source first stated."""
        self._ended: dict[tuple[str, int | None], None] = {}
        """(lineage, from) of each fact whose record stopped stating it while others still do."""
        self._ending: str | None = None
        self._authority = ""
        self._index: StatementIndex | None = None
        self._carried: list[tuple[list[EdgeVersion], list[str], Interval]] = []
        """(the record's own pieces its new wording replaced, the new fact's pieces, its interval) where
        other records had joined the old fact: ``finish`` files their statements as joining the new one."""

    def _next_id(self, prefix: str) -> str:
        """``derive_id(prefix, tenant, event_id, sequence)``. Speed: the event's part of the digest is
        hashed once and copied for each id; hashing in pieces gives the same digest as in one go."""
        self._sequence += 1
        if self._event_digest is None:
            self._event_digest = _digest(self.tenant, self.event_id, "")  # ends with the separator
        digest = self._event_digest.copy()
        digest.update(str(self._sequence).encode())
        return f"{prefix}{digest.hexdigest()}"

    def _believed(self, src: str, rel: str, dst: str, authority: str, phrase: str | None,
                  record: str | None = None) -> list[EdgeVersion]:
        """The believed versions of one logical edge from ``authority``, in a canonical order, so ids and
        outputs never depend on batch boundaries. For ``other`` only those with ``phrase`` (``None``:
        every wording); with ``record``, only the versions that record is the provenance of."""
        believed = [v for v in self.ledger.believed_edge(self.tenant, src, rel, dst) if v.authority == authority]
        if rel == WORDED and phrase is not None:
            believed = [v for v in believed if v.phrase == phrase]
        if record is not None:
            believed = [v for v in believed if v.source_record == record]
        if len(believed) > 1:
            believed.sort(key=_canonical)
        return believed

    def _append(
        self,
        fact: Fact,
        interval: Interval,
        provenance: Provenance,
        origin: str | None,
        supersedes: tuple[str, ...],
        event_id: str,
    ) -> EdgeVersion:
        edge_id = self._next_id("e")
        version = EdgeVersion(
            edge_id, self.tenant, fact.src, fact.rel, fact.dst,
            interval[0], interval[1],  # valid_from, valid_to
            self.tx, None,  # tx_from, tx_to
            provenance.authority, provenance.record, provenance.version,
            fact.evidence, fact.confidence,
            origin or edge_id, tuple(sorted(supersedes)) if len(supersedes) > 1 else supersedes,
            event_id, provenance.detected_at, fact.phrase,
        )
        self.ledger.append(version)
        return version

    def _end_belief(self, old: EdgeVersion) -> bool:
        """Close ``old``; a version this same transaction appended is discarded instead, since a belief
        interval [tx, tx) would be empty. Returns whether a committed belief was closed."""
        if old.tx_from == self.tx:
            self.ledger.discard_new(old)
            return False
        self.ledger.close(old, self.tx)
        return True

    def _supersede(self, old: EdgeVersion, keep: list[Interval]) -> list[EdgeVersion]:
        """Close ``old`` and append its surviving valid-time pieces with its own provenance."""
        closed = self._end_belief(old)
        fact = Fact(old.src, old.rel, old.dst, old.valid_from, old.valid_to, old.evidence, old.confidence,
                    old.phrase)
        provenance = Provenance(old.authority, old.source_record, old.source_version, old.detected_at)
        supersedes = (old.edge_id,) if closed else old.supersedes
        if not closed and old.origin == old.edge_id:
            # A fresh assertion's origin piece, discarded: the fact's pieces keep pointing at it until
            # ``finish``, when every cut of the event is known, names one that survives.
            self._orphans.append(old.edge_id)
        pieces = [self._append(fact, piece, provenance, old.origin, supersedes, old.event_id) for piece in keep]
        if not closed:
            self._replaced[old.edge_id] = pieces
        return pieces

    def _surviving(self, version: EdgeVersion) -> list[EdgeVersion]:
        """What this event leaves of a version it appended: the version, or the surviving pieces a later
        assertion of the event cut it into (none when one covered it whole)."""
        if (self.tenant, version.edge_id) in self.ledger.versions:
            return [version]
        return [survivor for piece in self._replaced.get(version.edge_id, ()) for survivor in self._surviving(piece)]

    def _settle_origins(self) -> None:
        """Each fact whose origin piece a later assertion of the event discarded takes its first surviving
        piece (in order of appending) as origin, so a fact's pieces share one origin among the stored
        versions, whatever the event cut. The pieces are not committed yet: they are settled, not edited."""
        for orphan in self._orphans:
            pieces = [v for v in self._appended if v.origin == orphan and (v.tenant, v.edge_id) in self.ledger.versions]
            for piece in pieces:
                self.ledger.settle_new(piece._replace(origin=pieces[0].edge_id))

    def _correct(self, cause: str, closed: list[EdgeVersion], appended: list[EdgeVersion]) -> None:
        """Collect what an operation closed and appended; ``finish`` emits one correction per event."""
        self._closed += closed
        self._appended += appended

    def _restate(self, lineage: str, fact: Fact, provenance: Provenance, joins: bool = False) -> None:
        self._restated[(lineage, fact.valid_from, fact.valid_to)] = None
        self._restating = provenance
        self._authority = provenance.authority
        if joins:
            self._joined[lineage] = fact.evidence

    def _revoked(self, provenance: Provenance) -> bool:
        """Whether the version was revoked: its statements from before are withdrawn, so saying the
        fact again is a statement of its own."""
        return self.ledger.version_revoked(self.tenant, provenance.authority, provenance.record or "",
                                           provenance.version)

    def _carry_joins(self) -> None:
        """Other records that joined a fact its record now words otherwise still state the edge: their
        statements of the replaced stretch join the new fact (``statements.carried_filings``)."""
        versions = self.ledger.versions
        for replaced, new_ids, interval in self._carried:
            survivors = [versions[(self.tenant, i)] for i in new_ids if (self.tenant, i) in versions]
            if survivors:  # settled: a later assertion of the event may have cut the first piece
                for filing in carried_filings(self._statements(), replaced, survivors[0].origin, interval, self.tx):
                    self.ledger.add_filing(filing)

    def finish(self, cause: str) -> None:
        """File what the event's record stated again, and emit the event's conflicts and its correction:
        the committed beliefs it closed and what it appended that survives."""
        if self._orphans:
            self._settle_origins()
            self._orphans = []
        if self._carried:
            self._carry_joins()
        if self._restating is not None or self._ended:
            source = self._restating
            record = (source.record or "") if source is not None else self._ending or ""
            self.ledger.add_filing(Filing(self.tenant, self._authority, record, self.tx,
                                          source.version if source is not None else None, self.event_id,
                                          tuple(self._restated), joined=tuple(self._joined.items()),
                                          ended=tuple(self._ended)))
        if self._orphans:
            self._settle_origins()
        for review_id, pieces, rivals in self._conflicts:
            self._flag_surviving_conflict(review_id, [s for new in pieces for s in self._surviving(new)], rivals)
        if not self._closed:
            return
        closed = [v for v in self._closed if v.tx_from != self.tx]
        if not closed:
            return
        appended = [v for v in self._appended if (v.tenant, v.edge_id) in self.ledger.versions]
        self.ledger.corrections.append(
            Correction(
                self._next_id("c"),  # correction_id
                self.tenant,
                self.event_id,
                self.tx,  # tx_at
                cause,
                tuple(v.edge_id for v in closed),  # old_edge_ids
                tuple(v.edge_id for v in appended),  # new_edge_ids
            )
        )
        self.ledger.counts.corrections += 1

    # -- operations ------------------------------------------------------------------------------------
    def assert_fact(self, fact: Fact, provenance: Provenance) -> None:
        single_valued = self.vocabulary.is_single_valued(fact.rel)
        if single_valued:
            believed, competing = self._believed_and_competing(fact, provenance.authority)
        else:
            believed, competing = self._believed(fact.src, fact.rel, fact.dst, provenance.authority, fact.phrase), []
        # What the fact says that is not believed as stated yet. The rest stays as it is: restating
        # a stretch already believed from the same record, with the same content, is free.
        others: list[EdgeVersion] = []
        unsaid = [fact.interval]
        for old in believed:
            if _says(old, fact, provenance):
                if overlaps((old.valid_from, old.valid_to), fact.interval) and (
                        old.source_version != provenance.version or self._revoked(provenance)
                        or self.ledger.lineage_joins(self.tenant, old.origin)):
                    # Another version, or the same one after a revocation or an end (ends are filed
                    # only for facts another record joined): a statement of its own.
                    self._restate(old.origin, fact, provenance)
                unsaid = [part for piece in unsaid for part in subtract(piece, (old.valid_from, old.valid_to))]
            elif old.source_record != provenance.record and overlaps((old.valid_from, old.valid_to), fact.interval):
                # Another record of the source states the same edge: it joins the fact, whatever its wording.
                self._restate(old.origin, fact, provenance, joins=True)
                unsaid = [part for piece in unsaid for part in subtract(piece, (old.valid_from, old.valid_to))]
            else:
                others.append(old)
        if not unsaid:
            return
        closed: list[EdgeVersion] = []
        appended: list[EdgeVersion] = []
        carried: list[EdgeVersion] = []
        for old in others:
            if overlaps((old.valid_from, old.valid_to), fact.interval):
                closed.append(old)
                appended += self._supersede(old, subtract((old.valid_from, old.valid_to), fact.interval))
                if self.ledger.lineage_joins(self.tenant, old.origin):
                    carried.append(old)
        for old in competing:
            if old.authority == provenance.authority:
                closed.append(old)
                appended += self._supersede(old, subtract((old.valid_from, old.valid_to), fact.interval))
        supersedes = tuple([v.edge_id for v in closed if v.tx_from != self.tx]) if closed else ()
        pieces = []
        origin = None
        for interval in unsaid:  # the first piece is the fact's origin, the others descend from it
            new = self._append(fact, interval, provenance, origin, supersedes, self.event_id)
            origin = new.origin
            pieces.append(new)
        appended += pieces
        if carried and pieces:
            self._carried.append((carried, [piece.edge_id for piece in pieces], fact.interval))
        if single_valued:
            # Closing same-authority competitors changes no other authority's version, and what they
            # leave (and the new pieces) cannot compete: the rivals are the other authorities' competitors.
            self._flag_conflicts(pieces, [v for v in competing if v.authority != provenance.authority])
        self._correct("assert", closed, appended)

    def _believed_and_competing(self, fact: Fact, authority: str) -> tuple[list[EdgeVersion], list[EdgeVersion]]:
        """For a single-valued relationship: the believed versions of the fact's edge from ``authority``
        (as ``_believed``) and the believed competing values overlapping it, any authority."""
        # Speed: one read of the source's out-edges serves both; the edge's versions are among them.
        out = self.ledger.believed_out(self.tenant, fact.src, fact.rel)
        believed = sorted((v for v in out if v.dst == fact.dst and v.authority == authority), key=_canonical)
        competing = sorted(
            (v for v in out if v.dst != fact.dst and overlaps((v.valid_from, v.valid_to), fact.interval)),
            key=_canonical,
        )
        return believed, competing

    def _flag_conflicts(self, pieces: list[EdgeVersion], rivals: list[EdgeVersion]) -> None:
        """Note a conflict for ``finish``: a later assertion of the same event may still cut the pieces. Its
        review id is taken now, so every id this event derives is the same whatever comes of it."""
        if rivals:
            self._conflicts.append((self._next_id("r"), pieces, rivals))

    def _flag_surviving_conflict(self, review_id: str, survivors: list[EdgeVersion],
                                 rivals: list[EdgeVersion]) -> None:
        """Queue the conflict between what the event left of an asserted value and the rivals it still
        overlaps; nothing when the event replaced the value whole, or left none of it beside a rival."""
        rivals = [v for v in rivals if any(overlaps((v.valid_from, v.valid_to), (s.valid_from, s.valid_to))
                                           for s in survivors)]
        if not rivals:
            return
        self.ledger.review_items.append(conflict_item(review_id, self.event_id, self.tx, survivors, rivals))
        self.ledger.counts.conflicts_flagged += 1

    def retract(self, src: str, rel: str, dst: str, authority: str, stopped_at: int | None,
                phrase: str | None = None, record: str | None = None) -> None:
        """End the edge from ``stopped_at`` on: ``authority``'s versions of it, for ``other`` those with
        ``phrase`` (``None``: every wording). With ``record`` (a snapshot's omission), only that record's
        statements end: a piece another record states too keeps what that one says."""
        closed: list[EdgeVersion] = []
        appended: list[EdgeVersion] = []
        for old in self._believed(src, rel, dst, authority, phrase):
            if record is not None:
                joined = self.ledger.lineage_joins(self.tenant, old.origin)
                if joined or old.source_record != record:
                    if record == old.source_record or record in joined:
                        self._stop_stating(old, authority, record, stopped_at, closed, appended)
                    continue  # another record's fact, or one others state too: only this record's part ends
            affected, remainder = cut_from((old.valid_from, old.valid_to), stopped_at)
            if affected:
                closed.append(old)
                appended += self._supersede(old, [remainder] if remainder else [])
        self._correct("retract", closed, appended)

    def _stop_stating(self, old: EdgeVersion, authority: str, record: str, stopped_at: int | None,
                      closed: list[EdgeVersion], appended: list[EdgeVersion]) -> None:
        """``record`` no longer states ``old`` from ``stopped_at``; other records may: the piece keeps
        what any statement still holds, and the end is filed so that later reads cut the record's."""
        kept, touched = withdrawing([old], self._statements(), ended_from(record, stopped_at))
        if touched:
            self._ended[(old.origin, stopped_at)] = None
            self._ending, self._authority = record, authority
        for piece, parts in kept:
            closed.append(piece)
            appended += self._supersede(piece, parts)

    def revoke(self, versions: list[EdgeVersion], cause: str) -> None:
        """Never true: close the believed versions and append nothing."""
        closed = []
        for old in sorted(versions, key=_canonical):
            if old.tx_to is None:
                self._end_belief(old)
                closed.append(old)
        self._correct(cause, closed, [])

    def revoke_fact(self, pieces: list[EdgeVersion], named: EdgeVersion) -> None:
        """``named``'s record was wrong to state the fact: its statements of it are withdrawn, and the
        fact ends where no other record of the source states it."""
        record = named.source_record or ""
        if not self.ledger.lineage_joins(self.tenant, named.origin):
            self.revoke(pieces, "revoke")  # the record that made it is the only one that states it
            return

        kept, touched = withdrawing(pieces, self._statements(), withdrawn_by(record))
        if touched:
            self._ended[(named.origin, None)] = None
            self._ending, self._authority = record, named.authority
        self.withdraw(kept, "revoke")

    def _statements(self) -> StatementIndex:
        """One index an event: each record's filings are read once however many pieces it touches."""
        if self._index is None:
            self._index = StatementIndex(self.ledger, self.tenant)
        return self._index

    def withdraw(self, kept: list[tuple[EdgeVersion, list[Interval]]], cause: str) -> None:
        """A statement withdrawn: each believed version keeps only the parts (``kept``, never all of it)
        that its other statements still make; none left, it ends."""
        closed: list[EdgeVersion] = []
        appended: list[EdgeVersion] = []
        for old, parts in sorted(kept, key=lambda entry: _canonical(entry[0])):
            if old.tx_to is None:
                closed.append(old)
                appended += self._supersede(old, parts)
        self._correct(cause, closed, appended)


def _canonical(version: EdgeVersion) -> tuple[str, str]:
    return (version.dst, version.edge_id)


def _says(version: EdgeVersion, fact: Fact, provenance: Provenance) -> bool:
    """The version states what the fact states, from the same record: where they overlap, the fact
    is believed as stated already."""
    return (
        version.source_record == provenance.record
        and version.evidence == fact.evidence
        and version.confidence == fact.confidence
        and version.phrase == fact.phrase
    )
