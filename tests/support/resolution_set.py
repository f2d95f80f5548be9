"""The shipped entity-resolution set: ``tests/data/eval/resolution_events.jsonl`` (the organisation the
mentions are resolved against, for ``edgeledger load``) and ``tests/data/eval/resolution.jsonl`` (the
labelled mentions, for ``edgeledger eval resolution``).

The labels say what a careful person reading the mention would say, never what the matcher does: a
typo, a decorated or CamelCase name, a reordered person's name is its entity; a first name that two
people share, or a name two entities hold, is ``abstain``; a service the organisation does not run is
``new``. Adversarial on purpose: the reports service under five names, two vendor companies both called
Acme (recorded as Applications: the default ontology has no Company type), people sharing a first
name, a renamed team, a Team and a Service both called Platform, two services one letter apart, typos.

``python -m tests.support.resolution_set`` writes both files; deterministic (a seeded random picks the
typos). ``tests/streams/cli/test_resolution_set.py`` checks they are what this module writes and that
the ledger meets its targets on them.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import orjson

DATA = Path(__file__).resolve().parents[1] / "data" / "eval"
EVENTS = DATA / "resolution_events.jsonl"
LABELS = DATA / "resolution.jsonl"
TENANT = "acme"

SERVICES = [
    "reports", "billing", "payment gateway", "ledger exporter", "settlement connector", "identity provider",
    "search indexer", "notification hub", "order router", "inventory sync", "fraud scoring", "customer profile",
    "pricing engine", "shipment tracker", "audit trail", "feature flags", "session store", "email dispatcher",
    "invoice renderer", "invoice reminder", "tax calculator", "recommendation engine", "catalog importer",
    "image resizer", "metrics gateway", "log shipper", "backup scheduler", "access broker", "consent manager",
    "currency converter", "loyalty points", "platform",
]
TEAMS = ["Platform", "Analytics", "Payments", "Data Engineering", "Security", "Mobile", "Growth",
         "Site Reliability", "Support Tooling", "Core Infra", "Billing Operations", "Identity"]
RENAMED = ("Core Infra", "Foundations")
PEOPLE = ["Alice Martin", "Alice Moreau", "Bob Chen", "Bob Okafor", "Carol Diaz", "David Kim", "Eve Laurent",
          "Frank Ito", "Grace Nwosu", "Hana Sato", "Ivan Petrov", "Julia Costa", "Karim Haddad", "Lena Fischer",
          "Marco Rossi", "Nina Berg", "Omar Aziz", "Priya Raman", "Rosa Lima", "Sam Taylor", "Sam Patel"]
VENDORS = [("V-ACME-UK", "Acme"), ("V-ACME-US", "Acme"), ("V-GLOBEX", "Globex"), ("V-INITECH", "Initech"),
           ("V-UMBRELLA", "Umbrella Health")]
NEW_SERVICES = ["quantum scheduler", "reports archive", "billing reconciler", "payroll", "chat relay",
                "warehouse planner", "video transcoder", "sms gateway", "address validator", "map tiles",
                "survey builder", "ticket triage", "claims intake", "badge printer", "calendar sync"]
NEW_PEOPLE = ["Tom Becker", "Alice Novak", "Uma Iyer", "Victor Hugo Silva", "Wen Li"]
NEW_TEAMS = ["Legal Engineering", "Procurement", "Developer Experience"]


def sid(index: int) -> str:
    return f"cmdb:S{index:03d}"


def tid(index: int) -> str:
    return f"hr:T{index:02d}"


def pid(index: int) -> str:
    return f"hr:E{index:03d}"


def camel(name: str) -> str:
    return "".join(word.capitalize() for word in name.split())


def typo(name: str, rng: random.Random) -> str:
    """One slip a person makes: two letters swapped, one dropped or doubled, inside a word of 5+ letters."""
    words = name.split()
    at = max(range(len(words)), key=lambda i: (len(words[i]), -i))
    word = words[at]
    if len(word) < 5:
        return name
    i = rng.randrange(1, len(word) - 2)
    kind = rng.choice(("swap", "drop", "double"))
    if kind == "swap":
        word = word[:i] + word[i + 1] + word[i] + word[i + 2:]
    elif kind == "drop":
        word = word[:i] + word[i + 1:]
    else:
        word = word[:i] + word[i] + word[i:]
    words[at] = word
    return " ".join(words)


def _mention(entity_type: str, system_id: str | None = None, name: str | None = None) -> dict[str, Any]:
    return {"type": entity_type, **({"id": system_id} if system_id else {}), **({"name": name} if name else {})}


def events() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"kind": "clock", "now": "2026-03-01T09:00:00Z"}]
    n = 0

    def change(system: str, record: str, assertion: dict[str, Any]) -> None:
        nonlocal n
        n += 1
        out.append({"kind": "change", "event_id": f"{system}-{n:04d}", "tenant": TENANT,
                    "source": {"system": system, "record": record, "version": "1"},
                    "detected_at": "2026-03-01T08:00:00Z", "mode": "delta", "assert": [assertion]})

    for index, name in enumerate(TEAMS):
        change("hr", f"team/{index}", {"src": _mention("Team", tid(index), name), "rel": "governed_by",
                                       "dst": _mention("Policy", "grc:P-CHANGE", "change policy")})
    for index, name in enumerate(SERVICES):
        change("cmdb", f"ci/{index}", {"src": _mention("Service", sid(index), name), "rel": "owned_by",
                                       "dst": _mention("Team", tid(index % len(TEAMS)))})
    for index, name in enumerate(PEOPLE):
        change("hr", f"emp/{index}", {"src": _mention("Person", pid(index), name), "rel": "member_of",
                                      "dst": _mention("Team", tid(index % len(TEAMS)))})
    for index, (vendor, name) in enumerate(VENDORS):
        change("procurement", f"vendor/{vendor}", {
            "src": _mention("Service", sid(index)), "rel": "other", "phrase": "bought from",
            "dst": _mention("Application", f"crm:{vendor}", name)})
    out.append({"kind": "clock", "now": "2026-04-01T09:00:00Z"})
    core = TEAMS.index(RENAMED[0])
    change("hr", f"team/{core}", {"src": _mention("Team", tid(core), RENAMED[1]), "rel": "governed_by",
                                  "dst": _mention("Policy", "grc:P-CHANGE")})
    aliases = [(f"Service:{sid(0)}", "svc-reports"), (f"Service:{sid(2)}", "pgw"),
               (f"Service:{sid(5)}", "idp")]
    aliases += [(f"Person:{pid(i)}", name.lower().replace(" ", ".") + "@acme.example")
                for i, name in enumerate(PEOPLE)]
    for number, (entity, alias) in enumerate(aliases):
        out.append({"kind": "alias", "event_id": f"alias-{number:03d}", "tenant": TENANT, "entity": entity,
                    "alias": alias, "actor": "catalogue-sync"})
    return out


def labels() -> list[dict[str, Any]]:
    rng = random.Random(34)
    found: list[dict[str, Any]] = []

    def label(entity_type: str, expected: str, name: str | None = None, system_id: str | None = None) -> None:
        found.append({"tenant": TENANT, "mention": _mention(entity_type, system_id, name), "expected": expected})

    for index, name in enumerate(SERVICES):
        entity = f"Service:{sid(index)}"
        label("Service", entity, system_id=sid(index))
        label("Service", entity, name)
        label("Service", entity, f"{name.replace(' ', '-')}-service")
        label("Service", entity, camel(name) + "Service")
        label("Service", entity, f"svc-{name.replace(' ', '-')}-prod")
        label("Service", entity, typo(name, rng))
        if len(name.replace(" ", "")) >= 10:
            label("Service", entity, typo(camel(name), rng))
    reports = "Service:" + sid(0)
    for name in ("reports", "reports-service", "ReportingService", "the reporting pipeline", "svc-reports-prod",
                 "Reports Service"):
        label("Service", reports, name)
    for index, name in enumerate(TEAMS):
        entity = f"Team:{tid(index)}"
        label("Team", entity, system_id=tid(index))
        label("Team", entity, name)
        label("Team", entity, f"{name} team")
        label("Team", entity, name.upper())
        label("Team", entity, typo(name, rng))
    core = f"Team:{tid(TEAMS.index(RENAMED[0]))}"
    label("Team", core, RENAMED[1])
    label("Team", core, "Foundations Team")
    label("Team", core, "Core Infrastructure")
    label("Team", "Team:" + tid(TEAMS.index("Data Engineering")), "Data Eng")
    label("Team", "Team:" + tid(TEAMS.index("Site Reliability")), "SRE")
    label("Team", f"Team:{tid(0)}", "Platform")  # the Team, not the Service of the same name
    label("Service", f"Service:{sid(SERVICES.index('platform'))}", "Platform")
    for index, name in enumerate(PEOPLE):
        entity = f"Person:{pid(index)}"
        first, last = name.split(" ", 1)
        label("Person", entity, system_id=pid(index))
        label("Person", entity, name)
        label("Person", entity, f"{last}, {first}")
        label("Person", entity, name.lower().replace(" ", ".") + "@acme.example")
        label("Person", entity, typo(name, rng))
    for first in ("Alice", "Bob", "Sam"):
        label("Person", "abstain", first)
    for vendor, name in VENDORS:
        label("Application", "abstain" if name == "Acme" else f"Application:crm:{vendor}", name)
        label("Application", f"Application:crm:{vendor}", system_id=f"crm:{vendor}")
    label("Application", "abstain", "ACME")
    for name in NEW_SERVICES:
        label("Service", "new", name)
        label("Service", "new", f"svc-{name.replace(' ', '-')}")
    for name in NEW_PEOPLE:
        label("Person", "new", name)
    for name in NEW_TEAMS:
        label("Team", "new", name)
    return found


def jsonl(items: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(item) + b"\n" for item in items)


def main() -> None:
    EVENTS.write_bytes(jsonl(events()))
    LABELS.write_bytes(jsonl(labels()))
    sys.stdout.write(f"wrote {EVENTS} and {LABELS}\n")


if __name__ == "__main__":
    main()
