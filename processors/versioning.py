"""Bi-temporal versioning: the rules that turn assertions, retractions and revocations into
appended edge versions and closed beliefs.

Versions are never updated or deleted. A change of belief closes the old version's transaction
interval (``tx_to = tx``) and appends what is now believed: the remainders of the old piece (with the
statements that state them) and the new fact. Every operation that closes a belief emits one
correction naming the closed and the appended edge ids.

A believed version records every statement (an assertion of a source record at a version) of it
(``processors.origins``): restating a believed stretch adds a statement and appends no version; only
what is not believed yet is appended, as one fact. A snapshot's omission, ``revoke`` and
``revoke_source`` end *their* statements; a version ends where no statement of its authority is left.

A logical edge is (src, rel, dst) *per authority* (source system): a source can retract only what it
asserted itself, and a single-valued relationship closes only competing values from the same
authority. A competing value from another authority is kept, and the conflict is flagged for review
rather than resolved by guessing. For ``other`` the source's wording (``phrase``) is part of the edge
too: different wordings are different relationships.
"""

from __future__ import annotations

import hashlib
from typing import Final

from processors.intervals import Interval, cut_from, overlaps, subtract
from processors.model import Correction, EdgeVersion, Origin, ReviewItem
from processors.origins import (
    Statements,
    clipped,
    covered,
    cut_from_on,
    explicit_of,
    intersection,
    live,
    origin_of,
    origins_of,
    span,
    uncovered,
    without,
)
from processors.pending import PendingLedger
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


def origin_id(event_id: str, index: int) -> str:
    """The id of an event's ``index``-th assertion as a statement: the event's alone (event ids are unique
    per tenant; the index follows the last ``#``). Not hashed: a digest cost 3 % of a load's instructions."""
    return f"{event_id}#{index}"


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
    """Where a statement comes from: the source system (its authority), record and version, and when the
    source detected it. Never changed."""

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

    def _next_id(self, prefix: str) -> str:
        """``derive_id(prefix, tenant, event_id, sequence)``. Speed: the event's part of the digest is
        hashed once and copied for each id; hashing in pieces gives the same digest as in one go."""
        self._sequence += 1
        if self._event_digest is None:
            self._event_digest = _digest(self.tenant, self.event_id, "")  # ends with the separator
        digest = self._event_digest.copy()
        digest.update(str(self._sequence).encode())
        return f"{prefix}{digest.hexdigest()}"

    def _believed(self, src: str, rel: str, dst: str, authority: str, phrase: str | None) -> list[EdgeVersion]:
        """The believed versions of one logical edge from ``authority``, in a canonical order, so ids and
        outputs never depend on batch boundaries. For ``other`` only those with ``phrase`` (``None``:
        every wording)."""
        believed = [v for v in self.ledger.believed_edge(self.tenant, src, rel, dst) if v.authority == authority]
        if rel == WORDED and phrase is not None:
            believed = [v for v in believed if v.phrase == phrase]
        if len(believed) > 1:
            believed.sort(key=_canonical)
        return believed

    def _append(self, fact: Fact, interval: Interval, provenance: Provenance, origin: str,
                supersedes: tuple[str, ...], event_id: str, origins: Statements = ()) -> EdgeVersion:
        """Append ``fact`` over ``interval``: statement ``origin``'s, stated by ``origins`` if it has others."""
        version = EdgeVersion(
            self._next_id("e"), self.tenant, fact.src, fact.rel, fact.dst,
            interval[0], interval[1],  # valid_from, valid_to
            self.tx, None,  # tx_from, tx_to
            provenance.authority, provenance.record, provenance.version,
            fact.evidence, fact.confidence,
            origin, tuple(sorted(supersedes)) if len(supersedes) > 1 else supersedes,
            event_id, provenance.detected_at, fact.phrase,
        )
        self.ledger.append(version)
        if origins:
            self.ledger.state(version, (), origins)
        return version

    def _explicit(self, version: EdgeVersion) -> Statements:
        """``version``'s statements once it has more than the one it was appended for, else ``()``."""
        return explicit_of(version, self.ledger.statements_of(version))

    def _end_belief(self, old: EdgeVersion, explicit: Statements) -> bool:
        """Close ``old`` (stored statements ``explicit``), or discard it if this transaction appended it (a
        belief interval [tx, tx) would be empty). Returns whether a committed belief was closed."""
        if old.tx_from == self.tx:
            self.ledger.discard_new(old)
            return False
        self.ledger.close(old, self.tx, explicit)
        return True

    def _supersede(self, old: EdgeVersion, keep: list[Interval], stating: list[Origin] | None = None,
                   explicit: Statements | None = None) -> list[EdgeVersion]:
        """Close ``old`` and append its pieces over ``keep``, each with the statements ``stating`` it
        (``None``: those that state ``old`` now; ``explicit``: its stored statements, when read already)."""
        if explicit is None:
            explicit = self._explicit(old)
        if stating is None and explicit:
            stating = live(explicit)
        closed = self._end_belief(old, explicit)
        supersedes = (old.edge_id,) if closed else old.supersedes
        pieces = [self._remainder(old, stretch, supersedes, stating) for stretch in keep]
        if not closed:
            self._replaced[old.edge_id] = pieces
        return pieces

    def _remainder(self, old: EdgeVersion, stretch: Interval, supersedes: tuple[str, ...],
                   stating: list[Origin] | None) -> EdgeVersion:
        """A piece of ``old`` over ``stretch`` stated by ``stating`` (``None``: the statement ``old`` was
        appended for), with the source fields of the first of them, ``old``'s own while it states it."""
        if stating is None:
            fact = Fact(old.src, old.rel, old.dst, None, None, old.evidence, old.confidence, old.phrase)
            provenance = Provenance(old.authority, old.source_record, old.source_version, old.detected_at)
            return self._append(fact, stretch, provenance, old.origin, supersedes, old.event_id)
        origins = clipped(stating, stretch, self.tx)
        first = next((o for o in origins if o.origin == old.origin), origins[0])  # old's own, while it states it
        if first is not origins[0]:
            origins = [first, *(o for o in origins if o is not first)]  # a version's first statement is its own
        fact = Fact(old.src, old.rel, old.dst, None, None, first.evidence, first.confidence, old.phrase)
        provenance = Provenance(old.authority, first.record, first.version, first.detected_at)
        own = len(origins) == 1 and span(first) == stretch  # that one statement over all of it: implicit
        return self._append(fact, stretch, provenance, first.origin, supersedes, first.event_id,
                            () if own else tuple(origins))

    def _settle(self, piece: EdgeVersion, explicit: Statements, origins: list[Origin], closed: list[EdgeVersion],
                appended: list[EdgeVersion]) -> None:
        """``piece``, stated by ``explicit``, now stated by ``origins``: kept if they state all of it, else
        closed and the stretches they state appended (``closed`` and ``appended`` take them)."""
        stating = live(origins)
        whole = (piece.valid_from, piece.valid_to)
        stretches = covered(whole, [span(origin) for origin in stating])
        if stretches == [whole]:
            self.ledger.state(piece, explicit, tuple(origins))
            return
        closed.append(piece)
        appended += self._supersede(piece, stretches, stating, explicit)

    def _surviving(self, version: EdgeVersion) -> list[EdgeVersion]:
        """What this event leaves of a version it appended: the version, or the surviving pieces a later
        assertion of the event cut it into (none when one covered it whole)."""
        if (self.tenant, version.edge_id) in self.ledger.versions:
            return [version]
        return [survivor for piece in self._replaced.get(version.edge_id, ()) for survivor in self._surviving(piece)]

    def _correct(self, cause: str, closed: list[EdgeVersion], appended: list[EdgeVersion]) -> None:
        """Collect what an operation closed and appended; ``finish`` emits one correction per event."""
        self._closed += closed
        self._appended += appended

    def finish(self, cause: str) -> None:
        """Emit the event's conflicts and its correction: the committed beliefs it closed and what it
        appended that survives."""
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
    def assert_fact(self, fact: Fact, provenance: Provenance, origin: str) -> None:
        """State ``fact`` as statement ``origin``: the pieces already believed where it overlaps them take
        it as an origin, and what is not believed yet is appended, as one fact."""
        single_valued = self.vocabulary.is_single_valued(fact.rel)
        if single_valued:
            believed, competing = self._believed_and_competing(fact, provenance.authority)
        else:
            believed, competing = self._believed(fact.src, fact.rel, fact.dst, provenance.authority, fact.phrase), []
        unsaid = [fact.interval]
        for old in believed:
            stretch = (old.valid_from, old.valid_to)
            overlap = intersection(stretch, fact.interval)
            if overlap is not None:
                unsaid = [part for piece in unsaid for part in subtract(piece, stretch)]
                self._state_on(old, overlap, fact, provenance, origin)
        if not unsaid:
            return
        closed: list[EdgeVersion] = []
        appended: list[EdgeVersion] = []
        for old in competing:
            if old.authority == provenance.authority:
                closed.append(old)
                appended += self._supersede(old, subtract((old.valid_from, old.valid_to), fact.interval))
        supersedes = tuple([v.edge_id for v in closed if v.tx_from != self.tx]) if closed else ()
        pieces = [self._append(fact, interval, provenance, origin, supersedes, self.event_id) for interval in unsaid]
        appended += pieces
        if single_valued:
            # Closing same-authority competitors changes no other authority's version, and what they
            # leave (and the new pieces) cannot compete: the rivals are the other authorities' competitors.
            self._flag_conflicts(pieces, [v for v in competing if v.authority != provenance.authority])
        self._correct("assert", closed, appended)

    def _state_on(self, piece: EdgeVersion, overlap: Interval, fact: Fact, provenance: Provenance,
                  origin: str) -> None:
        """Add the statement to ``piece`` over ``overlap``, except where a statement from the same record and
        version with the same evidence and confidence states it already."""
        record, version = provenance.record, provenance.version
        explicit = self._explicit(piece)
        if not explicit and piece.source_record == record and piece.source_version == version and (
                piece.evidence == fact.evidence and piece.confidence == fact.confidence):
            return  # Speed: stated so over all of it by the one statement it was appended for
        origins = list(origins_of(piece, explicit))
        # Speed: a restatement mostly comes from another version, and nothing states it so already.
        same = [span(o) for o in origins if o.record == record and o.version == version and o.tx_to is None
                and o.evidence == fact.evidence and o.confidence == fact.confidence]
        gaps = uncovered(overlap, same) if same else [overlap]
        origins += [origin_of(origin, record, version, self.event_id, fact.evidence, fact.confidence,
                              provenance.detected_at, gap[0], gap[1], self.tx, None) for gap in gaps]
        if gaps:
            self.ledger.state(piece, explicit, tuple(origins))

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
        """Note a conflict for ``finish`` (a later assertion of the event may cut the pieces), its review id
        taken now, so that every id the event derives is the same whatever comes of it."""
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
        value = survivors[0]  # every survivor is a piece of the same value
        self.ledger.review_items.append(
            ReviewItem(
                review_id=review_id,
                tenant=self.tenant,
                event_id=self.event_id,
                tx_at=self.tx,
                category="cardinality_conflict",
                reason=(
                    f"{value.src} {value.rel} has competing values from different sources "
                    f"({value.authority}: {value.dst}; "
                    + "; ".join(f"{v.authority}: {v.dst}" for v in rivals)
                    + "); both are kept until a person decides"
                ),
                details={
                    "new_edge_id": value.edge_id,
                    "new_edge_ids": [v.edge_id for v in survivors],
                    "competing_edge_ids": [v.edge_id for v in rivals],
                },
            )
        )
        self.ledger.counts.conflicts_flagged += 1

    def retract(self, src: str, rel: str, dst: str, authority: str, stopped_at: int | None,
                phrase: str | None = None) -> None:
        """End the edge from ``stopped_at`` on, whoever of ``authority`` states it: its versions of it, for
        ``other`` those with ``phrase`` (``None``: every wording)."""
        closed: list[EdgeVersion] = []
        appended: list[EdgeVersion] = []
        for old in self._believed(src, rel, dst, authority, phrase):
            affected, remainder = cut_from((old.valid_from, old.valid_to), stopped_at)
            if affected:
                closed.append(old)
                appended += self._supersede(old, [remainder] if remainder else [])
        self._correct("retract", closed, appended)

    def omit(self, src: str, rel: str, dst: str, authority: str, stopped_at: int | None, phrase: str | None,
             record: str) -> None:
        """A snapshot of ``record`` no longer states the edge: the record's statements of it end from
        ``stopped_at`` on, and the edge with them where no other statement states it."""
        closed: list[EdgeVersion] = []
        appended: list[EdgeVersion] = []
        for piece in self._believed(src, rel, dst, authority, phrase):
            explicit = self._explicit(piece)
            origins = cut_from_on(origins_of(piece, explicit), record, stopped_at, self.tx)
            if origins is not None:
                self._settle(piece, explicit, origins, closed, appended)
        self._correct("retract", closed, appended)

    def revoke(self, pieces: list[EdgeVersion], cause: str, origin: str | None = None, record: str | None = None,
               source_version: str | None = None) -> None:
        """Never stated: the statement ``origin`` (``revoke``), or else those from ``record`` at
        ``source_version`` (``revoke_source``; ``None``: any), end on ``pieces``. A piece ends where no
        other statement states it, and nothing is appended for them."""
        closed: list[EdgeVersion] = []
        appended: list[EdgeVersion] = []
        for piece in sorted(pieces, key=_canonical):
            if piece.tx_to is None:
                explicit = self._explicit(piece)
                origins = without(origins_of(piece, explicit), self.tx, origin, record, source_version)
                if origins is not None:
                    self._settle(piece, explicit, origins, closed, appended)
        self._correct(cause, closed, appended)


def _canonical(version: EdgeVersion) -> tuple[str, str]:
    return (version.dst, version.edge_id)
