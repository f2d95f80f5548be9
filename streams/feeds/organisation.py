"""A simulated organisation's history, as its systems of record would feed it: a ServiceNow-shaped CMDB
(Debezium records, one file a day), an HR directory (a CSV export a week) and policy tables (contract
events, for which no feed mapping exists).

What happens in it, seeded and so reproducible: services, applications, databases and hosts with
dependencies drawn by preferential attachment (a few hubs most depend on); teams with leads and
members; approval roles and the policies that require them; day by day, updates that change nothing
the ledger reads, ownership transfers (some recorded weeks after they took effect), new and removed
links, renamed CIs, joiners, leavers, manager changes, a reorganisation, mistyped names corrected
later, support groups known only by a (sometimes mistyped) name, and a bogus import that is revoked.
``streams.cli.generate`` writes it and the contract events the adapters make of it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

START = datetime(2026, 1, 1, 8, tzinfo=UTC)
CLASSES = ("cmdb_ci_service", "cmdb_ci_service_discovered", "cmdb_ci_appl", "cmdb_ci_database")
HOST_CLASSES = ("cmdb_ci_linux_server", "cmdb_ci_win_server", "cmdb_ci_vm_instance")
WORDS = ("payments", "ledger", "settlement", "identity", "search", "billing", "catalogue", "pricing", "risk",
         "fraud", "notifications", "reporting", "onboarding", "checkout", "inventory", "analytics", "gateway")
FIRST = ("Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "John", "Margaret", "Ken", "Radia",
         "Leslie", "Tim", "Sophie", "Linus", "Anita", "Dennis", "Karen", "Niklaus", "Hedy")
LAST = ("Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Allen", "McCarthy", "Hamilton",
        "Thompson", "Perlman", "Lamport", "Berners-Lee", "Wilson", "Torvalds", "Borg", "Ritchie", "Jones")
ROLES = ("change-approver", "security-approver", "cab-member", "data-owner")
HR_COLUMNS = ("employee_id", "full_name", "email", "manager_id", "team_id", "team_name", "role", "effective_date")


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _misspell(rng: random.Random, text: str) -> str:
    """One transposed pair of letters: the typo a person makes typing a name."""
    at = rng.randrange(1, max(2, len(text) - 1))
    return text[:at - 1] + text[at] + text[at - 1] + text[at + 1:] if len(text) > 3 else text + text[-1]


@dataclass
class Organisation:
    services: int
    people: int
    days: int
    seed: int
    tenant: str = "acme"
    cmdb_days: list[list[bytes]] = field(default_factory=list)
    """Debezium records, one list per day."""
    exports: list[tuple[datetime, list[tuple[str, ...]]]] = field(default_factory=list)
    """HR exports: (taken at, rows without the header)."""
    policy_events: list[dict[str, Any]] = field(default_factory=list)
    corrections: list[tuple[datetime, dict[str, Any]]] = field(default_factory=list)
    """``revoke_source`` events, each with when it was sent."""

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.lsn = 0
        self.now = START
        self.today: list[bytes] = []
        self.cis: dict[str, dict[str, Any]] = {}
        self.links: dict[str, dict[str, Any]] = {}
        self.link_count = 0
        self.ordered: list[str] = []
        """CIs in the order they were made: the first become hubs."""
        self.callers: list[str] = []
        self.hosts: list[str] = []
        self.others: list[str] = []
        self.groups: dict[str, dict[str, Any]] = {}
        self.staff: dict[str, dict[str, Any]] = {}
        self.teams: list[tuple[str, str]] = []
        self.leads: dict[str, str] = {}
        self.first_hire = ""
        """Team -> its lead, whom its members report to; a team's first person leads it."""

    # -- the world at the start -------------------------------------------------------------------------
    def simulate(self) -> Organisation:
        self._teams_and_people()
        self._estate()
        self._policies()
        self._close_day()
        self._export()
        for day in range(1, self.days):
            self.now = START + timedelta(days=day)
            self._a_day(day)
            self._close_day()
            if day % 7 == 0 or day == self.days - 1:
                self._export()
        return self

    def _teams_and_people(self) -> None:
        rng = self.rng
        for index in range(max(3, self.people // 8)):
            self.teams.append((f"T-{index + 1:04d}", f"{WORDS[index % len(WORDS)].title()} {index // len(WORDS) + 1}"))
        for index in range(self.people):
            self._hire(f"E{index + 1:05d}", rng.choice(self.teams), "2025-01-01")
        for number, (team_id, name) in enumerate(self.teams):
            linked = number % 10 != 2  # one group in ten has no HR link: a Team known by name alone,
            group_name = name if linked or number % 20 != 12 else _misspell(rng, name)  # now and then mistyped
            self.groups[f"G{number + 1:04d}"] = {"sys_id": f"G{number + 1:04d}", "name": group_name,
                                                 "u_hr_team_id": team_id if linked else None}
            self._cmdb("sys_user_group", "r", None, self.groups[f"G{number + 1:04d}"])

    def _hire(self, employee: str, team: tuple[str, str], effective: str) -> None:
        rng = self.rng
        top = self.first_hire  # leads report to the first hire, who reports to no one
        self.first_hire = top or employee
        first, last = rng.choice(FIRST), rng.choice(LAST)
        name = f"{first} {last}" if rng.random() > 0.05 else _misspell(rng, f"{first} {last}")
        lead = self.leads.setdefault(team[0], employee)
        if lead == employee:
            lead = None
        self.staff[employee] = {
            "employee_id": employee, "full_name": name, "email": f"{first}.{last}.{employee}@acme.test".lower(),
            "manager_id": lead or top, "team_id": team[0], "team_name": team[1],
            "role": rng.choice(ROLES) if rng.random() < 0.08 else "", "effective_date": effective,
            "lead": lead is None, "true_name": f"{first} {last}"}

    def _estate(self) -> None:
        rng = self.rng
        groups = list(self.groups)
        for index in range(self.services + self.services // 2):
            cls = CLASSES[0] if index < self.services else rng.choice(CLASSES[1:])
            self._new_ci(f"ci{index + 1:06d}", cls, rng.choice(groups))
        for index in range(max(1, self.services // 3)):
            self._new_ci(f"host{index + 1:05d}", rng.choice(HOST_CLASSES), None)
        for _ in range(self.services * 3):
            self._new_link()

    def _new_ci(self, sys_id: str, cls: str, group: str | None) -> None:
        words = self.rng.sample(WORDS, 2)
        self.cis[sys_id] = {"sys_id": sys_id, "name": f"{words[0]} {words[1]} {sys_id[-4:]}", "sys_class_name": cls,
                            "support_group": group, "sys_updated_on": _stamp(self.now), "operational_status": 1,
                            "sys_mod_count": 0}
        self.ordered.append(sys_id)
        (self.hosts if cls in HOST_CLASSES else self.callers if cls in CLASSES[:3] else self.others).append(sys_id)
        self._cmdb("cmdb_ci", "r" if self.now == START else "c", None, self.cis[sys_id])

    def _new_link(self, bogus: bool = False) -> dict[str, Any] | None:
        rng = self.rng
        parent = self.cis[rng.choice(self.callers)]
        if parent["sys_class_name"] != "cmdb_ci_appl" or rng.random() < 0.6:
            # preferential attachment: the earliest CIs are the hubs most others depend on
            child = self.cis[self.ordered[min(int(rng.paretovariate(1.1)) - 1, len(self.ordered) - 1)]]
            kind = rng.choice(("Depends on::Used by", "Depends on::Used by", "Uses::Used by",
                               "Sends data to::Receives"))
            if child["sys_class_name"] in HOST_CLASSES or child is parent:
                return None
        else:
            child, kind = self.cis[rng.choice(self.hosts)], rng.choice(("Runs on::Runs", "Hosted on::Hosts"))
        link = {"sys_id": f"rel{self.link_count + 1:07d}", "parent": parent["sys_id"], "child": child["sys_id"],
                "type": kind}
        self.link_count += 1
        self.links[link["sys_id"]] = link
        self._cmdb("cmdb_rel_ci", "r" if self.now == START else "c", None, link, bogus=bogus)
        return link

    def _policies(self) -> None:
        rng = self.rng
        for index in range(max(2, self.services // 25)):
            policy = {"type": "Policy", "id": f"policy:P{index + 1:03d}", "name": f"{rng.choice(WORDS)} change policy"}
            roles = rng.sample(ROLES, rng.randint(1, 2))
            facts = [{"src": policy, "rel": "requires", "dst": {"type": "ApprovalRole", "id": f"role:{role}"},
                      "valid_from": "2025-01-01", "evidence": f"policy P{index + 1:03d} requires {role}"}
                     for role in roles]
            for team_id, _ in rng.sample(self.teams, min(len(self.teams), 3)):
                facts.append({"src": {"type": "Team", "id": f"hr:{team_id}"}, "rel": "governed_by", "dst": policy,
                              "valid_from": "2025-06-01", "evidence": f"team {team_id} under policy P{index + 1:03d}"})
            self.policy_events.append(self._policy_change(f"policy/P{index + 1:03d}", facts))

    def _policy_change(self, record: str, facts: list[dict[str, Any]]) -> dict[str, Any]:
        return {"kind": "change", "event_id": f"policy-{record}-{_ms(self.now)}", "tenant": self.tenant,
                "source": {"system": "policy", "record": record, "version": str(_ms(self.now))},
                "detected_at": self.now.isoformat().replace("+00:00", "Z"), "mode": "snapshot", "assert": facts}

    # -- a day ------------------------------------------------------------------------------------------
    def _a_day(self, day: int) -> None:
        rng = self.rng
        cis = list(self.cis)
        for _ in range(max(1, len(cis) // 50)):  # updates no rule reads: a touch of the record
            self._update_ci(rng.choice(cis), {"sys_mod_count": 1})
        for _ in range(max(1, len(cis) // 200)):  # ownership transfers, one in three recorded late
            late = timedelta(days=rng.randint(7, 30)) if rng.random() < 0.33 else timedelta(0)
            self._update_ci(rng.choice(cis), {"support_group": rng.choice(list(self.groups))}, late)
        if rng.random() < 0.3:  # a CI renamed, its name first mistyped and then put right
            sys_id = rng.choice(cis)
            right = f"{rng.choice(WORDS)} {rng.choice(WORDS)} {sys_id[-4:]}"
            self._update_ci(sys_id, {"name": _misspell(rng, right)})
            self._update_ci(sys_id, {"name": right})
        for _ in range(max(1, len(self.links) // 100)):
            if rng.random() < 0.5 and self.links:
                link = self.links.pop(rng.choice(list(self.links)))
                self._cmdb("cmdb_rel_ci", "d", link, None)
            else:
                self._new_link()
        if day == self.days // 2:
            self._bogus_import()
        self._people_change(day)
        self.policy_events.append({"kind": "heartbeat", "event_id": f"policy-heartbeat-{_ms(self.now)}",
                                   "tenant": self.tenant, "source": {"system": "policy"},
                                   "detected_at": self.now.isoformat().replace("+00:00", "Z")})

    def _update_ci(self, sys_id: str, changes: dict[str, Any], late: timedelta = timedelta(0)) -> None:
        before = self.cis[sys_id]
        if before["sys_class_name"] in HOST_CLASSES and "support_group" in changes:
            return
        after = {**before, **changes, "sys_mod_count": before["sys_mod_count"] + 1,
                 "sys_updated_on": _stamp(self.now - late)}
        self.cis[sys_id] = after
        self._cmdb("cmdb_ci", "u", before, after)

    def _bogus_import(self) -> None:
        """A batch of links a faulty import created, revoked the next day as never true."""
        for _ in range(max(2, self.services // 10)):
            link = self._new_link(bogus=True)
            if link is not None:
                self.corrections.append((self.now + timedelta(days=1), {
                    "kind": "revoke_source", "event_id": f"revoke-{link['sys_id']}", "tenant": self.tenant,
                    "source": {"system": "cmdb", "record": f"cmdb_rel_ci/{link['sys_id']}"},
                    "reason": f"created by the faulty import of {self.now:%Y-%m-%d}: never true"}))

    def _people_change(self, day: int) -> None:
        rng = self.rng
        effective = (self.now - timedelta(days=rng.randint(0, 5))).strftime("%Y-%m-%d")
        movers = rng.sample(list(self.staff), max(1, len(self.staff) // 10)) if day == self.days // 3 else []
        if rng.random() < 0.3:
            movers.append(rng.choice(list(self.staff)))
        for employee in movers:  # a reorganisation, or one person's move: new team, new manager
            person, team = self.staff[employee], rng.choice(self.teams)
            lead = self.leads[team[0]]
            if not person["lead"] and lead != employee:
                person.update(team_id=team[0], team_name=team[1], manager_id=lead, effective_date=effective)
        typo = next((p for p in self.staff.values() if p["full_name"] != p["true_name"]), None)
        if typo is not None and rng.random() < 0.2:  # a mistyped name put right
            typo.update(full_name=typo["true_name"], effective_date=effective)
        if rng.random() < 0.15 and len(self.staff) > 4:  # a leaver (never a lead: their people would dangle)
            leaver = rng.choice([p for p in self.staff if not self.staff[p]["lead"]] or [None])
            if leaver is not None:
                del self.staff[leaver]
        if rng.random() < 0.2:
            self._hire(f"E{self.people + day:05d}", rng.choice(self.teams), effective)

    # -- recording --------------------------------------------------------------------------------------
    def _cmdb(self, table: str, op: str, before: dict[str, Any] | None, after: dict[str, Any] | None,
              bogus: bool = False) -> None:
        self.lsn += 1
        at = _ms(self.now) + self.lsn % 3_600_000
        self.today.append(orjson.dumps({
            "before": before, "after": after, "op": op, "ts_ms": at, "transaction": None,
            "source": {"version": "2.7.0.Final", "connector": "postgresql", "name": "cmdb", "ts_ms": at - 15,
                       "snapshot": "true" if op == "r" else "false", "db": "cmdb", "schema": "public",
                       "table": table, "txId": 5000 + self.lsn // 3, "lsn": 30_000_000 + self.lsn * 64,
                       **({"import": "faulty"} if bogus else {})}}))

    def _close_day(self) -> None:
        self.cmdb_days.append(self.today)
        self.today = []

    def _export(self) -> None:
        rows = [tuple(str(person[column]) for column in HR_COLUMNS) for person in self.staff.values()]
        self.exports.append((self.now, sorted(rows)))
