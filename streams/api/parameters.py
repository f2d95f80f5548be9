"""What the HTTP API's operations are for, and what their query parameters accept, as its OpenAPI
document states it.

The parameter models (``schemas.query_params``) are shared with the CLI and trace replay, and type
instants, entity types and relationships as plain text. The API states more: an ISO-8601 pattern
for instants, and the closed sets of the ontology in force for ``types``, ``edges`` and ``rel``.
``ParameterRules`` holds both the schema keywords the document gets and the patterns each request
is held to, so that a request the document calls valid is answered and any other gets a 422.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from processors.query_requests import InvalidQuery
from schemas.ontology import Ontology

# -- descriptions: what each traversal is for, and what it is not for -----------------------------------------
COMMON = """

**Clocks.** `valid_at` is when in the world, `known_at` is as the ledger believed at that time; both
default to now. An answer for a past `known_at` never changes.

**Dispositions.** `answer`: there are results, each with a path of edge ids from the anchor (cite them).
`none`: the anchor resolved, nothing was truncated and the sources are fresh: as recorded, there is none.
`unknown` is **not** `none`: the anchor did not resolve, a ceiling was hit (`truncated`, `limits_hit`,
`frontier`) or a source it depends on was stale at `known_at`, on what had been heard from it by then
(`coverage.stale_sources`). `ambiguous`: the entity text
names several entities; ask again with one of `anchor.candidates`.

**Ceilings.** `max_depth`, `max_expansions` (edge records read), `max_paths`, `max_evidence_tokens`,
`max_degree` (per node). A hit ceiling is reported, never hidden; raise it or narrow the question.

The `X-Edgeledger-Cache` response header says whether the answer came from the cache (`hit`), was
computed (`miss`) or is not cacheable (`bypass`); a cached answer equals a computed one."""

DESCRIPTIONS: dict[str, tuple[str, str]] = {
    "owners-of": (
        "Operational owner of an entity",
        "Follows `owned_by` one hop out: the team or person that operates the entity, as each source "
        "authority (for example the CMDB) records it. Use it to find who runs X or whom to ask about it.\n\n"
        "Not for: who must approve a change (use approvals-required-for); reporting lines or team "
        "membership. Two owners can appear when two sources disagree: both are kept and the conflict waits "
        "in the review queue; do not pick one silently.",
    ),
    "dependents-of": (
        "What depends on an entity (blast radius)",
        "Follows `depends_on` in reverse, `depth` hops (1: direct dependents; more: transitive, each with its "
        "path). Use it for the impact of a change or an outage of X.\n\n"
        "Not for: what X itself depends on (use traverse with edges=depends_on:out), or ownership.",
    ),
    "approvals-required-for": (
        "Approval roles a change to an entity needs",
        "Dependents of X (reverse `depends_on`, `depth` hops) -> their `owned_by` teams -> `governed_by` "
        "policies -> `requires` approval roles; the answers are the roles. Use it to route a change for "
        "sign-off.\n\n"
        "Not for: the people who hold the roles (`holds_role` is not followed), nor ownership. The path starts "
        "at X's dependents: X's own owner's policies count only through a dependent. An empty answer with "
        "disposition `unknown` does not mean that no approval is needed.",
    ),
    "changed-between": (
        "Changes at an entity between two times",
        "Edges at X that started or ended in [from, to) in valid time (`axis=valid`, as known at `known_at`), "
        "or that the ledger appended or closed in that window (`axis=tx`: what was learned when); listed in "
        "`changes`. Use it for audits and for explaining why an answer moved.\n\n"
        "Not for: changes elsewhere in the graph (only X's own edges, one hop). `to` defaults to `known_at`. "
        "An empty window is refused (422): `from` must be before `to`, and before `known_at` when `to` is left "
        "out or the axis is `tx`.",
    ),
    "neighbourhood": (
        "Everything around an entity",
        "Every relationship of the ontology, both directions, `depth` hops. Use it to get oriented around an "
        "unfamiliar entity.\n\n"
        "Not for: answering a specific question: use the named traversal, which follows only what the question "
        "needs and can honestly answer `none`. Hubs hit `max_degree` quickly.",
    ),
    "traverse": (
        "General bounded walk over an allowlist of relationships",
        "Follows only the listed relationship:direction pairs (`edges=depends_on:in,owned_by:out`), up to "
        "`max_depth` hops; every node reached is an answer. Use it for questions the named traversals do not "
        "cover.\n\n"
        "Not for: unbounded exploration. A relationship outside the ontology is refused (422). `max_depth` is a "
        "ceiling here too: a path that reaches it is cut there and reported (`truncated`, `limits_hit: "
        "[max_depth]`, its last node in `frontier`), as the walk does not read past the ceiling to learn "
        "whether more lies beyond.",
    ),
}

HISTORY_DESCRIPTION = (
    "Every version of every edge at the entity, with both intervals (valid time and transaction time), "
    "as known at `known_at`; optionally only one relationship (`rel`) or only versions valid at `valid_at`. "
    "Use it for audits, to explain why an answer changed, or to find edge ids to revoke.\n\n"
    "Not for: the current answer to a question: closed and superseded versions are included. Not cached."
)


# -- ISO-8601 instants: a subset of what ``schemas.times.parse_instant`` takes, every text of which it takes ---------
_MONTH_DAY = ("(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])"
              "|(?:0[13-9]|1[0-2])-(?:29|30)"
              "|(?:0[13578]|1[02])-31)")
_LEAP_YEAR = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][48]|[13579][26]|[2468]0)00)"
_YEAR = "(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})"
"""0001-9999: the years of Python's calendar."""
_OFFSET_SAFE_YEAR = "(?:000[2-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])"
"""0002-9998: a time in year 1 or 9999 with an offset can fall outside the calendar once in UTC."""
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\.[0-9]{1,6})?)?"
_OFFSET = "(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"


def _date(year: str) -> str:
    return f"(?:{year}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"


INSTANT_PATTERN = f"^(?:{_date(_YEAR)}|{_date(_OFFSET_SAFE_YEAR)}T{_TIME}{_OFFSET})$"
"""An instant as the API takes it: a calendar date (midnight UTC), or a date and time with ``Z`` or an
offset. Only real dates match (29 February in leap years only)."""

INSTANT_FORMS = ("YYYY-MM-DD (midnight UTC), or YYYY-MM-DDThh:mm[:ss[.ffffff]] with a timezone, Z or ±hh:mm "
                 "(years 0002-9998)")
INSTANT_PARAMETERS = ("valid_at", "known_at", "from", "to", "since", "until")
DIRECTIONS = ("out", "in", "both")


_SYNTAX = re.compile(r"[.^$*+?()\[\]{}|\\/]")


def _one_of(names: Iterable[str]) -> str:
    """An alternation of ``names``, with only the characters that are syntax escaped: ``re.escape`` also
    escapes '-', ' ' and others, which a JSON-schema (ECMA-262, unicode mode) pattern may not."""
    return "(?:" + "|".join(_SYNTAX.sub(lambda m: "\\" + m.group(), name) for name in names) + ")"


def _comma_list(item: str) -> str:
    """Items separated by commas, spaces allowed around each (they are stripped)."""
    return f"^ *{item} *(?:, *{item} *)*$"


@dataclass(frozen=True)
class ParameterRules:
    """Per query parameter name: the JSON-schema keywords the document adds, the pattern a given value
    must match in full, and what to tell a caller whose value does not."""

    schemas: Mapping[str, dict[str, Any]]
    patterns: Mapping[str, re.Pattern[str]]
    expected: Mapping[str, str]

    def describe(self, document: dict[str, Any]) -> dict[str, Any]:
        """Add the keywords to every query parameter of ``document`` (an OpenAPI document) they apply to."""
        for path_item in document.get("paths", {}).values():
            for operation in path_item.values():
                for parameter in operation.get("parameters", []):
                    keywords = self.schemas.get(parameter["name"])
                    if parameter.get("in") == "query" and keywords is not None:
                        takes = f"Takes {self.expected[parameter['name']]}."
                        description = f"{parameter.get('description', '')} {takes}".lstrip()
                        parameter["schema"].update(keywords, description=description)
                        parameter["description"] = description
        return document

    def refused(self, given: Iterable[tuple[str, str]]) -> list[dict[str, str]]:
        """One item (``parameter``, ``message``) per given value its pattern does not match."""
        return [{"parameter": name, "message": f"{value!r} is not {self.expected[name]}"}
                for name, value in given if name in self.patterns and not self.patterns[name].fullmatch(value)]


def parameter_rules(ontology: Ontology) -> ParameterRules:
    """The rules for the API over a ledger written with ``ontology``."""
    types, relationships = ontology.entity_types, tuple(ontology.relationships)
    edge = f"{_one_of(relationships)}(?::{_one_of(DIRECTIONS)})?"
    patterns = {name: INSTANT_PATTERN for name in INSTANT_PARAMETERS}
    patterns["types"] = _comma_list(_one_of(types))
    patterns["edges"] = _comma_list(edge)
    schemas: dict[str, dict[str, Any]] = {name: {"pattern": pattern} for name, pattern in patterns.items()}
    schemas["rel"] = {"enum": list(relationships)}
    patterns["rel"] = f"^{_one_of(relationships)}$"
    expected = {name: f"an ISO-8601 instant: {INSTANT_FORMS}" for name in INSTANT_PARAMETERS}
    expected["types"] = f"a comma list of entity types, each one of: {', '.join(types)}"
    expected["edges"] = (f"a comma list of relationship:direction, direction one of {', '.join(DIRECTIONS)} "
                         f"(default both), relationship one of: {', '.join(relationships)}")
    expected["rel"] = f"a relationship, one of: {', '.join(relationships)}"
    # The schema states "^...$"; held to in full, as a JSON-schema validator matches it.
    compiled = {name: re.compile(pattern.removeprefix("^").removesuffix("$")) for name, pattern in patterns.items()}
    return ParameterRules(schemas, compiled, expected)


class UndocumentedValue(InvalidQuery):
    """Query parameters whose values the OpenAPI document does not allow."""

    def __init__(self, errors: list[dict[str, str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{e['parameter']}: {e['message']}" for e in errors))


def held_to(rules: ParameterRules) -> Callable[[Request], None]:
    """A route dependency refusing (``UndocumentedValue``) values outside the document."""

    def documented(request: Request) -> None:
        errors = rules.refused(request.query_params.multi_items())
        if errors:
            raise UndocumentedValue(errors)

    return documented
