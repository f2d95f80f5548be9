"""A generated organisation graph, loaded through the real ledger, exported for the reference engines.

``build_graph(GraphSpec(entities=...))`` writes change events to a JSONL file, loads them with
``streams.cli.load.load_files(..., simulated_clock=True)`` into a RocksDB store in a temporary
directory, then exports every stored edge version (the ``V`` table, through ``state.codec``) into

- a networkx ``MultiDiGraph`` (one edge per version, keyed by edge id, carrying both intervals), and
- a DuckDB table ``edges(edge_id, src, rel, dst, valid_from, valid_to, tx_from, tx_to)`` (BIGINT
  microseconds, NULL for an open bound).

The shape, per ``entities`` N (defaults: 200,000 entities, about 1,000,000 edge versions):

- ApprovalRole ``max(3, N/10,000)``, Policy ``max(4, N/1,000)``, Team ``max(8, N/100)``, Person 25 %;
  the rest are Services (60 %) and Components (40 %), the nodes ``depends_on`` joins.
- ``depends_on`` targets follow a power law: the node of rank r (a random permutation) is chosen with
  weight ``(r + HUB_OFFSET) ** -HUB_EXPONENT``, so a few hubs have in-degrees in the thousands while
  the median node has one or two. Sources are uniform. The graph has cycles.
- Every Service/Component gets an owner (``owned_by`` Team, backdated; about 10 % of the first
  dependencies have an unknown start, ``valid_from: null``; a few have a ``valid_to``), every Person a
  team, every Team one or two policies (``governed_by``), every Policy one to three roles (``requires``).
- Then, over simulated time, changes: ownership moves (recent and *late corrections* backdated by
  months), a second source (``sheet``) asserting competing owners, new and retracted dependencies,
  dependency start-date corrections, team moves, policy and role changes. Each closes beliefs and
  appends remainders, so most logical edges have several versions.

Transaction time comes from ``clock`` events (simulated), so the whole history spans ``days`` days
before ``END`` and every query time can be placed inside it.
"""

from __future__ import annotations

import bisect
import csv
import itertools
import json
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from state import codec
from state.open import open_writer
from state.store import LedgerStore
from streams.cli.load import load_files

TENANT = "acme"
END = datetime(2025, 6, 30, tzinfo=UTC)
HUB_OFFSET = 20.0
HUB_EXPONENT = 1.0

# (edge_id, src, rel, dst, valid_from, valid_to, tx_from, tx_to); None is an open bound.
Row = tuple[str, str, str, str, int | None, int | None, int, int | None]


@dataclass(frozen=True)
class GraphSpec:
    entities: int = 200_000
    versions: int | None = None
    """Target number of edge versions; default 5 per entity."""
    seed: int = 7
    days: int = 730
    """Length of the simulated transaction-time history."""
    mean_initial_deps: float = 2.0
    hub_offset: float = HUB_OFFSET
    hub_exponent: float = HUB_EXPONENT

    @property
    def target_versions(self) -> int:
        return self.versions if self.versions is not None else 5 * self.entities


# -- the event generator ------------------------------------------------------------------------------------
def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _date(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d")


# Expected edge versions a change event of each kind appends (measured on the quick size), used only
# to decide how many change events reach the target.
_CHANGE_MIX: tuple[tuple[str, float, float], ...] = (
    ("owner_move", 0.28, 2.0),
    ("owner_late", 0.08, 1.8),
    ("owner_sheet", 0.02, 1.0),
    ("dep_new", 0.24, 1.0),
    ("dep_retract", 0.15, 1.0),
    ("dep_restart", 0.05, 1.5),
    ("team_move", 0.12, 2.0),
    ("policy_change", 0.04, 2.0),
    ("role_change", 0.02, 1.2),
)


@dataclass
class _Generator:
    spec: GraphSpec
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        spec = self.spec
        self.rng = random.Random(spec.seed)
        n = spec.entities
        self.n_roles = max(3, n // 10_000)
        self.n_policies = max(4, n // 1_000)
        self.n_teams = max(8, n // 100)
        self.n_people = n * 25 // 100
        rest = max(10, n - self.n_roles - self.n_policies - self.n_teams - self.n_people)
        self.n_services = rest * 6 // 10
        self.n_deps = rest  # Services and Components: the nodes depends_on joins
        ranked = list(range(self.n_deps))
        self.rng.shuffle(ranked)
        self.ranked = ranked
        self.cum_weights = list(itertools.accumulate(
            (r + spec.hub_offset) ** -spec.hub_exponent for r in range(self.n_deps)))
        self.deps: list[tuple[int, int]] = []
        self.member: dict[int, int] = {}
        self.team_policies: dict[int, list[int]] = {}
        self.policy_roles: dict[int, list[int]] = {}
        self.sequence = 0

    # ids ------------------------------------------------------------------------------------------------
    def node(self, i: int, name: bool = False) -> dict[str, str]:
        if i < self.n_services:
            mention = {"type": "Service", "id": f"cmdb:S{i}"}
            label = f"service {i}"
        else:
            mention = {"type": "Component", "id": f"cmdb:C{i - self.n_services}"}
            label = f"component {i - self.n_services}"
        if name:
            mention["name"] = label
        return mention

    def team(self, t: int, name: bool = False) -> dict[str, str]:
        return {"type": "Team", "id": f"hr:T{t}"} | ({"name": f"team {t}"} if name else {})

    def person(self, p: int, name: bool = False) -> dict[str, str]:
        return {"type": "Person", "id": f"hr:E{p}"} | ({"name": f"person {p}"} if name else {})

    def policy(self, p: int, name: bool = False) -> dict[str, str]:
        return {"type": "Policy", "id": f"pol:P{p}"} | ({"name": f"policy {p}"} if name else {})

    def role(self, r: int, name: bool = False) -> dict[str, str]:
        return {"type": "ApprovalRole", "id": f"role:R{r}"} | ({"name": f"role {r}"} if name else {})

    def hub_target(self) -> int:
        rank = bisect.bisect_left(self.cum_weights, self.rng.random() * self.cum_weights[-1])
        return self.ranked[min(rank, self.n_deps - 1)]

    # events ---------------------------------------------------------------------------------------------
    def change(self, now: datetime, system: str, record: str, asserts: list[dict], retracts: list[dict] = ()
               ) -> str:
        self.sequence += 1
        detected = now - timedelta(seconds=self.rng.randint(0, 120))
        return json.dumps({
            "kind": "change", "event_id": f"g-{self.sequence}", "tenant": TENANT,
            "source": {"system": system, "record": record, "version": str(self.sequence)},
            "detected_at": _iso(detected), "mode": "delta", "assert": asserts, "retract": list(retracts),
        })

    def initial(self, i: int, now: datetime) -> str:
        rng = self.rng
        asserts = [{"src": self.node(i, name=True), "rel": "owned_by", "dst": self.team(rng.randrange(self.n_teams)),
                    "valid_from": _date(now - timedelta(days=rng.randint(100, 700))),
                    "evidence": f"owner group of {i}"}]
        count = min(8, int(rng.expovariate(1 / self.spec.mean_initial_deps) + 0.5))
        for _ in range(count):
            dst = self.hub_target()
            if dst == i:
                continue
            assertion: dict[str, Any] = {"src": self.node(i), "rel": "depends_on", "dst": self.node(dst),
                                         "evidence": f"{i} calls {dst}"}
            roll = rng.random()
            start = now - timedelta(days=rng.randint(30, 700))
            if roll < 0.1:
                assertion["valid_from"] = None
            elif roll < 0.15:
                assertion["valid_from"] = _date(start)
                assertion["valid_to"] = _date(start + timedelta(days=rng.randint(10, 400)))
            else:
                assertion["valid_from"] = _date(start)
            asserts.append(assertion)
            if "valid_to" not in assertion:
                self.deps.append((i, dst))
        return self.change(now, "cmdb", f"ci/{i}", asserts)

    def events(self) -> tuple[list[str], int]:
        """Every event line, and how many change events there are."""
        spec, rng = self.spec, self.rng
        start = END - timedelta(days=spec.days)
        initial_versions = (self.n_deps * (1 + spec.mean_initial_deps * 0.97) + self.n_people
                            + self.n_teams * 1.5 + self.n_policies * 2)
        per_change = sum(weight * versions for _, weight, versions in _CHANGE_MIX)
        n_changes = max(0, int((spec.target_versions - initial_versions) / per_change))
        n_initial = self.n_deps + self.n_people + self.n_teams + self.n_policies
        total = n_initial + n_changes
        step = timedelta(days=spec.days) / max(1, total)
        lines: list[str] = []
        now = start

        def tick(index: int) -> datetime:
            moment = start + step * index
            if index % 50 == 0:
                lines.append(json.dumps({"kind": "clock", "now": _iso(moment)}))
            return moment

        index = 0
        for p in range(self.n_policies):
            now = tick(index)
            index += 1
            roles = rng.sample(range(self.n_roles), rng.randint(1, min(3, self.n_roles)))
            self.policy_roles[p] = roles
            lines.append(self.change(now, "policy", f"pol/{p}", [
                {"src": self.policy(p, name=True), "rel": "requires", "dst": self.role(r, name=True),
                 "valid_from": _date(start - timedelta(days=800)), "evidence": f"policy {p} needs role {r}"}
                for r in roles]))
        for t in range(self.n_teams):
            now = tick(index)
            index += 1
            policies = rng.sample(range(self.n_policies), rng.randint(1, 2))
            self.team_policies[t] = policies
            lines.append(self.change(now, "policy", f"team/{t}", [
                {"src": self.team(t, name=True), "rel": "governed_by", "dst": self.policy(q),
                 "valid_from": _date(start - timedelta(days=rng.randint(0, 800))), "evidence": f"team {t} rules"}
                for q in policies]))
        for p in range(self.n_people):
            now = tick(index)
            index += 1
            team = rng.randrange(self.n_teams)
            self.member[p] = team
            lines.append(self.change(now, "hr", f"emp/{p}", [
                {"src": self.person(p, name=True), "rel": "member_of", "dst": self.team(team),
                 "valid_from": _date(now - timedelta(days=rng.randint(0, 900)))}]))
        for i in range(self.n_deps):
            now = tick(index)
            index += 1
            lines.append(self.initial(i, now))
        kinds = [kind for kind, _, _ in _CHANGE_MIX]
        weights = list(itertools.accumulate(weight for _, weight, _ in _CHANGE_MIX))
        for _ in range(n_changes):
            now = tick(index)
            index += 1
            kind = rng.choices(kinds, cum_weights=weights)[0]
            line = getattr(self, f"_{kind}")(now)
            if line is not None:
                lines.append(line)
        return lines, n_changes

    # change kinds ----------------------------------------------------------------------------------------
    def _owner_move(self, now: datetime) -> str:
        i = self.rng.randrange(self.n_deps)
        team = self.rng.randrange(self.n_teams)
        return self.change(now, "cmdb", f"ci/{i}", [
            {"src": self.node(i), "rel": "owned_by", "dst": self.team(team),
             "valid_from": _date(now - timedelta(days=self.rng.randint(0, 14))), "evidence": f"moved to {team}"}])

    def _owner_late(self, now: datetime) -> str:
        i = self.rng.randrange(self.n_deps)
        team = self.rng.randrange(self.n_teams)
        return self.change(now, "cmdb", f"ci/{i}", [
            {"src": self.node(i), "rel": "owned_by", "dst": self.team(team),
             "valid_from": _date(now - timedelta(days=self.rng.randint(30, 400))),
             "evidence": f"correction: owned by {team} since then"}])

    def _owner_sheet(self, now: datetime) -> str:
        i = self.rng.randrange(self.n_deps)
        team = self.rng.randrange(self.n_teams)
        return self.change(now, "sheet", "owners.xlsx", [
            {"src": self.node(i), "rel": "owned_by", "dst": self.team(team),
             "valid_from": _date(now - timedelta(days=self.rng.randint(0, 200))), "evidence": "spreadsheet row",
             "confidence": 0.6}])

    def _dep_new(self, now: datetime) -> str | None:
        i = self.rng.randrange(self.n_deps)
        dst = self.hub_target()
        if dst == i:
            return None
        self.deps.append((i, dst))
        return self.change(now, "cmdb", f"ci/{i}", [
            {"src": self.node(i), "rel": "depends_on", "dst": self.node(dst),
             "valid_from": _date(now - timedelta(days=self.rng.randint(0, 30))), "evidence": f"{i} calls {dst}"}])

    def _dep_retract(self, now: datetime) -> str | None:
        if not self.deps:
            return None
        k = self.rng.randrange(len(self.deps))
        self.deps[k], self.deps[-1] = self.deps[-1], self.deps[k]
        i, dst = self.deps.pop()
        return self.change(now, "cmdb", f"ci/{i}", [], [
            {"src": self.node(i), "rel": "depends_on", "dst": self.node(dst),
             "valid_from": _date(now - timedelta(days=self.rng.randint(0, 10)))}])

    def _dep_restart(self, now: datetime) -> str | None:
        if not self.deps:
            return None
        i, dst = self.deps[self.rng.randrange(len(self.deps))]
        return self.change(now, "cmdb", f"ci/{i}", [
            {"src": self.node(i), "rel": "depends_on", "dst": self.node(dst),
             "valid_from": _date(now - timedelta(days=self.rng.randint(0, 500))),
             "evidence": f"{i} calls {dst} (start corrected)"}])

    def _team_move(self, now: datetime) -> str:
        p = self.rng.randrange(self.n_people)
        old, new = self.member.get(p), self.rng.randrange(self.n_teams)
        self.member[p] = new
        moved = _date(now - timedelta(days=self.rng.randint(0, 20)))
        retracts = [{"src": self.person(p), "rel": "member_of", "dst": self.team(old), "valid_from": moved}] \
            if old is not None and old != new else []
        return self.change(now, "hr", f"emp/{p}", [
            {"src": self.person(p), "rel": "member_of", "dst": self.team(new), "valid_from": moved}], retracts)

    def _policy_change(self, now: datetime) -> str:
        t = self.rng.randrange(self.n_teams)
        policies = self.team_policies.setdefault(t, [])
        new = self.rng.randrange(self.n_policies)
        moved = _date(now - timedelta(days=self.rng.randint(0, 60)))
        retracts = []
        if policies and self.rng.random() < 0.7:
            old = policies.pop(self.rng.randrange(len(policies)))
            if old != new:
                retracts.append({"src": self.team(t), "rel": "governed_by", "dst": self.policy(old),
                                 "valid_from": moved})
        if new not in policies:
            policies.append(new)
        return self.change(now, "policy", f"team/{t}", [
            {"src": self.team(t), "rel": "governed_by", "dst": self.policy(new), "valid_from": moved,
             "evidence": f"team {t} rules"}], retracts)

    def _role_change(self, now: datetime) -> str:
        p = self.rng.randrange(self.n_policies)
        roles = self.policy_roles.setdefault(p, [])
        when = _date(now - timedelta(days=self.rng.randint(0, 60)))
        if len(roles) > 1 and self.rng.random() < 0.4:
            old = roles.pop(self.rng.randrange(len(roles)))
            return self.change(now, "policy", f"pol/{p}", [], [
                {"src": self.policy(p), "rel": "requires", "dst": self.role(old), "valid_from": when}])
        new = self.rng.randrange(self.n_roles)
        if new not in roles:
            roles.append(new)
        return self.change(now, "policy", f"pol/{p}", [
            {"src": self.policy(p), "rel": "requires", "dst": self.role(new), "valid_from": when,
             "evidence": f"policy {p} needs role {new}"}])


def generate_events(spec: GraphSpec) -> list[str]:
    lines, _ = _Generator(spec).events()
    return lines


# -- building and exporting -----------------------------------------------------------------------------------
@dataclass
class BuiltGraph:
    spec: GraphSpec
    workdir: Path
    store: LedgerStore
    rows: list[Row]
    load_summary: dict[str, Any]
    timings: dict[str, float]
    n_events: int

    _store_open: bool = True

    def close_store(self) -> None:
        if self._store_open:
            self._store_open = False
            self.store.close()

    @property
    def state_dir(self) -> Path:
        return self.workdir / "state"

    def close(self) -> None:
        """Close the writer (if still open) and delete the temporary directory."""
        try:
            self.close_store()
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)


def export_rows(store: LedgerStore) -> list[Row]:
    """Every stored edge version (the ``V`` table), decoded by the ledger's own codec."""
    rows: list[Row] = []
    for _, raw in store.kv.scan(b"V"):
        v = codec.decode_version(raw)
        rows.append((v.edge_id, v.src, v.rel, v.dst, v.valid_from, v.valid_to, v.tx_from, v.tx_to))
    return rows


def build_graph(spec: GraphSpec, workdir: Path | None = None, log: Any = None) -> BuiltGraph:
    """Generate, load through the ledger into RocksDB, export. The caller must ``close()`` the result."""
    say = log or (lambda message: None)
    workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="edgeledger-bench-traversals-"))
    timings: dict[str, float] = {}
    try:
        started = time.perf_counter()
        lines = generate_events(spec)
        events_path = workdir / "events.jsonl"
        with open(events_path, "w") as handle:
            for line in lines:
                handle.write(line)
                handle.write("\n")
        n_events = len(lines)
        del lines
        timings["generate_s"] = time.perf_counter() - started
        say(f"generated {n_events:,} events in {timings['generate_s']:.1f} s; loading through the ledger ...")
        started = time.perf_counter()
        store = open_writer(workdir / "state")
        try:
            counts = load_files([events_path], store, simulated_clock=True)
            timings["load_s"] = time.perf_counter() - started
            summary: dict[str, Any] = asdict(counts)
            summary["balanced"] = counts.balanced()
            say(f"loaded in {timings['load_s']:.1f} s: {summary}")
            started = time.perf_counter()
            rows = export_rows(store)
            timings["export_s"] = time.perf_counter() - started
        except BaseException:
            store.close()
            raise
        return BuiltGraph(spec, workdir, store, rows, summary, timings, n_events)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise


def to_networkx(rows: list[Row]):
    """A MultiDiGraph: one edge per version, keyed by edge id; attributes rel, valid_from/to, tx_from/to."""
    import networkx as nx

    graph = nx.MultiDiGraph()
    for edge_id, src, rel, dst, valid_from, valid_to, tx_from, tx_to in rows:
        graph.add_edge(src, dst, key=edge_id, rel=rel, valid_from=valid_from, valid_to=valid_to,
                       tx_from=tx_from, tx_to=tx_to)
    return graph


EDGES_DDL = """
CREATE TABLE edges (
    edge_id VARCHAR NOT NULL, src VARCHAR NOT NULL, rel VARCHAR NOT NULL, dst VARCHAR NOT NULL,
    valid_from BIGINT, valid_to BIGINT, tx_from BIGINT NOT NULL, tx_to BIGINT
)"""


def to_duckdb(rows: list[Row], workdir: Path, threads: int | None = None):
    """An in-memory DuckDB with ``edges`` (ordered by rel, dst) and ART indexes on src and dst."""
    import duckdb

    path = workdir / "edges.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        for row in sorted(rows, key=lambda r: (r[2], r[3], r[1])):
            writer.writerow(["" if value is None else value for value in row])
    con = duckdb.connect()
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    con.execute(EDGES_DDL)
    con.execute(f"COPY edges FROM '{path.as_posix()}' (HEADER false, NULLSTR '')")
    con.execute("CREATE INDEX edges_src ON edges (src)")
    con.execute("CREATE INDEX edges_dst ON edges (dst)")
    path.unlink()
    return con
