"""Build ledger scenarios in a few readable lines.

    ledger = Ledger()
    ledger.at("2026-03-01").change("cmdb", "ci/CI0042").asserts(
        "Component:cmdb:CI0042", "owned_by", "Team:hr:T-ANA").send()
    ledger.owners("Component:cmdb:CI0042", valid_at="2026-04-22", known_at="2026-04-22")
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from processors.batch import BatchRunner
from processors.clock import TransactionClock
from processors.ledger import LedgerProcessor
from processors.pending import BatchCounts
from processors.queries import QueryEngine, QueryRequest
from processors.traversal import Limits
from schemas.ontology import default_ontology
from schemas.results import QueryResult
from schemas.times import parse_micros
from state.kv import MemoryKV, OrderedKV
from state.store import LedgerStore

FAR_FUTURE = "2100-01-01T00:00:00Z"
_ids = itertools.count(1)


def mention(entity_id: str) -> dict[str, str]:
    """'Team:hr:T-ANA' -> {'type': 'Team', 'id': 'hr:T-ANA'}; 'Team:Platform team' (no id) -> a name."""
    entity_type, _, rest = entity_id.partition(":")
    if ":" in rest:
        return {"type": entity_type, "id": rest}
    return {"type": entity_type, "name": rest}


@dataclass
class ChangeBuilder:
    ledger: Ledger
    event: dict[str, Any]

    def asserts(self, src: str, rel: str, dst: str, valid_from: str | None = None, valid_to: str | None = None,
                evidence: str = "", **extra: Any) -> ChangeBuilder:
        self.event["assert"].append({"src": mention(src), "rel": rel, "dst": mention(dst), "valid_from": valid_from,
                                     "valid_to": valid_to, "evidence": evidence, **extra})
        return self

    def retracts(self, src: str, rel: str, dst: str, valid_from: str | None, **extra: Any) -> ChangeBuilder:
        self.event["retract"].append({"src": mention(src), "rel": rel, "dst": mention(dst), "valid_from": valid_from,
                                      **extra})
        return self

    def send(self) -> dict[str, Any]:
        self.ledger.send(self.event)
        return self.event


@dataclass
class Ledger:
    kv: OrderedKV = field(default_factory=MemoryKV)
    tenant: str = "acme"
    lines: list[str] = field(default_factory=list)
    counts: BatchCounts = field(default_factory=BatchCounts)

    def __post_init__(self) -> None:
        self.store = LedgerStore(self.kv)
        self.processor = LedgerProcessor(default_ontology(), TransactionClock(lambda: 0, simulated=True))
        self.engine = QueryEngine(self.store, default_ontology())

    # -- writing ------------------------------------------------------------------------------------
    def at(self, now: str) -> Ledger:
        return self.send({"kind": "clock", "now": now})

    def send(self, *events: dict[str, Any] | str | bytes) -> Ledger:
        lines = [e if isinstance(e, str | bytes) else json.dumps(e) for e in events]
        self.lines += lines
        self.counts.add(BatchRunner(self.processor, self.store, self.store.commit, batch_size=1000).run(lines))
        return self

    def change(self, system: str, record: str | None = None, mode: str = "delta", version: str = "1",
               detected_at: str = "2026-01-01T00:00:00Z", event_id: str | None = None,
               **extra: Any) -> ChangeBuilder:
        source = {"system": system, "version": version} | ({"record": record} if record else {})
        return ChangeBuilder(self, {
            "kind": "change", "event_id": event_id or f"ev-{next(_ids)}", "tenant": self.tenant,
            "source": source, "detected_at": detected_at, "mode": mode, "assert": [], "retract": [], **extra,
        })

    def merge(self, keep: str, absorb: str, event_id: str | None = None, actor: str = "alice",
              reason: str = "the same service") -> str:
        """Send a merge command; its id (a split names it)."""
        event_id = event_id or f"m-{next(_ids)}"
        self.send({"kind": "merge", "event_id": event_id, "tenant": self.tenant, "keep": keep, "absorb": absorb,
                   "actor": actor, "reason": reason})
        return event_id

    def split(self, merge_id: str, event_id: str | None = None, actor: str = "bob",
              reason: str = "not the same after all") -> str:
        event_id = event_id or f"s-{next(_ids)}"
        self.send({"kind": "split", "event_id": event_id, "tenant": self.tenant, "merge": merge_id, "actor": actor,
                   "reason": reason})
        return event_id

    # -- reading ------------------------------------------------------------------------------------
    def query(self, name: str, entity: str, valid_at: str = FAR_FUTURE, known_at: str = FAR_FUTURE,
              tenant: str | None = None, **options: Any) -> QueryResult:
        limits = options.pop("limits", Limits())
        return self.engine.run(QueryRequest(name, tenant or self.tenant, entity, parse_micros(valid_at),
                                            parse_micros(known_at), limits, **options))

    def owners(self, entity: str, valid_at: str = FAR_FUTURE, known_at: str = FAR_FUTURE) -> set[str]:
        return {r.entity for r in self.query("owners-of", entity, valid_at, known_at).results}

    def versions(self, src: str, rel: str) -> list:
        return self.store.adjacent(self.tenant, src, rel, "out")

    def believed(self, src: str, rel: str) -> list:
        return [v for v in self.versions(src, rel) if v.tx_to is None]
