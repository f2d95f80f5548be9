"""A brute-force reference model of the ledger's beliefs, written from the spec, not from the code.

Valid time is cut into *segments* by a fixed, finite set of boundary instants ``b0 < b1 < ...``:
``(-inf, b0), [b0, b1), ..., [bn, +inf)``. Every instant a history mentions is a boundary, so any
believed set of valid-time instants is a set of segments. For each key (src, rel, dst, authority,
phrase) -- the phrase is the source's wording of an ``other`` edge, ``None`` for every other
relationship -- the model keeps a map ``segment -> Provenance``: the record, version, evidence and
confidence of the assertion that currently explains that segment, and its *origin* (which
assertion it came from). Operations only set or delete segments; there is no interval arithmetic to get wrong.
A *piece* (what the ledger stores as one believed version) is a maximal run of consecutive
segments of one key with the same origin.

The rules, per authority A. Each believed segment has statements, (record, version) pairs
(``stated_by``). An assertion by record R sets its interval's segments to itself, except those
already believed that R does not now say otherwise (another record's, or R's with the same evidence
and confidence): those keep their provenance and gain R's statement (where R says its own otherwise,
the other records' statements stay with the new provenance). For a single-valued relationship it
deletes them from A's other values. A retraction from t deletes [t, +inf), whichever record of A
explains the segments (of an ``other`` edge: the keys of the retraction's phrase, or of every phrase
when it names none). A snapshot of record R withdraws from ``detected_at`` R's statements of the
edges R said before and omits now (see ``SnapshotRule``). revoke withdraws the statements of one
origin's record from that origin's segments; revoke_source withdraws the statements of its system,
narrowed to a record and a version when the event names them. A segment ends when no statement of it
is left. A re-delivered event id changes nothing; a malformed line or an event naming an edge
outside the ontology (or an unknown edge id, or an ``other`` assertion without a phrase) changes
nothing either, but takes a tx.

Each event that is not a clock setting or a re-delivery takes the next transaction time,
``max(clock, previous + 1)``, and the model records a full copy of its beliefs after it. A query
``(valid_at, known_at)`` reads the last copy with ``tx <= known_at`` (none: nothing is known) and
returns every key whose segment containing ``valid_at`` is believed, with its record.

Origins: the model names an assertion ``"<event_id>#<index>"``. A revoke names a ledger edge id,
so the driver teaches the model which ledger origin is which model origin (``learn_origin``) by
matching believed pieces on (key, interval) after each event; the correspondence must be one to
one, and every inconsistency is recorded in ``origin_conflicts``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

Key = tuple[str, str, str, str, str | None]
"""(src, rel, dst, authority, phrase)."""
Edge = tuple[str, str, str, str | None]
"""(src, rel, dst, phrase): what a record claims."""
Fact = tuple[str, str, str, str, str | None, str | None]
"""What a query returns per believed fact: (src, rel, dst, authority, phrase, source record)."""
Outcome = Literal["applied", "dead_lettered", "duplicate"]

SINGLE_VALUED = frozenset({"owned_by"})
WORDED = "other"
"""The relationship whose edges are told apart by their phrase as well."""
SIGNATURES = frozenset(
    {("Service", "depends_on", "Service"), ("Service", "owned_by", "Team"), ("Service", WORDED, "Team")}
)
"""The (src type, rel, dst type) triples of this model's universe; an event using another is rejected."""


# -- events, already decoded (the test renders each one to its JSON line) --------------------------------
@dataclass(frozen=True)
class Assert:
    src: str
    rel: str
    dst: str
    valid_from: int | None
    valid_to: int | None
    evidence: str = ""
    confidence: float = 1.0
    phrase: str | None = None


@dataclass(frozen=True)
class Retract:
    src: str
    rel: str
    dst: str
    valid_from: int | None
    phrase: str | None = None
    """For ``other``: the one wording to retract; ``None`` retracts them all."""


def edge_of(item: Assert | Retract) -> Edge:
    """The edge an assertion or retraction names: the phrase counts only for ``other``."""
    return item.src, item.rel, item.dst, item.phrase if item.rel == WORDED else None


def retracts_edge(retraction: Retract, edge: Edge) -> bool:
    """Whether the retraction names this edge: for ``other`` without a phrase, every wording."""
    named = edge_of(retraction)
    return named == edge or (edge[1] == WORDED and retraction.phrase is None and named[:3] == edge[:3])


@dataclass(frozen=True)
class Change:
    event_id: str
    system: str
    record: str | None
    version: str | None
    detected_at: int
    snapshot: bool
    asserts: tuple[Assert, ...] = ()
    retracts: tuple[Retract, ...] = ()


@dataclass(frozen=True)
class Revoke:
    event_id: str
    target_origin: str | None
    """The ledger origin of the named edge id; ``None`` when the id names no edge."""


@dataclass(frozen=True)
class RevokeSource:
    event_id: str
    system: str
    record: str | None
    version: str | None


@dataclass(frozen=True)
class Clock:
    now: int


@dataclass(frozen=True)
class Malformed:
    """A line that fails decoding or schema validation."""

    why: str


Event = Change | Revoke | RevokeSource | Clock | Malformed


@dataclass(frozen=True)
class Provenance:
    record: str | None
    version: str | None
    evidence: str
    confidence: float
    origin: str


Beliefs = dict[Key, dict[int, Provenance]]


@dataclass(frozen=True)
class Snapshot:
    tx: int
    event_id: str | None
    """The event that took this transaction time; ``None`` for a line that could not be read."""
    beliefs: Beliefs


SnapshotRule = Literal["claims", "believed"]
"""What a snapshot of record R omits, hence retracts from its ``detected_at``:

* ``claims`` (the spec): the edges R claims -- added by R's delta assertions, removed by R's delta
  retractions, replaced wholesale by R's previous snapshot -- that this snapshot does not assert;
* ``believed`` (the rule docs/semantics.md states, which the ledger follows): the edges of which
  some still-believed segment has a statement by R, that this snapshot does not assert.

Either way only R's statements are withdrawn: a segment another record states stays.
"""


@dataclass
class ReferenceLedger:
    boundaries: list[int]
    snapshot_rule: SnapshotRule = "claims"
    beliefs: Beliefs = field(default_factory=dict)
    claims: dict[tuple[str, str], frozenset[Edge]] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    clock: int = 0
    snapshots: list[Snapshot] = field(default_factory=list)
    dead_letter_txs: list[int] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    """One event id per assertion of a single-valued fact that another authority contradicts."""
    stated_by: dict[tuple[Key, int], frozenset[tuple[str | None, str | None]]] = field(default_factory=dict)
    """The (record, version)s that state a segment: its first statement's; each later version of that
    record that asserted it again unchanged; each version of another record of the source that asserted
    the edge there. A revocation or a snapshot's omission removes statements; the segment ends with the
    last one."""
    origin_alias: dict[str, str] = field(default_factory=dict)
    origin_owner: dict[str, str] = field(default_factory=dict)
    origin_conflicts: list[str] = field(default_factory=list)

    @classmethod
    def over(cls, instants: Iterable[int], snapshot_rule: SnapshotRule = "claims") -> ReferenceLedger:
        return cls(sorted(set(instants)), snapshot_rule)

    @property
    def last_tx(self) -> int | None:
        return self.snapshots[-1].tx if self.snapshots else None

    # -- valid time as segments ---------------------------------------------------------------------------
    def segment(self, instant: int) -> int:
        return bisect_right(self.boundaries, instant)

    def span(self, valid_from: int | None, valid_to: int | None) -> range:
        for bound in (valid_from, valid_to):
            if bound is not None and bound not in self.boundaries:
                raise ValueError(f"instant {bound} is not one of the model's boundaries")
        start = 0 if valid_from is None else self.segment(valid_from)
        stop = len(self.boundaries) + 1 if valid_to is None else self.segment(valid_to)
        return range(start, stop)

    def interval(self, segments: range) -> tuple[int | None, int | None]:
        start = None if segments.start == 0 else self.boundaries[segments.start - 1]
        stop = None if segments.stop > len(self.boundaries) else self.boundaries[segments.stop - 1]
        return start, stop

    @staticmethod
    def pieces(segments: dict[int, Provenance]) -> Iterator[tuple[range, Provenance]]:
        """Maximal runs of consecutive segments with the same provenance (hence the same origin)."""
        runs: list[tuple[int, int, Provenance]] = []
        for index in sorted(segments):
            if runs and runs[-1][1] == index and runs[-1][2] == segments[index]:
                runs[-1] = (runs[-1][0], index + 1, segments[index])
            else:
                runs.append((index, index + 1, segments[index]))
        for start, stop, provenance in runs:
            yield range(start, stop), provenance

    # -- processing ---------------------------------------------------------------------------------------
    def apply(self, event: Event) -> Outcome:
        if isinstance(event, Clock):
            self.clock = event.now
            return "applied"
        if isinstance(event, Malformed) or (
            isinstance(event, Change) and event.snapshot and event.record is None
        ):
            self.dead_letter_txs.append(self._tick(None))
            return "dead_lettered"
        if event.event_id in self.seen:
            return "duplicate"
        self.seen.add(event.event_id)
        tx = self._tick(event.event_id)
        if not self._applicable(event):
            self.dead_letter_txs.append(tx)
            return "dead_lettered"
        match event:
            case Change():
                self._change(event)
            case Revoke():
                self._revoke(event)
            case RevokeSource():
                self._revoke_source(event)
        copy = {key: dict(segments) for key, segments in self.beliefs.items() if segments}
        self.snapshots[-1] = Snapshot(tx, event.event_id, copy)
        return "applied"

    def _tick(self, event_id: str | None) -> int:
        last = self.snapshots[-1] if self.snapshots else None
        tx = self.clock if last is None else max(self.clock, last.tx + 1)
        self.snapshots.append(Snapshot(tx, event_id, last.beliefs if last else {}))
        return tx

    @staticmethod
    def _applicable(event: Change | Revoke | RevokeSource) -> bool:
        if isinstance(event, Change):
            edges: list[Assert | Retract] = [*event.asserts, *event.retracts]
            worded = all(a.phrase for a in event.asserts if a.rel == WORDED)
            return worded and all((e.src.split(":")[0], e.rel, e.dst.split(":")[0]) in SIGNATURES for e in edges)
        if isinstance(event, Revoke):
            return event.target_origin is not None
        return True

    def _remove(self, key: Key, segments: Iterable[int], record: str | None = None) -> None:
        """Delete ``key``'s segments; given a ``record``, only that record's statements of them, and a
        segment no statement is left of."""
        believed = self.beliefs.get(key, {})
        for index in segments:
            if record is None:
                believed.pop(index, None)
            elif index in believed:
                self._withdraw(key, index, lambda stated: stated[0] == record)

    def _withdraw(self, key: Key, index: int, named: Callable[[tuple[str | None, str | None]], bool]) -> None:
        left = frozenset(stated for stated in self.stated_by[(key, index)] if not named(stated))
        self.stated_by[(key, index)] = left
        if not left:
            del self.beliefs[key][index]

    def _change(self, event: Change) -> None:
        for retraction in event.retracts:
            for key in self.beliefs:
                src, rel, dst, authority, phrase = key
                if authority == event.system and retracts_edge(retraction, (src, rel, dst, phrase)):
                    self._remove(key, self.span(retraction.valid_from, None))
        if event.record is not None:
            source = (event.system, event.record)
            asserted = frozenset(edge_of(a) for a in event.asserts)
            previously = self.claims.get(source, frozenset())
            if event.snapshot:
                says = previously if self.snapshot_rule == "claims" else self._believed_from(*source)
                for src, rel, dst, phrase in says - asserted:
                    key = (src, rel, dst, event.system, phrase)
                    self._remove(key, self.span(event.detected_at, None), event.record)
                self.claims[source] = asserted
            else:
                retracted = frozenset(e for e in previously if any(retracts_edge(r, e) for r in event.retracts))
                self.claims[source] = (previously - retracted) | asserted
        contradicted: list[tuple[Key, str]] = []
        for index, assertion in enumerate(event.asserts):
            origin = f"{event.event_id}#{index}"
            if self._assert(event, assertion, origin):
                src, rel, dst, phrase = edge_of(assertion)
                contradicted.append(((src, rel, dst, event.system, phrase), origin))
        # A conflict is judged on what the event leaves of the value: a later assertion of the same
        # event may have replaced it, and then nothing of it competes.
        for key, origin in contradicted:
            if self._still_contradicted(key, origin):
                self.conflicts.append(event.event_id)

    def _believed_from(self, system: str, record: str) -> frozenset[Edge]:
        return frozenset(
            (src, rel, dst, phrase)
            for (src, rel, dst, authority, phrase), segments in self.beliefs.items()
            if authority == system and any(stated[0] == record for index in segments
                                           for stated in self.stated_by[((src, rel, dst, authority, phrase), index)])
        )

    def _assert(self, event: Change, assertion: Assert, origin: str) -> bool:
        """Apply one assertion; whether it met another source's value of a single-valued relationship."""
        src, rel, dst, phrase = edge_of(assertion)
        key = (src, rel, dst, event.system, phrase)
        span = self.span(assertion.valid_from, assertion.valid_to)
        believed = self.beliefs.setdefault(key, {})
        stated = (event.record, assertion.evidence, assertion.confidence)
        unsaid = []
        for index in span:
            held = believed.get(index)
            if held is None or (held.record == event.record
                                and (held.record, held.evidence, held.confidence) != stated):
                unsaid.append(index)  # not believed, or its record now says it otherwise
            else:  # said already: by this record unchanged, or by another record of the source
                self.stated_by[(key, index)] |= {(event.record, event.version)}
        if not unsaid:
            return False
        provenance = Provenance(event.record, event.version, assertion.evidence, assertion.confidence, origin)
        for index in unsaid:
            # Where the record words its own fact otherwise, the other records' statements stay.
            others = (frozenset(s for s in self.stated_by[(key, index)] if s[0] != event.record)
                      if index in believed else frozenset())
            believed[index] = provenance
            self.stated_by[(key, index)] = others | {(event.record, event.version)}
        if assertion.rel not in SINGLE_VALUED:
            return False
        contradicted = False
        for (src, rel, dst, authority, phrase), other in self.beliefs.items():
            if (src, rel) != (assertion.src, assertion.rel) or dst == assertion.dst:
                continue
            if authority == event.system:
                self._remove((src, rel, dst, authority, phrase), span)
            elif any(index in other for index in unsaid):
                contradicted = True
        return contradicted

    def _still_contradicted(self, key: Key, origin: str) -> bool:
        """Whether what is left of the assertion ``origin`` overlaps another source's value of its
        single-valued relationship."""
        src, rel, dst, authority, _ = key
        left = {index for index, p in self.beliefs.get(key, {}).items() if p.origin == origin}
        return any(index in segments for (o_src, o_rel, o_dst, o_authority, _), segments in self.beliefs.items()
                   if (o_src, o_rel) == (src, rel) and o_dst != dst and o_authority != authority
                   for index in left)

    def _revoke(self, event: Revoke) -> None:
        assert event.target_origin is not None
        origin = self.origin_alias.get(event.target_origin)
        for key, believed in self.beliefs.items():
            for index in [i for i, p in believed.items() if p.origin == origin]:
                record = believed[index].record  # its record was wrong; another record's statement stands
                self._withdraw(key, index, lambda stated, record=record: stated[0] == record)

    def _revoke_source(self, event: RevokeSource) -> None:
        """The statements of the system, narrowed to a record and a version when named, are withdrawn;
        a segment ends when none is left."""
        def named(stated: tuple[str | None, str | None]) -> bool:
            return event.record in (None, stated[0]) and event.version in (None, stated[1])

        for key, believed in self.beliefs.items():
            if key[3] == event.system:
                for index in list(believed):
                    self._withdraw(key, index, named)

    # -- origins ------------------------------------------------------------------------------------------
    def learn_origin(
        self, ledger_origin: str, key: Key, valid_from: int | None, valid_to: int | None
    ) -> None:
        """The ledger believes a piece of ``key`` on this interval with this origin: find ours."""
        try:
            wanted = self.span(valid_from, valid_to)
        except ValueError:
            return
        for segments, provenance in self.pieces(self.beliefs.get(key, {})):
            if segments != wanted:
                continue
            known = self.origin_alias.setdefault(ledger_origin, provenance.origin)
            owner = self.origin_owner.setdefault(provenance.origin, ledger_origin)
            if known != provenance.origin or owner != ledger_origin:
                self.origin_conflicts.append(
                    f"ledger origin {ledger_origin} is model origin {known}, but its piece {key} "
                    f"{self.interval(segments)} comes from model origin {provenance.origin} "
                    f"(which is ledger origin {owner})"
                )

    # -- queries ------------------------------------------------------------------------------------------
    def beliefs_known_at(self, known_at: int) -> Beliefs:
        position = bisect_right([s.tx for s in self.snapshots], known_at)
        return self.snapshots[position - 1].beliefs if position else {}

    def answer(self, valid_at: int, known_at: int) -> Counter[Fact]:
        segment = self.segment(valid_at)
        return Counter(
            (*key, segments[segment].record)
            for key, segments in self.beliefs_known_at(known_at).items()
            if segment in segments
        )
