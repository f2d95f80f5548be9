"""Generate a realistic event history: CMDB services and components, HR people and teams, policies,
with history, late corrections, retractions and power-law dependency degrees."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

START = datetime(2024, 1, 1, tzinfo=UTC)


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _date(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d")


def generate_events(n_events: int, n_entities: int, seed: int = 7, tenant: str = "acme",
                    simulated_clock: bool = True) -> Iterator[str]:
    """``n_events`` change events (each asserting or retracting one edge) over ``n_entities`` entities.

    About 60 % are new dependencies (targets drawn with a power law, so a few hubs get most), 20 %
    ownership changes (some backdated: late corrections), 10 % retractions, 10 % membership and
    policy edges. Clock events advance simulated transaction time by about a minute per 100 events.
    """
    rng = random.Random(seed)
    n_services = int(n_entities * 0.6)
    n_teams = max(10, n_entities // 100)
    n_people = int(n_entities * 0.3)
    n_policies = max(5, n_entities // 1000)
    now = START
    owners: dict[int, int] = {}
    deps: list[tuple[int, int]] = []
    for index in range(n_events):
        if simulated_clock and index % 100 == 0:
            now += timedelta(seconds=rng.randint(30, 90))
            yield json.dumps({"kind": "clock", "now": _iso(now)})
        roll = rng.random()
        detected = now - timedelta(seconds=rng.expovariate(1 / 30))
        event: dict = {"kind": "change", "event_id": f"gen-{index}", "tenant": tenant,
                       "detected_at": _iso(detected), "mode": "delta", "assert": [], "retract": []}
        if roll < 0.6:
            src = rng.randrange(n_services)
            dst = min(int(rng.paretovariate(1.2)) - 1, n_services - 1)
            if dst == src:
                dst = (dst + 1) % n_services
            event["source"] = {"system": "cmdb", "record": f"svc/S{src}", "version": str(index)}
            event["assert"].append({
                "src": {"type": "Service", "id": f"cmdb:S{src}", "name": f"service {src}"},
                "rel": "depends_on", "dst": {"type": "Service", "id": f"cmdb:S{dst}"},
                "valid_from": _date(now - timedelta(days=rng.randint(0, 400))),
                "evidence": f"S{src} calls S{dst}"})
            deps.append((src, dst))
        elif roll < 0.8:
            src = rng.randrange(n_services)
            team = rng.randrange(n_teams)
            backdate = rng.randint(0, 60) if src in owners else rng.randint(100, 700)
            event["source"] = {"system": "cmdb", "record": f"svc/S{src}", "version": str(index)}
            event["assert"].append({
                "src": {"type": "Service", "id": f"cmdb:S{src}"}, "rel": "owned_by",
                "dst": {"type": "Team", "id": f"hr:T{team}", "name": f"team {team}"},
                "valid_from": _date(now - timedelta(days=backdate)), "evidence": f"owner group T{team}"})
            owners[src] = team
        elif roll < 0.9 and deps:
            src, dst = deps[rng.randrange(len(deps))]
            event["source"] = {"system": "cmdb", "record": f"svc/S{src}", "version": str(index)}
            event["retract"].append({"src": {"type": "Service", "id": f"cmdb:S{src}"}, "rel": "depends_on",
                                     "dst": {"type": "Service", "id": f"cmdb:S{dst}"}, "valid_from": _date(now)})
        elif rng.random() < 0.7:
            person = rng.randrange(n_people)
            event["source"] = {"system": "hr", "record": f"emp/E{person}", "version": str(index)}
            event["assert"].append({
                "src": {"type": "Person", "id": f"hr:E{person}"}, "rel": "member_of",
                "dst": {"type": "Team", "id": f"hr:T{rng.randrange(n_teams)}"},
                "valid_from": _date(now - timedelta(days=rng.randint(0, 30)))})
        else:
            team = rng.randrange(n_teams)
            event["source"] = {"system": "policy", "record": f"team/T{team}", "version": str(index)}
            event["assert"].append({
                "src": {"type": "Team", "id": f"hr:T{team}"}, "rel": "governed_by",
                "dst": {"type": "Policy", "id": f"pol:P{rng.randrange(n_policies)}"}, "valid_from": "2024-01-01"})
        yield json.dumps(event)


def end_of_history(n_events: int) -> datetime:
    """An upper bound for the simulated clock after ``n_events`` (for picking query times)."""
    return START + timedelta(seconds=90 * (n_events // 100 + 1))


def tenants_interleaved(per_tenant: int, entities: int, tenants: tuple[str, ...]) -> list[str]:
    """``generate_events`` for each tenant (wall-clock events, a seed each), one tenant's event after
    another's: every input partition gets events from the start of a stream on."""
    streams = [list(generate_events(per_tenant, entities, seed=i, tenant=t, simulated_clock=False))
               for i, t in enumerate(tenants)]
    return [line for group in zip(*streams, strict=True) for line in group]
