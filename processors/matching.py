"""Fuzzy matching of an entity name against blocked candidates, with abstention.

A name-only mention that no alias names exactly is compared only with the aliases that sit next to it
in the alias table, never with every entity (*sorted-neighbourhood blocking*). The table is ordered by
each name's core written as one word (``sort_key``), and kept a second time ordered by that word
reversed: a slip late in a name keeps it beside its entity in the first order, an early one in the
second, and a reordered person's name is looked up by a rotation of its words (``probes``). The
neighbours of a name are read, ``NEIGHBOURS`` on each side of each probe: a lookup costs a few seeks
whatever the organisation's size, and an alias costs one row more than its exact-name row. The
*core* of a name drops the words that decorate
service names without telling them apart (``svc-``, ``-service``, ``-prod``, ``the``), the same
words glued to a CamelCase name (``ReportingService``), and a plural or ``-ing`` ending, so that
``reports``, ``reports-service``, ``ReportingService``, ``the reporting pipeline`` and
``svc-reports-prod`` all have the core ``report``.

``best_match`` scores each candidate of the mention's type with rapidfuzz on the cores and answers
one of three ways: **match** when the best entity scores at least ``MATCH_AT`` and no other entity
comes within ``MARGIN`` of it; **new** when nothing reaches ``NEW_BELOW``; **abstain** otherwise
(the event waits for review). A wrong merge is worse than a missed one, so the band between the
two thresholds is wide and a close second sends the mention to a person.

Pure: the candidates come in, nothing is read here.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Final, Literal, NamedTuple

from rapidfuzz.distance import Indel
from rapidfuzz.fuzz import token_sort_ratio
from rapidfuzz.process import extract

MATCH_AT: Final = 90.0
"""The lowest score that matches: one slip in a name of some ten letters still does."""
NEW_BELOW: Final = 75.0
"""Below this, the name is of another entity (a new one)."""
MARGIN: Final = 5.0
"""Two entities scoring within this of each other are alike: abstain rather than pick one."""
SHARED_BONUS: Final = 10.0
"""Added to the score of a candidate that already has the fact the mention comes with (same
relationship, same entity at the other end): a shared neighbour lifts a near match over the line, or
apart from an alike rival that lacks it."""
SHOWN: Final = 5
"""Candidates a match or an abstention reports (for a reviewer), best first."""

AFFIX_WORDS: Final = frozenset({
    "the", "svc", "srv", "service", "services", "prod", "production", "staging", "stg", "pipeline", "team",
})
"""Words that decorate a name without telling entities apart: dropped from its core (unless nothing is left)."""
GLUED_SUFFIXES: Final = ("service", "svc", "pipeline", "team")
"""The same words glued to a CamelCase name, normalised to one word (``reportingservice``)."""
NEIGHBOURS: Final = 3
"""Aliases of the wanted type read on each side of each probe. What the neighbourhood leaves out is
what ``eval resolution``'s blocking recall measures (all of it on the shipped set from 2 on)."""
PLACEHOLDER_REACH: Final = 2
"""Placeholders read on each side of each probe when a new entity looks for those it may absorb: a
placeholder it absorbs differs from one of its names by a slip, so sits right beside it."""
SCANNED: Final = 3 * NEIGHBOURS
"""Rows read on a side at most, of any type: the cost of a lookup stays bounded in a tenant where
another type's names crowd the wanted one's."""
ROTATIONS: Final = 2
"""Word orders probed: the name, and the name with its first word moved last ('martin alice' finds
'alice martin')."""

MatchKind = Literal["match", "new", "abstain"]


class Candidate(NamedTuple):
    """An alias that a blocking key found: the entity it names, its type and the normalised alias."""

    entity_id: str
    type: str
    alias: str


class Scored(NamedTuple):
    entity_id: str
    score: float
    alias: str
    """The candidate's alias that scored best."""


class Match(NamedTuple):
    """What ``best_match`` decided: ``entity_id`` is set only for ``match``; ``candidates`` are the
    best-scoring entities (one entry each), best first, for a reviewer or an evaluation."""

    kind: MatchKind
    entity_id: str | None
    score: float
    candidates: tuple[Scored, ...]


def entity_type_of(entity_id: str) -> str:
    return entity_id.split(":", 1)[0]


def _stem(token: str) -> str:
    """A plural or ``-ing`` ending off: 'reports' and 'reporting' both become 'report'."""
    if len(token) > 5 and token.endswith("ing"):
        return token[:-3]
    if len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
        return token[:-1]
    return token


def _unglued(token: str) -> str:
    for suffix in GLUED_SUFFIXES:
        if token.endswith(suffix) and len(token) - len(suffix) >= 3:
            return token[: -len(suffix)]
    return token


@lru_cache(maxsize=1 << 16)
def _plain(normalised: str) -> tuple[str, ...]:
    """The name's tokens without decorating words and glued suffixes, not stemmed."""
    tokens = normalised.split()
    kept = [token for token in tokens if token not in AFFIX_WORDS] or tokens
    return tuple(_unglued(token) for token in kept)


@lru_cache(maxsize=1 << 16)  # Speed: aliases recur (every commit of an alias computes its keys).
def core_of(normalised: str) -> tuple[str, ...]:
    """The tokens that identify a normalised name (``identity.normalise_name``): decorating words off,
    a glued suffix off, each token stemmed. A name made only of such words keeps them."""
    return tuple(_stem(token) for token in _plain(normalised))


@lru_cache(maxsize=1 << 16)  # Speed: computed at every commit of an alias and every exact lookup.
def sort_key(normalised: str) -> str:
    """The key the alias table orders a name by: its core as one word ('svc-reports-prod' -> 'report')."""
    return "".join(core_of(normalised))


def suffix_key(normalised: str) -> str:
    """The key of the second ordering: ``sort_key`` reversed, so names that end alike sit together."""
    return sort_key(normalised)[::-1]


@lru_cache(maxsize=1 << 16)
def probes(normalised: str) -> tuple[tuple[str, ...], str]:
    """Where a lookup seeks: in the ``sort_key`` order, the first ``ROTATIONS`` rotations of the core's
    words; in the reversed order, the ``suffix_key``."""
    core = core_of(normalised)
    rotations = dict.fromkeys("".join(core[i:] + core[:i]) for i in range(min(len(core), ROTATIONS)))
    return tuple(rotations) or ("",), suffix_key(normalised)


_FORMS: Final[dict[str, tuple[str, str, str]]] = {}
"""``_forms`` already worked out. Speed: a plain dict, as every candidate of every lookup asks (an
``lru_cache`` call costs several times a native dict's get)."""
_FORMS_HELD: Final = 1 << 16


def _forms(normalised: str) -> tuple[str, str, str]:
    """What ``similarities`` compares: the core as one word, unstemmed as one word, the core's words."""
    forms = _FORMS.get(normalised)
    if forms is None:
        if len(_FORMS) >= _FORMS_HELD:
            _FORMS.clear()
        core = core_of(normalised)
        forms = _FORMS[normalised] = ("".join(core), "".join(_plain(normalised)), " ".join(core))
    return forms


def similarities(name: str, others: list[str]) -> list[float]:
    """0..100: how alike ``name`` is to each of ``others`` (normalised names), judged on their cores (as
    one word, and as sorted tokens, so word order does not count), and unstemmed (a glued name's words
    are not stemmed). Each measure runs over all of them in rapidfuzz's C loop (a Python call per
    pair cost more than the comparisons)."""
    compact, plain, words = _forms(name)
    forms = [_forms(other) for other in others]
    best = [0.0] * len(others)
    everyone = list(range(len(others)))
    # Speed: a name nothing was stemmed or unglued in scores unstemmed as it does stemmed, so against
    # another such name the second measure repeats the first and is skipped (most names are such).
    unstemmed = everyone if plain != compact else [i for i, form in enumerate(forms) if form[1] != form[0]]
    for at, query, scorer, scale, scored in ((0, compact, Indel.normalized_similarity, 100.0, everyone),
                                             (1, plain, Indel.normalized_similarity, 100.0, unstemmed),
                                             (2, words, token_sort_ratio, 1.0, everyone)):
        if not scored:
            continue
        for _, score, index in extract(query, [forms[i][at] for i in scored], scorer=scorer, limit=None):
            at_index = scored[index]
            best[at_index] = max(best[at_index], score * scale)
    return best


def best_match(entity_type: str | None, name: str, candidates: Iterable[Candidate],
               shared: frozenset[str] = frozenset()) -> Match:
    """Decide which of ``candidates`` the name ``name`` (normalised) of an entity of ``entity_type``
    names: match, new or abstain (see the module). Candidates of another type never match (a Team
    'Platform' is not a Service 'Platform'); ``entity_type`` None (a query anchor with no type) lets
    any type compete, so two alike of different types abstain. The entities in ``shared`` share a
    neighbour with the mention: ``SHARED_BONUS`` more, once their name alone is alike (``NEW_BELOW``)."""
    best: dict[str, tuple[float, str]] = {}  # entity id -> (its best score, the alias that scored it)
    # One alias may neighbour several probes: scored once (dict.fromkeys keeps the order, drops repeats).
    typed = [c for c in dict.fromkeys(candidates) if entity_type is None or c.type == entity_type]
    for candidate, score in zip(typed, similarities(name, [c.alias for c in typed]), strict=True):
        if score >= NEW_BELOW and candidate.entity_id in shared:
            score += SHARED_BONUS
        held = best.get(candidate.entity_id)
        if held is None or score > held[0]:
            best[candidate.entity_id] = (score, candidate.alias)
    # Best first, ties by entity id; only the shown few become ``Scored``.
    order = sorted([(-score, entity_id, alias) for entity_id, (score, alias) in best.items()])[:SHOWN]
    ranked = tuple([Scored(entity_id, -negated, alias) for negated, entity_id, alias in order])
    if not ranked or ranked[0].score < NEW_BELOW:
        return Match("new", None, ranked[0].score if ranked else 0.0, ranked)
    top = ranked[0]
    close_second = len(ranked) > 1 and ranked[1].score >= top.score - MARGIN
    if top.score >= MATCH_AT and not close_second:
        return Match("match", top.entity_id, top.score, ranked)
    # A reviewer is shown the plausible entities only: a neighbour read in passing may be nothing alike.
    return Match("abstain", None, top.score, tuple(s for s in ranked if s.score >= NEW_BELOW))
