"""The shipped path-evaluation set (``tests/data/eval/paths.jsonl``), derived from the generator's own
ground truth: the CMDB rows, groups, policies and revocations ``streams.feeds.organisation`` makes,
before any adapter or ledger code sees them. Expected answers come from a brute-force walk over that
truth, never from the query engine.

The walk states the world as the rows say it: a CI's owner at valid time V, as known at K, is the
group of the last row recorded by K whose effective time (``sys_updated_on``) is at or before V (a row
states its group from its effective time on); a link holds from its row's time until its deletion,
and a link a revocation declared never true holds at no time once the revocation is known. Questions
the rows leave open are not asked: owners through a group with no HR team (resolved by name, or
parked for review), and walks through a pair of CIs that two link rows join (one row's deletion ends
the edge, the other says it stands).

``python -m tests.support.eval_set`` writes the file; ``tests/streams/cli/test_eval_set.py`` checks
that it is what this module derives and that the ledger's figures on it do not regress.
"""

from __future__ import annotations

import random
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from streams.feeds.organisation import HOST_CLASSES, START, Organisation

PARAMETERS = {"services": 100, "people": 120, "days": 40, "seed": 7}
CASES = Path(__file__).resolve().parents[1] / "data" / "eval" / "paths.jsonl"
DEPENDS = ("Depends on::Used by", "Uses::Used by")
ROOMY = {"max_paths": 2000, "max_expansions": 20000, "max_degree": 2000, "max_evidence_tokens": 1_000_000}
"""Ceilings far above what any case reads: the set measures answers, not truncation."""
OWNERSHIP_AND_POLICY = "owned_by:out,governed_by:out,requires:out"


def micros(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000)


def iso(instant: int) -> str:
    return datetime.fromtimestamp(instant / 1_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def evening(day: int) -> int:
    """20:00 on a day of the history: after that day's rows (08:00-09:00), before the next day's."""
    return micros(START + timedelta(days=day, hours=12))


@dataclass
class Ci:
    entity: str
    host: bool
    names: list[tuple[int, str]] = field(default_factory=list)
    owners: list[tuple[int, int, str | None]] = field(default_factory=list)
    """(recorded at, effective from, group), in the order the rows were recorded."""


@dataclass
class Link:
    parent: str
    child: str
    created: int
    deleted: int | None = None
    revoked: int | None = None


@dataclass
class Truth:
    cis: dict[str, Ci] = field(default_factory=dict)
    teams: dict[str, str | None] = field(default_factory=dict)
    """Group sys_id -> its HR team's entity, None for a group known by name alone."""
    links: dict[str, Link] = field(default_factory=dict)
    governed: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    requires: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def known(self, sys_id: str, known_at: int) -> bool:
        return self.cis[sys_id].names[0][0] <= known_at

    def owner_certain(self, sys_id: str) -> bool:
        return all(group is None or self.teams[group] is not None for _, _, group in self.cis[sys_id].owners)

    def owner(self, sys_id: str, valid_at: int, known_at: int) -> str | None:
        rows = [group for tx, effective, group in self.cis[sys_id].owners if tx <= known_at and effective <= valid_at]
        return self.teams[rows[-1]] if rows and rows[-1] is not None else None

    def name(self, sys_id: str, known_at: int) -> str:
        return [name for tx, name in self.cis[sys_id].names if tx <= known_at][-1]

    def dependents(self, valid_at: int, known_at: int) -> dict[str, set[str]]:
        """child -> the parents that depend on it."""
        found: dict[str, set[str]] = defaultdict(set)
        for link in self.links.values():
            alive = link.created <= known_at and link.created <= valid_at and not (
                link.deleted is not None and link.deleted <= known_at and link.deleted <= valid_at)
            if alive and not (link.revoked is not None and link.revoked <= known_at):
                found[link.child].add(link.parent)
        return found

    def doubled(self) -> set[tuple[str, str]]:
        rows: dict[tuple[str, str], int] = defaultdict(int)
        for link in self.links.values():
            rows[(link.parent, link.child)] += 1
        return {pair for pair, count in rows.items() if count > 1}


def entity_of(sys_id: str, cls: str) -> str:
    kind = ("Service" if cls.startswith("cmdb_ci_service") else "Application" if cls == "cmdb_ci_appl"
            else "Host" if cls in HOST_CLASSES else "Component")
    return f"{kind}:cmdb:{sys_id}"


def truth_of(organisation: Organisation) -> Truth:
    truth = Truth()
    revoked = {event["source"]["record"].split("/", 1)[1]: micros(when) for when, event in organisation.corrections}
    for day in organisation.cmdb_days:
        for raw in day:
            row = orjson.loads(raw)
            table, at, after = row["source"]["table"], row["ts_ms"] * 1000, row["after"]
            if table == "sys_user_group":
                team = after["u_hr_team_id"]
                truth.teams[after["sys_id"]] = f"Team:hr:{team}" if team else None
            elif table == "cmdb_ci":
                ci = truth.cis.setdefault(after["sys_id"], Ci(entity_of(after["sys_id"], after["sys_class_name"]),
                                                              after["sys_class_name"] in HOST_CLASSES))
                effective = micros(datetime.strptime(after["sys_updated_on"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC))
                ci.names.append((at, after["name"]))
                ci.owners.append((at, effective, after["support_group"]))
            elif row["op"] == "d":
                if row["before"]["sys_id"] in truth.links:  # a runs_on or other link is not walked
                    truth.links[row["before"]["sys_id"]].deleted = at
            elif after["type"] in DEPENDS:
                truth.links[after["sys_id"]] = Link(after["parent"], after["child"], at,
                                                    revoked=revoked.get(after["sys_id"]))
    for event in organisation.policy_events:
        for fact in event.get("assert", []):
            src, dst = f"{fact['src']['type']}:{fact['src']['id']}", f"{fact['dst']['type']}:{fact['dst']['id']}"
            (truth.governed if fact["rel"] == "governed_by" else truth.requires)[src].add(dst)
    return truth


def simple_paths(anchor: str, step: Any, depth: int) -> list[tuple[str, ...]]:
    """Every simple path from ``anchor`` of 1..depth hops, ``step(node)`` giving the next nodes."""
    paths, frontier = [], [(anchor,)]
    for _ in range(depth):
        frontier = [(*path, nxt) for path in frontier for nxt in sorted(step(path[-1])) if nxt not in path]
        paths += frontier
    return paths


def expectation(paths: list[tuple[str, ...]]) -> dict[str, Any]:
    """Results are the paths' ends; a result reached by exactly one path must come with that path."""
    ends: dict[str, list[tuple[str, ...]]] = defaultdict(list)
    for path in paths:
        ends[path[-1]].append(path)
    return {"results": sorted(ends), "paths": sorted(list(only[0]) for only in ends.values() if len(only) == 1)}


def case(number: int, name: str, entity: str, valid_at: int, known_at: int, hops: int, expect: dict[str, Any],
         **params: Any) -> dict[str, Any]:
    query: dict[str, Any] = {"name": name, "entity": entity}
    if params:
        query["params"] = params
    query["limits"] = ROOMY
    return {"id": f"{name}-{number:03d}", "tenant": "acme", "query": query, "valid_at": iso(valid_at),
            "known_at": iso(known_at), "hops": hops, "expect": expect}


def build_cases(organisation: Organisation) -> list[dict[str, Any]]:
    """The set, deterministic in the organisation (and so in ``PARAMETERS``)."""
    truth, rng = truth_of(organisation), random.Random(PARAMETERS["seed"])
    end = evening(organisation.days - 1)
    owned = sorted(s for s, ci in truth.cis.items() if not ci.host and truth.owner_certain(s))
    late = sorted(s for s in owned if any(eff < tx - 86_400_000_000 for tx, eff, _ in truth.cis[s].owners))
    cases: list[dict[str, Any]] = []
    names_ever: dict[str, set[str]] = defaultdict(set)
    for sys_id, ci in truth.cis.items():
        for _, name in ci.names:
            names_ever[" ".join(name.lower().split())].add(sys_id)

    def anchor(sys_id: str, known_at: int, alias: bool) -> str:
        name = truth.name(sys_id, known_at)
        return name if alias and len(names_ever[" ".join(name.lower().split())]) == 1 else truth.cis[sys_id].entity

    # owners-of, 1 hop: now; the world at a past valid time as known now; what was believed then.
    for number, sys_id in enumerate(rng.sample(owned, 50) + late[:25] + rng.sample(owned, 25)):
        if number < 50:
            valid = known = end
        elif number < 75:
            valid, known = evening(rng.randrange(1, organisation.days - 1)), end
        else:
            valid = known = evening(rng.randrange(0, organisation.days - 1))
        team = truth.owner(sys_id, valid, known)
        expect = {"results": [team], "paths": [[truth.cis[sys_id].entity, team]]} if team else {"abstain": True}
        cases.append(case(number, "owners-of", anchor(sys_id, known, number % 3 == 0), valid, known, 1, expect))

    doubled = truth.doubled()

    def dependents_case(number: int, sys_id: str, depth: int, valid: int, known: int) -> dict[str, Any] | None:
        parents = truth.dependents(valid, known)
        paths = simple_paths(sys_id, lambda node: parents.get(node, set()), depth)
        if not paths or len(paths) > 300 or any(sys_id in parents.get(p[-1], ()) for p in paths) or any(
                pair in doubled for p in paths for pair in zip(p[1:], p, strict=False)):
            return None
        if depth > 1 and max(len(p) for p in paths) <= depth:
            return None  # a deeper question that a shallower one would answer as well
        entities = [tuple(truth.cis[n].entity for n in p) for p in paths]
        return case(number, "dependents-of", anchor(sys_id, known, number % 4 == 0), valid, known,
                    max(len(p) - 1 for p in entities), expectation(entities), depth=depth)

    bogus_day = organisation.days // 2
    plan = [(1, end, end, 30), (2, end, end, 30), (3, end, end, 12),
            (1, evening(bogus_day), evening(bogus_day), 8), (2, evening(10), end, 8)]
    number = 0
    candidates = sorted(s for s, ci in truth.cis.items() if not ci.host)
    for depth, valid, known, wanted in plan:
        made = 0
        for sys_id in rng.sample(candidates, len(candidates)):
            built = dependents_case(number, sys_id, depth, valid, known)
            if built is not None and made < wanted:
                cases.append(built)
                number, made = number + 1, made + 1
    # The faulty import's links, believed on its day and never true once revoked: the same question twice.
    for link in sorted(truth.links.values(), key=lambda k: k.created):
        if link.revoked is not None and (link.parent, link.child) not in doubled and number < 120:
            for known in (evening(bogus_day), end):
                built = dependents_case(number, link.child, 1, evening(bogus_day), known)
                if built is not None:
                    cases.append(built)
                    number += 1

    # traverse: owner, its policies and their roles: 2 and 3 hops.
    governed = [s for s in owned if truth.governed.get(truth.owner(s, end, end) or "", set())]
    for number, sys_id in enumerate(rng.sample(governed, min(len(governed), 45))):
        valid = known = end
        start, team = truth.cis[sys_id].entity, truth.owner(sys_id, end, end)
        hops = 2 if number < 20 else 3
        step = {start: {team}, team: truth.governed[team]}
        for policy in truth.governed[team]:
            step[policy] = truth.requires[policy] if hops == 3 else set()
        paths = simple_paths(start, lambda node, step=step: step.get(node, set()), hops)
        edges = ",".join(OWNERSHIP_AND_POLICY.split(",")[:hops])
        cases.append(case(number, "traverse", anchor(sys_id, known, number % 5 == 0), valid, known, hops,
                          expectation(paths), edges=edges))

    # Abstention: nothing to answer for.
    hosts = sorted(s for s, ci in truth.cis.items() if ci.host)
    before = micros(START - timedelta(days=1))
    for number in range(40):
        if number < 10:
            entity, known = f"Service:cmdb:ci{900000 + number}", end  # no such CI
        elif number < 20:
            entity, known = f"no such service {number:04d}", end  # no such name
        elif number < 30:
            entity, known = truth.cis[rng.choice(owned)].entity, before  # asked as known before the CMDB loaded
        else:
            entity, known = truth.cis[hosts[number % len(hosts)]].entity, end  # hosts have no owner
        cases.append(case(number, "abstain", entity, known, known, 1, {"abstain": True}))
        cases[-1]["query"]["name"] = "owners-of"
    assert len({c["id"] for c in cases}) == len(cases)
    return cases


def organisation() -> Organisation:
    return Organisation(PARAMETERS["services"], PARAMETERS["people"], PARAMETERS["days"],
                        PARAMETERS["seed"]).simulate()


if __name__ == "__main__":
    CASES.parent.mkdir(parents=True, exist_ok=True)
    built = build_cases(organisation())
    CASES.write_bytes(b"".join(orjson.dumps(c) + b"\n" for c in built))
    sys.stdout.write(f"{len(built)} cases -> {CASES}\n")
