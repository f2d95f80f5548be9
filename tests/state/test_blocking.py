"""A writer's name-blocking orders in memory answer exactly as the seeks over the ``N``, ``S`` and ``Z`` rows."""

import gc
import random

import pytest

from processors.identity import normalise_name
from processors.matching import Candidate
from processors.model import AliasEntry, Entity
from processors.pending import PendingLedger
from state.blocking import SortedRows
from state.keys import pack
from state.kv import MemoryKV
from state.store import LedgerStore

WORDS = ["ledger", "payments", "settle", "reports", "reporting", "svc", "service", "prod", "alice", "martin",
         "ledgr", "paymnets", "platform", "the", "core", "infra", "billing", "biling"]
TYPES = ["Service", "Team", "Person"]


def _name(rng: random.Random) -> str:
    return normalise_name(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3))))


def _batch(store: LedgerStore, rng: random.Random, tx: int) -> None:
    """Entities, aliases (some written again at a later tx) and placeholders of two tenants."""
    pending = PendingLedger(store)
    for _ in range(rng.randint(1, 25)):
        tenant, entity_type, name = rng.choice(["acme", "globex"]), rng.choice(TYPES), _name(rng)
        if rng.random() < 0.3:
            entity_id = f"{entity_type}:~{name}"
            pending.add_entity(Entity(tenant, entity_id, entity_type, name, tx))
            pending.add_placeholder(tenant, entity_id)
        else:
            entity_id = f"{entity_type}:sys:{rng.randrange(40)}"
            pending.add_entity(Entity(tenant, entity_id, entity_type, name, tx))
        pending.add_alias(AliasEntry(tenant, name, entity_id, tx))
    pending.tx = tx
    store.commit(pending)


def _answers(store: LedgerStore, probes: list[tuple[str, str | None, str, int | None]]) -> list[object]:
    found: list[object] = []
    for tenant, entity_type, name, known_at in probes:
        found.append(store.neighbours(tenant, entity_type, name, known_at))
        if entity_type is not None:
            found.append(store.placeholders_near(tenant, entity_type, name))
    return found


@pytest.mark.parametrize("seed", range(8))
def test_the_lists_in_memory_answer_as_the_seeks_across_commits(seed: int) -> None:
    rng = random.Random(seed)
    kv = MemoryKV()
    writer = LedgerStore(kv)  # keeps the orders in memory (the default), loaded early and kept in step
    seeks = LedgerStore(kv, names_in_memory=0)
    probes = [(rng.choice(["acme", "globex", "initech"]), rng.choice([*TYPES, None]), _name(rng),
               rng.choice([None, 3, 6])) for _ in range(40)]
    for tx in range(1, 10):
        _batch(writer, rng, tx)
        seeks._drop_caches()  # its alias cache would not see the writer's commits
        assert _answers(writer, probes) == _answers(seeks, probes), f"after the commit at {tx}"
    loaded_late = LedgerStore(kv)
    assert _answers(loaded_late, probes) == _answers(seeks, probes)
    assert any(answer for answer in _answers(seeks, probes)), "the probes found names"


def test_a_tenant_past_the_limit_is_read_by_seeks_with_the_same_answers() -> None:
    rng = random.Random(3)
    kv = MemoryKV()
    writer = LedgerStore(kv, names_in_memory=30)
    probes = [("acme", "Service", _name(rng), None) for _ in range(20)]
    before = _answers(writer, probes)  # loads acme while it is small
    assert writer._blocks is not None and writer._blocks.of("acme") is not None
    for tx in range(1, 12):
        _batch(writer, rng, tx)
    assert writer._blocks.of("acme") is None, "past 30 aliases the tenant is left to the seeks"
    assert _answers(writer, probes) == _answers(LedgerStore(kv, names_in_memory=0), probes) != before


def test_the_tenants_share_one_budget_and_one_that_does_not_fit_is_read_by_seeks() -> None:
    rng = random.Random(4)
    kv = MemoryKV()
    for tx in range(1, 7):
        _batch(LedgerStore(kv, names_in_memory=0), rng, tx)
    aliases = {tenant: sum(1 for _ in kv.scan(b"N" + pack(tenant))) for tenant in ("acme", "globex")}
    assert min(aliases.values()) > 5
    writer = LedgerStore(kv, names_in_memory=aliases["acme"] + aliases["globex"] - 1)
    probes = [(tenant, "Service", _name(rng), None) for tenant in ("acme", "globex") for _ in range(10)]
    answers = _answers(writer, probes)  # acme first: it fits, globex then does not
    assert writer._blocks is not None
    assert writer._blocks.of("acme") is not None and writer._blocks.of("globex") is None
    assert answers == _answers(LedgerStore(kv, names_in_memory=0), probes)
    for tx in range(7, 30):  # acme's own commits take the lists past the budget: acme is dropped too
        _batch(writer, rng, tx)
        if writer._blocks.of("acme") is None:
            break
    assert writer._blocks.of("acme") is None and writer._blocks._held == 0
    assert _answers(writer, probes) == _answers(LedgerStore(kv, names_in_memory=0), probes)


def test_an_entity_id_holding_a_nul_is_answered_alike_loaded_or_committed() -> None:
    kv = MemoryKV()
    writer = LedgerStore(kv)
    writer.neighbours("acme", "Service", "billing")  # acme loaded before the commit: the row is filed by it
    pending = PendingLedger(writer)
    pending.add_entity(Entity("acme", "Service:a\x00b", "Service", "billing", 1))
    pending.add_alias(AliasEntry("acme", "billing", "Service:a\x00b", 1))
    pending.tx = 1
    writer.commit(pending)
    expected = [Candidate("Service:a\x00b", "Service", "billing")]
    assert writer.neighbours("acme", "Service", "billing")[:1] == expected
    assert LedgerStore(kv).neighbours("acme", "Service", "billing")[:1] == expected  # loaded from the rows
    assert LedgerStore(kv, names_in_memory=0).neighbours("acme", "Service", "billing")[:1] == expected


def test_a_failed_commit_forgets_the_lists() -> None:
    kv = MemoryKV()
    writer = LedgerStore(kv)
    writer.neighbours("acme", "Service", "billing")
    assert writer._blocks is not None and "acme" in writer._blocks._tenants
    writer._drop_caches()
    assert "acme" not in writer._blocks._tenants


def test_the_rows_in_memory_are_left_alone_by_the_garbage_collector() -> None:
    """A row of strings and ints is untracked by the first collection that sees it; a row holding any
    other object would be walked by every full collection (a tenth of a second per 100,000 aliases)."""
    rng = random.Random(11)
    kv = MemoryKV()
    for tx in range(1, 4):
        _batch(LedgerStore(kv, names_in_memory=0), rng, tx)
    writer = LedgerStore(kv)
    loaded = writer._blocks.of("acme") if writer._blocks is not None else None  # rows as loaded
    assert loaded is not None
    _batch(writer, rng, 4)  # and rows as a commit files them
    gc.collect()
    orders = [loaded.forward, loaded.backward, *(order for pair in loaded.placeholders.values() for order in pair)]
    rows = [row for order in orders for chunk in order._chunks for row in chunk]
    assert len(rows) > 20 and loaded.placeholders, "aliases and placeholders of both kinds were filed"
    assert [row for row in rows if gc.is_tracked(row)] == []


def test_sorted_rows_answer_as_one_sorted_list_through_many_chunk_splits() -> None:
    rng = random.Random(5)
    words = [f"{rng.choice('abcdef')}{rng.choice('abcdef')}{rng.randrange(300)}" for _ in range(3000)]
    plain = sorted({(word, rng.randrange(3)) for word in words[:500]})
    rows = SortedRows(list(plain))
    for step in range(4000):
        row = (rng.choice(words), rng.randrange(3))
        if step % 5 == 4 and plain:
            row = rng.choice(plain)
            plain.remove(row)
            rows.discard(row)
        elif row not in plain:
            plain.append(row)
            plain.sort()
            rows.add(row)
        probe = (rng.choice(words),)
        at = next((i for i, held in enumerate(plain) if held >= probe), len(plain))
        count = rng.choice([1, 2, 9])
        assert rows.after(probe, count) == plain[at:at + count]
        assert rows.before(probe, count) == plain[max(0, at - count):at][::-1]
        assert rows.count == len(plain) and (row in rows) == (row in plain)
    assert len(rows._chunks) > 3, "the rows were split into chunks"
