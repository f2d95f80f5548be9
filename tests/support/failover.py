"""Building and checking the worker failover scenarios of ``tests/streams/worker``: generated streams
with side effects and poison, workers run to the end, crashed at a fault or paused, and what their
states hold compared with `load` of the same input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from processors.freshness import stale_sources_for_queries
from processors.queries import QueryEngine, QueryRequest
from schemas.ontology import default_ontology
from schemas.slo import default_slo
from state import codec
from state.keys import unpack
from state.kv import RocksKV
from state.open import reading
from streams.cli.load import load_into
from streams.kafka.config import ADMIN_DEFAULTS, FAST_GROUP_OVERRIDES, consumer_config
from streams.kafka.produce import produce_files
from streams.kafka.topics import TopicSettings
from streams.processor import wall_clock_micros
from streams.worker.loop import CRASH_EXIT_CODE
from tests.support.generate import generate_events
from tests.support.logpipe import LogPipe
from tests.support.pipeline import comparable_state, finish, read_partitions, start_worker
from tests.support.wait import wait_until
from tests.support.workers import ends_of, run_to_the_end, states_done

TENANTS = ("acme", "globex", "initech", "umbrella")
CRASH_AFTER_COMMIT = ["--crash-after-commit", "1"]
CRASH_MID_SEND = ["--crash-mid-send", "1"]
LOSE_RECORD = ["--lose-record", "1"]
CRASH_AFTER_SEND = ["--crash-after-send", "1"]
CRASH_IN_REBUILD = ["--crash-in-rebuild"]
SLOW_REBUILD = ["--slow-rebuild", "0.01"]
"""``tests.support.faulty_worker``'s options: a fault in the first batch (or rebuild), or a slowed rebuild."""


def write_events(path: Path, per_tenant: int, seed: int = 0, id_prefix: str = "gen",
                 extra: tuple[str | bytes, ...] = ()) -> int:
    """``per_tenant`` generated change events for each tenant, interleaved, then ``extra`` lines;
    event ids start with ``id_prefix`` (a second part of a stream needs ids of its own). Returns the line count."""
    groups = [list(generate_events(per_tenant, 200, seed=seed + i, tenant=tenant, simulated_clock=False))
              for i, tenant in enumerate(TENANTS)]
    lines: list[bytes] = [line.replace('"event_id": "gen-', f'"event_id": "{id_prefix}-', 1).encode()
                          for group in zip(*groups, strict=True) for line in group]
    lines += [line if isinstance(line, bytes) else line.encode() for line in extra]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return len(lines)


def change(event_id: str, system: str, record: str, src: str, rel: str, dst: str) -> str:
    """A one-edge delta change event, as the demo data writes them."""
    src_type, src_id = src.split(":", 1)
    dst_type, dst_id = dst.split(":", 1)
    return json.dumps({
        "kind": "change", "event_id": event_id, "tenant": "acme",
        "source": {"system": system, "record": record, "version": "1"},
        "detected_at": "2026-01-01T00:00:00Z", "mode": "delta", "retract": [],
        "assert": [{"src": {"type": src_type, "id": src_id}, "rel": rel, "dst": {"type": dst_type, "id": dst_id},
                    "valid_from": "2025-01-01"}]})


SIDE_EFFECTS: tuple[str, ...] = (
    # Service:cmdb:S3 owned_by (one at a time) from two sources: a cardinality conflict to review.
    change("own-cmdb", "cmdb", "svc/S3", "Service:cmdb:S3", "owned_by", "Team:hr:T1"),
    change("own-hr", "hr", "org/S3", "Service:cmdb:S3", "owned_by", "Team:hr:T-OTHER"),
    json.dumps({"kind": "trace", "event_id": "tr-1", "tenant": "acme", "trace_id": "agent-run-1",
                "query": {"name": "owners-of", "entity": "Service:cmdb:S3"}, "valid_at": "2026-01-01T00:00:00Z",
                "known_at": "2026-01-01T00:00:00Z", "action": "approval_routing"}),
    json.dumps({"kind": "heartbeat", "event_id": "hb-hr-1", "tenant": "acme", "source": {"system": "hr"},
                "detected_at": "2026-01-01T00:00:00Z"}),
    "{not json",
    json.dumps({"kind": "teleport", "event_id": "bogus-1", "tenant": "acme"}),
)
"""What a stream carries besides edges: a review item, a trace, a heartbeat and two dead letters."""

POISON: tuple[bytes, ...] = (
    b"{not json",
    json.dumps({"kind": "teleport", "event_id": "poison-1", "tenant": "acme"}).encode(),
    json.dumps({"kind": "change", "event_id": "poison-2", "source": {"system": "cmdb"}, "assert": []}).encode(),
)
"""Invalid JSON, an unknown kind, a change that names no tenant: each is dead-lettered."""


def count_rows(state: Path, table: bytes) -> int:
    """Rows of one table of a state directory (``I`` seen events, ``D`` dead letters), read as a secondary."""
    if not (state / "CURRENT").exists():
        return 0
    kv = RocksKV(state, read_only=True)
    try:
        return sum(1 for _ in kv.scan(table))
    finally:
        kv.close()


OPEN = 7
"""The place in a ``comparable_state`` tuple of whether the version is still open (tenant, edge_id,
src and rel come first)."""


def state_difference(state: Path, expected: Path) -> str:
    """"same", or how the edge versions of ``state`` differ from ``expected``'s, by kind, with an example."""
    have = {(v[0], v[1]): v for v in comparable_state(state)}
    want = {(v[0], v[1]): v for v in comparable_state(expected)}
    if have == want:
        return "same"
    kinds: dict[str, list[tuple]] = {}
    for key in sorted(have.keys() | want.keys()):
        mine, theirs = have.get(key), want.get(key)
        if mine == theirs:
            continue
        if mine is None or theirs is None:
            kind = "missing" if mine is None else "not in load"
        elif mine[:OPEN] + mine[OPEN + 1:] == theirs[:OPEN] + theirs[OPEN + 1:]:
            kind = "open where load closed it" if mine[OPEN] else "closed where load has it open"
        else:
            kind = "different"
        kinds.setdefault(kind, []).append(mine or theirs)
    return "; ".join(f"{len(found)} {kind} (e.g. {found[0][:4]})" for kind, found in kinds.items())


def stored_versions(state: Path) -> dict[bytes, bytes]:
    """Every ``V`` row as stored, transaction times included."""
    kv = RocksKV(state, read_only=True)
    try:
        return dict(kv.scan(b"V"))
    finally:
        kv.close()


def stale_adjacency(state: Path) -> list[str]:
    """Adjacency rows (both ends of every version, keyed by its ``tx_from``) that do not index the stored
    version as it is: what a second copy of a batch leaves behind, applied with other transaction times."""
    kv = RocksKV(state, read_only=True)
    try:
        stored = {(v.tenant, v.edge_id): v for v in (codec.decode_version(value) for _, value in kv.scan(b"V"))}
        ends = Counter()
        found = []
        for key, _ in kv.scan(b"A"):
            tenant, node, rel, direction, tx_from, edge_id = unpack(key[1:])
            ends[(tenant, edge_id)] += 1
            version = stored.get((tenant, edge_id))
            if version is None or (version.tx_from, version.rel, version.src if direction == "o" else version.dst) \
                    != (tx_from, rel, node):
                found.append(f"{tenant} {edge_id} at tx {tx_from}")
    finally:
        kv.close()
    return found + [f"{key} has {count} adjacency rows" for key, count in ends.items() if count != 2]


def double_owners(state: Path, services: list[tuple[str, str]], at: int) -> list[str]:
    """Of ``services`` ((tenant, entity) pairs), those whose owners-of answer at ``at`` has two owners
    from one source system (owned_by is one at a time), with their owners per source."""
    found = []
    with reading(state) as store:
        engine = QueryEngine(store, default_ontology())
        for tenant, service in services:
            result = engine.run(QueryRequest(name="owners-of", tenant=tenant, entity=service, valid_at=at, known_at=at))
            per_source = Counter(result.edges[path.edges[0]].source.system for path in result.paths)
            if any(owners > 1 for owners in per_source.values()):
                found.append(f"{tenant} {service}: {dict(per_source)}")
    return found


def most_reowned_services(expected: Path, per_tenant: int = 3) -> list[tuple[str, str]]:
    """(tenant, service) pairs whose ownership changed most often: where a reopened stale version shows."""
    versions = Counter((tenant, src) for tenant, _, src, rel, *_ in comparable_state(expected) if rel == "owned_by")
    return [pair for tenant in TENANTS
            for pair, _ in sorted(((p, n) for p, n in versions.items() if p[0] == tenant),
                                  key=lambda item: (-item[1], item[0]))[:per_tenant]]


def assert_each_holds_loads_versions(folder: Path, holders: tuple[str, ...]) -> None:
    """Each state directory ``folder / name`` of ``holders`` holds the edge versions `load` reached
    (``folder / "load"``), one owner per source of the services re-owned most, and no adjacency
    row left by a second copy of a batch."""
    versions = {name: state_difference(folder / name, folder / "load") for name in holders}
    services = most_reowned_services(folder / "load")
    now = wall_clock_micros()
    double_owned = {name: double_owners(folder / name, services, now) for name in holders}
    assert versions == dict.fromkeys(holders, "same"), f"each holds load's edge versions; owners-of: {double_owned}"
    assert double_owned == {name: [] for name in holders}, "owned_by is one at a time: one owner per source"
    assert {name: stale_adjacency(folder / name)[:3] for name in holders} == {name: [] for name in holders}


def side_tables(state: Path, at: int) -> dict[str, object]:
    """Everything a state holds besides edges and entities, per tenant, and the coverage of a query at ``at``."""
    ontology, slo = default_ontology(), default_slo()
    with reading(state) as store:
        stale = stale_sources_for_queries(ontology, slo, store.source_activity)
        engine = QueryEngine(store, ontology, stale_sources=stale)
        return {
            "corrections": {t: list(store.corrections(t)) for t in TENANTS},
            "review items": {t: list(store.review_items(t)) for t in TENANTS},
            "dead letters per tenant": dict(Counter(letter.tenant for letter in store.dead_letters())),
            "traces": {t: list(store.traces(t)) for t in TENANTS},
            "heartbeats": {t: list(store.heartbeats(t)) for t in TENANTS},
            "source activity": {t: store.source_activity(t) for t in TENANTS},
            "coverage of owners-of": {t: engine.run(QueryRequest(
                name="owners-of", tenant=t, entity="Service:cmdb:S3", valid_at=at, known_at=at)).coverage.stale_sources
                for t in TENANTS},
        }


def size(listing: object) -> object:
    """A side table in a few words: the number of rows per tenant."""
    if isinstance(listing, dict):
        return {key: len(value) if isinstance(value, list | dict) else value for key, value in listing.items()}
    return listing


def run_through(state: Path, bootstrap: str, topics: TopicSettings, group: str) -> dict:
    """One `run`, stopped once it has applied every input there is; its summary."""
    return run_to_the_end(state, bootstrap, topics, group, faults=[]).summary()


def stop(worker: subprocess.Popen) -> dict:
    """Stop a running worker as an operator does (SIGTERM); its summary."""
    worker.send_signal(signal.SIGTERM)
    out, err = finish(worker, 60)
    assert worker.returncode == 0, err
    return json.loads(out)


def crash_at(fault: list[str], state: Path, bootstrap: str, topics: TopicSettings, group: str) -> None:
    """A worker that dies at ``fault`` in its first batch (or its first rebuild), as from kill -9."""
    worker = start_worker(state, bootstrap, topics, group, faults=fault)
    _, err = finish(worker, 120)
    assert worker.returncode == CRASH_EXIT_CODE, err


def b_sends_and_dies_before_the_offset_commit(folder: Path, bootstrap: str, topics: TopicSettings,
                                              group: str) -> None:
    """A applies a first part and stops; B takes the partitions over, applies a second part, sends it
    and dies before the group commits its offsets. ``folder / "load"`` holds `load` of both parts."""
    parts = [folder / "part1.jsonl", folder / "part2.jsonl"]
    write_events(parts[0], 150)
    write_events(parts[1], 100, seed=10, id_prefix="later")
    load_into(folder / "load", parts, simulated_clock=False, ontology_path=None)
    produce_files(parts[:1], bootstrap, topics, progress=False)
    run_through(folder / "A", bootstrap, topics, group)
    produce_files(parts[1:], bootstrap, topics, progress=False)
    crash_at(CRASH_AFTER_SEND, folder / "B", bootstrap, topics, group)


def paused_at_its_first_batch(tmp_path: Path, bootstrap: str, topics: TopicSettings, group: str,
                              logged: StartLogged, hold: str) -> tuple[LogPipe, int, Path]:
    """A stream produced (and loaded into ``tmp_path / "load"``), and worker A holding its first batch at
    ``hold`` (``--hold-before-send``, ``--hold-after-check``) until the file it returns exists, paused
    (SIGSTOP); (A, the events produced, the file)."""
    events, release = tmp_path / "events.jsonl", tmp_path / "release"
    produced = write_events(events, 250)
    load_into(tmp_path / "load", [events], simulated_clock=False, ontology_path=None)
    produce_files([events], bootstrap, topics, progress=False)
    paused = logged(tmp_path / "A", bootstrap, topics, group, faults=[hold, f"1:{release}"])
    wait_until(lambda: any(" holds batch 1 " in line for _, line in list(paused.stderr)), "A holds its first batch", 60)
    os.kill(paused.process.pid, signal.SIGSTOP)
    return paused, produced, release


def until_the_group_drops_its_paused_member(bootstrap: str, topics: TopicSettings, group: str) -> None:
    """Return once the group has gone on without its paused member. A probe joins the group on a topic
    of its own; the coordinator waits for every member it counts to join again before it assigns
    anything, so the probe's assignment comes only once the paused member's session has run out.
    The probe then leaves: it never held an input partition, so no one took the member's over."""
    probe_topic = f"{topics.prefix}group-probe"
    admin = AdminClient({**ADMIN_DEFAULTS, "bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(probe_topic, 1, 1)])[probe_topic].result(30)
    assigned = threading.Event()
    probe = Consumer(consumer_config(bootstrap, group, **FAST_GROUP_OVERRIDES))
    probe.subscribe([probe_topic], on_assign=lambda *_: assigned.set())
    try:
        wait_until(lambda: probe.poll(0.05) is None and assigned.is_set(),
                   "the group to go on without its paused member", 30)
    finally:
        probe.close()


def run_on_to_the_end(worker: LogPipe, state: Path, ends: dict[tuple[str, int], int], resumed_at: float) -> dict:
    """Let a worker resumed at ``resumed_at`` (``time.time()``) go on until it has been assigned its
    partitions again since and its state has applied every input to ``ends``; stop it, its summary."""
    def done() -> bool:
        assigned_since = any(" assigned [" in line and at > resumed_at for at, line in list(worker.stderr))
        return assigned_since and states_done([state], ends)

    try:
        wait_until(lambda: worker.process.poll() is not None or done(), f"{state.name} applied every input", 120)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{worker.tail(40)}") from None
    return worker.stop()


def log_extent(bootstrap: str, topic: str, partition: int) -> tuple[str | None, int]:
    """A log partition's first record id (None: empty) and where it ends (its last offset + 1), read to
    the end (the embedded broker's watermarks count record batches, not records)."""
    records = read_partitions(bootstrap, topic)[partition]
    return (records[0]["record_id"] if records else None), ends_of(bootstrap, [topic])[(topic, partition)]


def seen_event_ids(state: Path) -> set[tuple[str, str]]:
    """The (tenant, event id) pairs a state directory records as seen (its ``I`` table), read as a
    secondary. With the tenant: every tenant's generated events share their ids."""
    if not (state / "CURRENT").exists():
        return set()
    kv = RocksKV(state, read_only=True)
    try:
        return {(str(tenant), str(event_id)) for tenant, event_id in (unpack(key[1:]) for key, _ in kv.scan(b"I"))}
    finally:
        kv.close()


def event_ids(path: Path) -> set[tuple[str, str]]:
    return {(event["tenant"], event["event_id"]) for event in map(json.loads, path.read_text().splitlines())}


def stop_logged(worker: LogPipe) -> dict:
    """Stop a worker as an operator does (SIGTERM); its summary."""
    return worker.stop()



StartWorker = Callable[[Path, str, TopicSettings, str], subprocess.Popen]


StartLogged = Callable[..., LogPipe]
