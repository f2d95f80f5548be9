"""Failover and rebuild: a batch another worker redid, a replica beside its worker, poison across a
lost disk, and `run --exit-when-idle` on a worker that must rebuild first.

Each test builds its scenario on the session's embedded broker with topics of its own, runs the
workers as subprocesses of ``tests.support.faulty_worker`` (the worker `edgeledger run` hosts, without
its faust app, whose own group join holds up every start and stop by seconds; with a fault where one
must fail), stops each once it has applied its input to the end, and compares what they hold with
`load` of the same input or with each other.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from processors.freshness import stale_sources_for_queries
from processors.queries import QueryEngine, QueryRequest
from schemas.ontology import default_ontology
from schemas.slo import default_slo
from schemas.topics import Topic, tenant_partition
from state import codec
from state.keys import unpack
from state.kv import RocksKV
from state.open import reading
from state.pipeline_store import PipelineStore
from streams.cli.load import load_into
from streams.kafka.broker import EmbeddedBroker
from streams.kafka.config import ADMIN_DEFAULTS, FAST_GROUP_OVERRIDES, consumer_config
from streams.kafka.produce import produce_files
from streams.kafka.topics import TopicSettings, ensure_topics
from streams.processor import wall_clock_micros
from streams.worker.loop import CRASH_EXIT_CODE, LedgerWorker, WorkerConfig
from tests.support.generate import generate_events
from tests.support.logpipe import LogPipe
from tests.support.pipeline import (
    assert_exactly_once_effect,
    batch_records,
    comparable_state,
    finish,
    fresh_topics,
    holds_partitions,
    read_partitions,
    read_topic,
    start_worker,
)
from tests.support.wait import wait_until
from tests.support.workers import (
    ends_of,
    input_ends,
    replicate,
    run_to_the_end,
    states_done,
    worker_done,
)

pytestmark = pytest.mark.integration
TENANTS = ("acme", "globex", "initech", "umbrella")
CRASH_AFTER_COMMIT = ["--crash-after-commit", "1"]
CRASH_MID_SEND = ["--crash-mid-send", "1"]
LOSE_RECORD = ["--lose-record", "1"]
CRASH_AFTER_SEND = ["--crash-after-send", "1"]
CRASH_IN_REBUILD = ["--crash-in-rebuild"]
SLOW_REBUILD = ["--slow-rebuild", "0.01"]
"""``tests.support.faulty_worker``'s options: a fault in the first batch (or rebuild), or a slowed rebuild."""


# -- building scenarios ----------------------------------------------------------------------------------------------
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


@pytest.fixture
def topics(kafka_broker: EmbeddedBroker) -> TopicSettings:
    """Topics of this test's own on the session's broker."""
    settings = fresh_topics()
    ensure_topics(kafka_broker.bootstrap, settings)
    return settings


StartWorker = Callable[[Path, str, TopicSettings, str], subprocess.Popen]


@pytest.fixture
def running() -> Iterator[StartWorker]:
    """``start_worker`` for workers a test stops itself; any still running when the test ends is killed."""
    started: list[subprocess.Popen] = []

    def start(state: Path, bootstrap: str, topics: TopicSettings, group: str) -> subprocess.Popen:
        started.append(start_worker(state, bootstrap, topics, group, faults=[]))
        return started[-1]

    yield start
    for worker in started:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()


StartLogged = Callable[..., LogPipe]


@pytest.fixture
def logged() -> Iterator[StartLogged]:
    """``start_worker`` with its output drained into a ``LogPipe``; any worker still running when the
    test ends is killed."""
    started: list[LogPipe] = []

    def start(state: Path, bootstrap: str, topics: TopicSettings, group: str, **options: Any) -> LogPipe:
        started.append(LogPipe(start_worker(state, bootstrap, topics, group, **{"faults": [], **options})))
        return started[-1]

    yield start
    for worker in started:
        if worker.process.poll() is None:
            worker.process.kill()
        worker.close()


# -- reading state -----------------------------------------------------------------------------------------------
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


# -- running workers -------------------------------------------------------------------------------------------------
def run_through(state: Path, bootstrap: str, topics: TopicSettings, group: str) -> dict:
    """One `run`, stopped once it has applied every input there is; its summary."""
    return run_to_the_end(state, bootstrap, topics, group, faults=[]).summary()


def stop(worker: subprocess.Popen) -> dict:
    """Stop a running worker as an operator does (SIGTERM); its summary."""
    worker.send_signal(signal.SIGTERM)
    out, err = finish(worker, 60)
    assert worker.returncode == 0, err
    return json.loads(out)


# -- the tests -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("per_tenant", [750, 100], ids=["B goes past the batch", "B redoes just the batch"])
def test_a_batch_redone_by_another_worker_is_not_resent_over_it(kafka_broker: EmbeddedBroker, topics: TopicSettings,
                                                                tmp_path: Path, per_tenant: int) -> None:
    """A commits its first batch and dies before sending it; B redoes the whole stream; A comes back
    with that batch still in its outbox. Sent after B's records, A's stale copies must not undo them.
    With 100 events per tenant, A's first batch is (nearly) the whole stream, so B's redo ends where
    it ends: the group's offset is then no further than A's own state, and only the batch's first
    offset tells that B applied it."""
    bootstrap, events = kafka_broker.bootstrap, tmp_path / "events.jsonl"
    produced = write_events(events, per_tenant)
    load_into(tmp_path / "load", [events], simulated_clock=False, ontology_path=None)
    produce_files([events], bootstrap, topics, progress=False)

    crash_at(CRASH_AFTER_COMMIT, tmp_path / "A", bootstrap, topics, "g-redone")
    assert 0 < count_rows(tmp_path / "A", b"I") <= produced, "A died after committing (part of) the stream"

    taking_over = run_through(tmp_path / "B", bootstrap, topics, "g-redone")
    assert taking_over["events_read"] == produced, "B redid A's unsent batch and the rest"
    run_through(tmp_path / "A", bootstrap, topics, "g-redone")
    replicate(tmp_path / "replica", bootstrap, topics)

    assert_each_holds_loads_versions(tmp_path, ("B", "A", "replica"))


def crash_at(fault: list[str], state: Path, bootstrap: str, topics: TopicSettings, group: str) -> None:
    """A worker that dies at ``fault`` in its first batch (or its first rebuild), as from kill -9."""
    worker = start_worker(state, bootstrap, topics, group, faults=fault)
    _, err = finish(worker, 120)
    assert worker.returncode == CRASH_EXIT_CODE, err


def test_a_redo_cut_short_keeps_the_batch_it_redid_from_being_resent(kafka_broker: EmbeddedBroker,
                                                                     topics: TopicSettings, tmp_path: Path) -> None:
    """A commits its first batch and dies before sending it. B takes over, redoes that batch and dies
    while sending it: one tenant's part of the redo is whole on the log, the rest is not, and B
    never commits offsets, so the group's offset says nothing happened. A comes back with its batch
    still parked; re-sent, that batch would be applied over B's whole part. B's claim on the
    partitions tells A, which discards its state and rebuilds from the log instead."""
    bootstrap, events = kafka_broker.bootstrap, tmp_path / "events.jsonl"
    write_events(events, 100)
    load_into(tmp_path / "load", [events], simulated_clock=False, ontology_path=None)
    produce_files([events], bootstrap, topics, progress=False)

    crash_at(CRASH_AFTER_COMMIT, tmp_path / "A", bootstrap, topics, "g-cut-short")
    crash_at(CRASH_MID_SEND, tmp_path / "B", bootstrap, topics, "g-cut-short")
    markers = [record for record in read_topic(bootstrap, topics.name(Topic.EDGE_VERSIONS))
               if record.get("kind") == "batch"]
    assert len(markers) == 1 and markers[0]["tenant"] in TENANTS, (
        "B's redo is cut short after its first tenant's marker")

    run_through(tmp_path / "A", bootstrap, topics, "g-cut-short")
    replicate(tmp_path / "replica", bootstrap, topics)
    assert_each_holds_loads_versions(tmp_path, ("A", "replica"))


@pytest.mark.parametrize("taker", ["A", "B"], ids=["A re-sends it", "B rebuilds past it"])
def test_a_batch_that_lost_a_record_on_its_way_to_the_log_is_not_applied_short(
        kafka_broker: EmbeddedBroker, topics: TopicSettings, tmp_path: Path, taker: str) -> None:
    """A's first batch loses an edge version record on its way to the log (a delivery that timed out)
    while the rest arrive, its markers with them, and A stops on the failure. Either A comes back and
    re-sends the batch from its outbox, or B takes the partitions over and rebuilds them from the
    log. Either way the worker and a replica of the whole log end with `load`'s edge versions: no
    reader applies that batch without the record, and B applies its inputs itself."""
    bootstrap, events = kafka_broker.bootstrap, tmp_path / "events.jsonl"
    write_events(events, 250)
    load_into(tmp_path / "load", [events], simulated_clock=False, ontology_path=None)
    produce_files([events], bootstrap, topics, progress=False)

    crash_at(LOSE_RECORD, tmp_path / "A", bootstrap, topics, "g-lost-record")
    logged = batch_records(bootstrap, topics)
    markers = [record for record in logged if record.get("kind") == "batch"]
    assert markers and sum(marker["records"] for marker in markers) == len(logged) - len(markers) + 1, (
        "the markers count one record more than the log holds")

    run_through(tmp_path / taker, bootstrap, topics, "g-lost-record")
    replicate(tmp_path / "replica", bootstrap, topics)
    assert_each_holds_loads_versions(tmp_path, (taker, "replica"))


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


def test_a_batch_another_worker_sent_but_never_committed_is_not_redone(kafka_broker: EmbeddedBroker,
                                                                      topics: TopicSettings, tmp_path: Path) -> None:
    """A applies the first part and stops. B takes the partitions over, applies the second part,
    sends it and dies before the group commits its offsets. A comes back: by the group's offsets it
    is not behind, but B's claim says another state owned the partitions since, so A rebuilds them
    from the log (taking B's batch) rather than applying the second part again over it."""
    bootstrap = kafka_broker.bootstrap
    b_sends_and_dies_before_the_offset_commit(tmp_path, bootstrap, topics, "g-uncommitted")

    run_through(tmp_path / "A", bootstrap, topics, "g-uncommitted")
    replicate(tmp_path / "replica", bootstrap, topics)
    holders = ("A", "replica")
    versions = {name: state_difference(tmp_path / name, tmp_path / "load") for name in holders}
    assert versions == dict.fromkeys(holders, "same"), "each holds load's edge versions"
    assert {name: stale_adjacency(tmp_path / name)[:3] for name in holders} == {name: [] for name in holders}
    assert stored_versions(tmp_path / "A") == stored_versions(tmp_path / "replica"), (
        "A holds the versions as the log has them, with B's transaction times, not a redo of its own")


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


def test_a_worker_paused_past_its_session_does_not_send_the_batch_it_held(kafka_broker: EmbeddedBroker,
                                                                          topics: TopicSettings,
                                                                          tmp_path: Path, logged: StartLogged) -> None:
    """A commits its first batch to its state and is paused (SIGSTOP) before sending it, long enough
    for the group to evict it. B takes the partitions over, rebuilds them from the log and applies
    the whole stream. A resumes where it stopped: the group no longer counts it as a member, so it
    does not send its batch, whose records would contradict B's on the log with other transaction
    times. It joins again, finds B's claims, discards its state and rebuilds it from the log."""
    bootstrap = kafka_broker.bootstrap
    paused, produced, release = paused_at_its_first_batch(tmp_path, bootstrap, topics, "g-paused", logged,
                                                          "--hold-before-send")
    assert run_through(tmp_path / "B", bootstrap, topics, "g-paused")["events_read"] == produced
    resumed_at = time.time()
    os.kill(paused.process.pid, signal.SIGCONT)
    release.touch()
    run_on_to_the_end(paused, tmp_path / "A", input_ends(bootstrap, topics), resumed_at)

    assert any(" is no longer a member of the group " in line for _, line in paused.stderr), paused.tail()
    replicate(tmp_path / "replica", bootstrap, topics)
    assert_exactly_once_effect(bootstrap, topics, tmp_path / "load")
    assert_each_holds_loads_versions(tmp_path, ("B", "A", "replica"))
    assert stored_versions(tmp_path / "A") == stored_versions(tmp_path / "replica"), (
        "A holds the versions as the log has them, with B's transaction times, not its own")


def test_a_worker_paused_past_its_session_with_no_one_to_take_over_sends_its_batch_after_all(
        kafka_broker: EmbeddedBroker, topics: TopicSettings, tmp_path: Path, logged: StartLogged) -> None:
    """As above, but no other worker takes the partitions while A is paused: the group drops A, A
    joins again, gets every partition back untouched (the last claims are its own) and sends the
    batch it held, once, then goes on. Which comes first after the pause, A's question to the group
    or its heartbeat thread's rejoin, is up to the threads: rejoined first, A is a member again and
    sends the batch at once. Either way the batch is on the log once and nothing is rebuilt."""
    bootstrap = kafka_broker.bootstrap
    paused, produced, release = paused_at_its_first_batch(tmp_path, bootstrap, topics, "g-paused-alone", logged,
                                                          "--hold-before-send")
    until_the_group_drops_its_paused_member(bootstrap, topics, "g-paused-alone")
    release.touch()  # first, so that A's question to the group is not held up behind the file's poll
    resumed_at = time.time()
    os.kill(paused.process.pid, signal.SIGCONT)
    run_on_to_the_end(paused, tmp_path / "A", input_ends(bootstrap, topics), resumed_at)

    log_lines = [line for _, line in paused.stderr]
    dropped = any(" is no longer a member of the group " in line for line in log_lines)
    assert dropped == any("re-sending" in line for line in log_lines), (
        "dropped, A sends the batch once it has its partitions back untouched; else it sends it at once")
    assert not any(" rebuilt partition " in line for line in log_lines), "nothing to rebuild"
    assert count_rows(tmp_path / "A", b"I") == produced
    replicate(tmp_path / "replica", bootstrap, topics)
    assert_exactly_once_effect(bootstrap, topics, tmp_path / "load")
    assert_each_holds_loads_versions(tmp_path, ("A", "replica"))
    assert stored_versions(tmp_path / "A") == stored_versions(tmp_path / "replica")


def test_a_rebuild_cut_short_by_a_crash_is_done_again_not_taken_for_done(kafka_broker: EmbeddedBroker,
                                                                        topics: TopicSettings, tmp_path: Path) -> None:
    """As above, B sends a batch and dies before the group commits its offsets. A comes back, claims
    its partitions and dies as it begins to rebuild them. Its claim is now the last, and the group's
    offsets show nothing of B's batch: only the rebuild marks A wrote before claiming tell it, at its
    next start, that the rebuild is unfinished. It rebuilds, rather than applying B's inputs again."""
    bootstrap = kafka_broker.bootstrap
    b_sends_and_dies_before_the_offset_commit(tmp_path, bootstrap, topics, "g-cut-rebuild")
    crash_at(CRASH_IN_REBUILD, tmp_path / "A", bootstrap, topics, "g-cut-rebuild")

    run_through(tmp_path / "A", bootstrap, topics, "g-cut-rebuild")
    replicate(tmp_path / "replica", bootstrap, topics)
    assert_each_holds_loads_versions(tmp_path, ("A", "replica"))
    assert stored_versions(tmp_path / "A") == stored_versions(tmp_path / "replica"), (
        "A holds the versions as the log has them, with B's transaction times, not a redo of its own")


def test_a_rebuild_reads_to_the_end_of_the_log_however_long_the_broker_is_silent(kafka_broker: EmbeddedBroker,
                                                                                 topics: TopicSettings,
                                                                                 tmp_path: Path) -> None:
    """A rebuild that stopped at the first quiet second ended early when the broker paused, and the
    worker then applied inputs already on the log again. A rebuild reads to a probe it sends now:
    with a quiet period no fetch comes back within (a tenth of a millisecond), it still reads to the
    log's end."""
    bootstrap, events = kafka_broker.bootstrap, tmp_path / "events.jsonl"
    write_events(events, 150)
    produce_files([events], bootstrap, topics, progress=False)
    run_through(tmp_path / "worker", bootstrap, topics, "g-silent")

    replaying = LedgerWorker(WorkerConfig(tmp_path / "rebuilt", bootstrap, "g-silent-rebuild", topics))
    try:
        for partition in range(topics.partitions_for(Topic.EDGE_VERSIONS)):
            replaying.rebuilding.rebuild_partition(partition, quiet_for=0.0001)
        offsets = replaying.applied_offsets
    finally:
        replaying.close()
    assert comparable_state(tmp_path / "rebuilt") == comparable_state(tmp_path / "worker")
    assert offsets == PipelineStore(RocksKV(tmp_path / "worker", read_only=True), reader=True).input_offsets()


@pytest.mark.parametrize("given_up", ["past the log's end", "where the log went on"])
def test_a_partition_given_up_where_the_log_is_not_as_left_is_rebuilt_from_the_beginning(
        kafka_broker: EmbeddedBroker, topics: TopicSettings, tmp_path: Path, given_up: str) -> None:
    """The state says it gave each partition up where the log was longer than it is now (not the log
    the state came from: a broker that lost its memory-only storage, say), or at the log's end when
    the last record it sent there is far before (the log went on before it let go: another worker
    wrote there, the state dropped from the group without knowing). A rebuild from there would
    miss records; it reads the whole log instead."""
    bootstrap, events = kafka_broker.bootstrap, tmp_path / "events.jsonl"
    write_events(events, 150)
    produce_files([events], bootstrap, topics, progress=False)
    run_through(tmp_path / "worker", bootstrap, topics, "g-given-up")
    log_topic = topics.name(Topic.EDGE_VERSIONS)

    partitions = range(topics.partitions_for(Topic.EDGE_VERSIONS))
    replaying = LedgerWorker(WorkerConfig(tmp_path / "rebuilt", bootstrap, "g-given-up-rebuild", topics))
    try:
        if given_up == "past the log's end":
            replaying.bookkeeping.give_up({partition: (10**9, "w-1-0/partition-0") for partition in partitions})
        else:
            extents = {partition: log_extent(bootstrap, log_topic, partition) for partition in partitions}
            assert any(count > 10 for _, count in extents.values()), "logs that went on past their first record"
            replaying.bookkeeping.give_up({partition: (count, first or "")
                                            for partition, (first, count) in extents.items()})
        for partition in partitions:
            replaying.rebuilding.rebuild_partition(partition)
    finally:
        replaying.close()
    assert comparable_state(tmp_path / "rebuilt") == comparable_state(tmp_path / "worker")


def log_extent(bootstrap: str, topic: str, partition: int) -> tuple[str | None, int]:
    """A log partition's first record id (None: empty) and where it ends (its last offset + 1), read to
    the end (the embedded broker's watermarks count record batches, not records)."""
    records = read_partitions(bootstrap, topic)[partition]
    return (records[0]["record_id"] if records else None), ends_of(bootstrap, [topic])[(topic, partition)]


def test_a_replica_holds_everything_the_worker_holds(kafka_broker: EmbeddedBroker, topics: TopicSettings,
                                                     tmp_path: Path) -> None:
    """A replica materialises the log; what the worker keeps besides edges must be in the log too:
    a replica answers `corrections`, `review list`, `dead-letters` and a query's coverage as the worker does."""
    bootstrap, events = kafka_broker.bootstrap, tmp_path / "events.jsonl"
    write_events(events, 250, extra=SIDE_EFFECTS)
    produce_files([events], bootstrap, topics, progress=False)
    run_through(tmp_path / "worker", bootstrap, topics, "g-replica")
    replicate(tmp_path / "replica", bootstrap, topics)

    now = wall_clock_micros()
    worker, replica = side_tables(tmp_path / "worker", now), side_tables(tmp_path / "replica", now)
    assert comparable_state(tmp_path / "replica") == comparable_state(tmp_path / "worker")
    assert all(worker["corrections"].values()), "every tenant's ownership changes made corrections"
    assert [len(worker[name]["acme"]) for name in ("review items", "traces", "heartbeats")] == [1, 1, 1]
    assert worker["dead letters per tenant"] == {"acme": 1, None: 1}, "the unknown kind is acme's; bad JSON no one's"
    assert worker["coverage of owners-of"]["acme"] == [], "the worker heard cmdb just now"
    differing = {name: f"worker {size(worker[name])}, replica {size(replica[name])}"
                 for name in worker if replica[name] != worker[name]}
    assert not differing, f"the replica differs from the worker in {sorted(differing)}: {differing}"


def test_poison_is_dead_lettered_once_across_a_rebuild(kafka_broker: EmbeddedBroker, topics: TopicSettings,
                                                       running: StartWorker,
                                                       tmp_path: Path) -> None:
    """The stream ends with a batch of poison only; the disk is lost; the worker rebuilds while more
    input arrives. The poison was handled: it is neither read nor dead-lettered a second time."""
    bootstrap, state = kafka_broker.bootstrap, tmp_path / "state"
    first_part = write_events(tmp_path / "part1.jsonl", 300)
    (tmp_path / "poison.jsonl").write_bytes(b"\n".join(POISON) + b"\n")
    second_part = write_events(tmp_path / "part2.jsonl", 150, seed=10, id_prefix="later")

    produce_files([tmp_path / "part1.jsonl"], bootstrap, topics, progress=False)
    worker = running(state, bootstrap, topics, "g-poison-rebuild")
    wait_until(lambda: count_rows(state, b"I") >= first_part, "the worker applied the first part", 60)
    produce_files([tmp_path / "poison.jsonl"], bootstrap, topics, progress=False)
    wait_until(lambda: count_rows(state, b"D") >= len(POISON), "the worker dead-lettered the poison", 30)
    before_loss = stop(worker)
    shutil.rmtree(state)

    worker = running(state, bootstrap, topics, "g-poison-rebuild")
    produce_files([tmp_path / "part2.jsonl"], bootstrap, topics, progress=False)
    ends = input_ends(bootstrap, topics)
    wait_until(lambda: states_done([state], ends), "the worker applied every input", 90)
    assert count_rows(state, b"I") == first_part + second_part
    after_rebuild = stop(worker)

    letters = {letter["record_id"]: letter for letter in read_topic(bootstrap, topics.name(Topic.DEAD_LETTER))}
    read = [before_loss["events_read"], after_rebuild["events_read"]]
    produced = first_part + len(POISON) + second_part
    assert Counter(letter["original"] for letter in letters.values()) == {line.decode(): 1 for line in POISON}, (
        f"one dead letter (by record_id) per poison input; events read before and after the loss {read} of {produced}")
    assert sum(read) == produced, f"events read before and after the loss: {read}"


def test_exit_when_idle_does_not_count_a_rebuild_as_idle(kafka_broker: EmbeddedBroker, topics: TopicSettings,
                                                         tmp_path: Path) -> None:
    """The disk is lost while input waits: the rebuild from the log is work, not idleness."""
    bootstrap, state = kafka_broker.bootstrap, tmp_path / "state"
    first_part = write_events(tmp_path / "part1.jsonl", 250)
    waiting = write_events(tmp_path / "part2.jsonl", 250, seed=10, id_prefix="later")
    produce_files([tmp_path / "part1.jsonl"], bootstrap, topics, progress=False)
    assert run_through(state, bootstrap, topics, "g-idle-rebuild")["events_read"] == first_part
    shutil.rmtree(state)
    produce_files([tmp_path / "part2.jsonl"], bootstrap, topics, progress=False)

    started = time.monotonic()
    idling = start_worker(state, bootstrap, topics, "g-idle-rebuild", exit_when_idle=2)
    out, err = finish(idling, 120)
    assert idling.returncode == 0, err
    summary = json.loads(out)
    assert summary["events_read"] == waiting, (
        f"read {summary['events_read']} of the {waiting} waiting events before exiting after "
        f"{time.monotonic() - started:.1f} s ({count_rows(state, b'I')} events seen: the rebuild restored the rest)")
    assert count_rows(state, b"I") == first_part + waiting, "the rebuild restored the first part, then read the rest"


def test_partitions_that_need_no_rebuild_keep_flowing_while_others_are_rebuilt(
        kafka_broker: EmbeddedBroker, topics: TopicSettings, tmp_path: Path, logged: StartLogged) -> None:
    """A and B split the partitions; B is stopped, and A takes B's partitions back, which it must
    rebuild from the log (here slowed to several seconds). Input that arrives meanwhile for A's own
    partitions is applied during that rebuild, not after it: the rebuild runs in the worker's loop
    with only the partitions it concerns paused (inside the rebalance callback, it held up all)."""
    bootstrap, group = kafka_broker.bootstrap, "g-flowing"
    parts = [write_events(tmp_path / f"part{index}.jsonl", 100, seed=10 * index, id_prefix=f"p{index}")
             for index in range(3)]
    assert all(parts)
    partitions = topics.partitions_for(Topic.EDGE_VERSIONS)
    workers: dict[str, LogPipe] = {}
    produce_files([tmp_path / "part0.jsonl"], bootstrap, topics, progress=False)
    workers["A"] = logged(tmp_path / "A", bootstrap, topics, group, faults=SLOW_REBUILD)
    wait_until(lambda: event_ids(tmp_path / "part0.jsonl") <= seen_event_ids(tmp_path / "A"),
               "A applied the first part", 60)
    workers["B"] = logged(tmp_path / "B", bootstrap, topics, group)
    wait_until(lambda: all(holds_partitions(w) for w in workers.values()), "the group split the partitions", 60)
    produce_files([tmp_path / "part1.jsonl"], bootstrap, topics, progress=False)
    applied = event_ids(tmp_path / "part0.jsonl") | event_ids(tmp_path / "part1.jsonl")
    wait_until(lambda: applied <= seen_event_ids(tmp_path / "A") | seen_event_ids(tmp_path / "B"),
               "the two workers applied the second part", 60)
    own = {tenant_partition(tenant, partitions) for tenant, _ in seen_event_ids(tmp_path / "A")} - {
        tenant_partition(tenant, partitions) for tenant, _ in seen_event_ids(tmp_path / "B")}
    assert own, "A holds partitions of its own"
    stop_logged(workers["B"])

    produce_files([tmp_path / "part2.jsonl"], bootstrap, topics, progress=False)
    arriving = {(tenant, event_id) for tenant, event_id in event_ids(tmp_path / "part2.jsonl")
                if tenant_partition(tenant, partitions) in own}
    wait_until(lambda: arriving <= seen_event_ids(tmp_path / "A"), "A applied the input of its own partitions", 90)
    applied_at = time.time()
    wait_until(lambda: event_ids(tmp_path / "part2.jsonl") <= seen_event_ids(tmp_path / "A"),
               "A applied every part", 90)
    stop_logged(workers["A"])

    rebuilt = [(at, line) for at, line in workers["A"].stderr if " rebuilt partition " in line]
    assert rebuilt, "A took B's partitions back by rebuilding them from the log"
    assert applied_at < rebuilt[-1][0], (
        f"A applied its own partitions' input {applied_at - rebuilt[-1][0]:.1f} s after its rebuild ended "
        f"({rebuilt[-1][1]}), not while it ran")


def test_a_rebalance_in_the_middle_of_rebuilds_neither_stalls_nor_restarts_them(
        kafka_broker: EmbeddedBroker, topics: TopicSettings, tmp_path: Path, logged: StartLogged) -> None:
    """A starts with no state and rebuilds every partition from the log, slowed: the partition with
    the shorter log is rebuilt first. B joins then, and the group splits the partitions while A's
    longer rebuild runs. If A keeps the partition it finished, that partition is not left paused (a
    pause outlives an assignment); if A keeps the one it was rebuilding, it goes on from where it
    was instead of reading the log again from the start. Either way the group applies the input
    that follows once. The generated tenants fill partitions 0 and 2; two more, with events only in
    the input that follows, fill 1 and 3, whose empty logs A rebuilds before the rebalance: the
    half A keeps holds one of them."""
    bootstrap, group = kafka_broker.bootstrap, "g-rebalance-rebuild"
    first, then = tmp_path / "part0.jsonl", tmp_path / "part1.jsonl"
    write_events(first, 100)
    newcomers = tuple(change(f"{tenant}-1", "cmdb", "svc/S1", "Service:cmdb:S1", "owned_by", "Team:hr:T1")
                      .replace('"tenant": "acme"', f'"tenant": "{tenant}"') for tenant in ("wayne", "wonka"))
    following = write_events(then, 50, seed=10, id_prefix="later", extra=newcomers)
    produce_files([first], bootstrap, topics, progress=False)
    run_through(tmp_path / "X", bootstrap, topics, group)
    partitions = topics.partitions_for(Topic.EDGE_VERSIONS)
    records = Counter(tenant_partition(tenant, partitions) for tenant, _ in event_ids(first))
    ordered = sorted(records, key=lambda partition: records[partition])
    shorter, longer = ordered[0], ordered[-1]
    assert records[shorter] < records[longer], f"two partitions with logs of different lengths: {records}"
    empty = set(range(partitions)) - set(records)
    assert {tenant_partition(tenant, partitions) for tenant in ("wayne", "wonka")} == empty

    workers: dict[str, LogPipe] = {}
    workers["A"] = logged(tmp_path / "A", bootstrap, topics, group, faults=SLOW_REBUILD)
    wait_until(lambda: workers["A"].first(f" rebuilt partition {shorter} ") is not None,
               f"A rebuilt partition {shorter}", 60)
    assert workers["A"].first(f" rebuilt partition {longer} ") is None, "A is still rebuilding the longer log"
    workers["B"] = logged(tmp_path / "B", bootstrap, topics, group)
    wait_until(lambda: all(holds_partitions(w) for w in workers.values()), "the group split the partitions", 60)
    produce_files([then], bootstrap, topics, progress=False)
    everything = event_ids(first) | event_ids(then)
    wait_until(lambda: everything <= seen_event_ids(tmp_path / "A") | seen_event_ids(tmp_path / "B"),
               "the group applied the input that followed", 90)
    summaries = {name: stop_logged(worker) for name, worker in workers.items()}

    assert sum(summary["events_read"] for summary in summaries.values()) == following, summaries
    lines = [line for _, line in workers["A"].stderr]
    if any(f" goes on rebuilding partition {longer}" in line for line in lines):
        starts = [line for line in lines if f" rebuilds partition {longer} " in line]
        assert len(starts) == 1, f"A read partition {longer}'s log from the start once: {starts}"
    else:
        assert f"[{longer}]" not in [line for line in lines if " assigned [" in line][-1], (
            f"A holds partition {longer} after the rebalance but did not go on with its rebuild")


def test_a_worker_reports_its_rebuilds_progress(kafka_broker: EmbeddedBroker, topics: TopicSettings,
                                                tmp_path: Path) -> None:
    """What `run` exports as edgeledger_rebuild_partitions and edgeledger_rebuild_log_records_total:
    a worker with no state reports every partition to rebuild, then none, and replays the whole log."""
    bootstrap, group = kafka_broker.bootstrap, "g-rebuild-progress"
    write_events(tmp_path / "events.jsonl", 100)
    produce_files([tmp_path / "events.jsonl"], bootstrap, topics, progress=False)
    run_through(tmp_path / "first", bootstrap, topics, group)

    reports: list[tuple[int, int]] = []
    worker = LedgerWorker(WorkerConfig(tmp_path / "second", bootstrap, group, topics,
                                       consumer_overrides=dict(FAST_GROUP_OVERRIDES)),
                          on_rebuild=lambda partitions, records: reports.append((partitions, records)))
    until = worker_done(worker, input_ends(bootstrap, topics))
    assert worker.run(until=until).events_read == 0, "the log held every input: nothing left to read"
    partitions = topics.partitions_for(Topic.EDGE_VERSIONS)
    assert reports[0] == (partitions, 0) and reports[-1][0] == 0, reports[:3] + reports[-3:]
    assert sum(records for _, records in reports) == len(read_topic(bootstrap, topics.name(Topic.EDGE_VERSIONS)))


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


def test_a_worker_joining_and_leaving_mid_stream_loses_and_repeats_nothing(kafka_broker: EmbeddedBroker,
                                                                           topics: TopicSettings,
                                                                           tmp_path: Path, logged: StartLogged) -> None:
    """Scale out and back in while events flow, as an operator does with `run`. A runs alone; B joins
    the group while A is busy, the group moves half of the input partitions to B, and B takes A's part
    of them from the log; B applies more there and is stopped (SIGTERM) as more events arrive; the
    partitions move back to A, which rebuilds them from the log (B's batches are there) and goes on.
    Nothing is lost or applied twice: every input is read once by the group, A ends with `load`'s edge
    versions, each version is on the log once in its final state, every correction is emitted, and a
    replica of the log holds what A holds. A's rebuilds replay the logs from where A gave the
    partitions up to B, not from the beginning."""
    bootstrap, group = kafka_broker.bootstrap, "g-scale"
    parts = [tmp_path / f"part{index}.jsonl" for index in range(5)]
    produced = sum(write_events(part, 100, seed=10 * index, id_prefix=f"p{index}") for index, part in enumerate(parts))
    load_into(tmp_path / "load", parts, simulated_clock=False, ontology_path=None)
    ids = [event_ids(part) for part in parts]

    def applied_by_the_group(upto: int) -> bool:
        seen = seen_event_ids(tmp_path / "A") | seen_event_ids(tmp_path / "B")
        return all(part <= seen for part in ids[:upto + 1])

    workers: dict[str, LogPipe] = {}
    produce_files([parts[0]], bootstrap, topics, progress=False)
    workers["A"] = logged(tmp_path / "A", bootstrap, topics, group)
    wait_until(lambda: applied_by_the_group(0), "A applied the first part", 60)
    workers["B"] = logged(tmp_path / "B", bootstrap, topics, group)
    produce_files([parts[1]], bootstrap, topics, progress=False)
    wait_until(lambda: all(holds_partitions(w) for w in workers.values()), "the group split the partitions", 60)
    wait_until(lambda: applied_by_the_group(1), "the group applied the second part", 60)
    produce_files([parts[2]], bootstrap, topics, progress=False)
    wait_until(lambda: applied_by_the_group(2), "the two workers applied the third part", 60)
    produce_files([parts[3]], bootstrap, topics, progress=False)
    left = stop_logged(workers["B"])
    produce_files([parts[4]], bootstrap, topics, progress=False)
    wait_until(lambda: set().union(*ids) <= seen_event_ids(tmp_path / "A"), "A applied every part", 90)
    stayed = stop_logged(workers["A"])

    read = {"A": stayed["events_read"], "B": left["events_read"]}
    assert read["B"] > 0 and sum(read.values()) == produced, f"every input read once by the group: {read} of {produced}"
    replicate(tmp_path / "replica", bootstrap, topics)
    assert_each_holds_loads_versions(tmp_path, ("A", "replica"))
    assert_exactly_once_effect(bootstrap, topics, tmp_path / "load")
    taken_back = [re.search(r" rebuilt partition (\d+) from (\d+) log records \(offset (\d+) on\)", line)
                  for _, line in workers["A"].stderr if " rebuilt partition " in line]
    assert taken_back and all(found is not None for found in taken_back), "A took B's partitions back from the log"
    homes = {tenant_partition(tenant, topics.partitions_for(Topic.EDGE_VERSIONS)) for tenant in TENANTS}
    starts = {int(found[1]): int(found[3]) for found in taken_back if found is not None}
    assert starts.keys() & homes and all(starts[partition] > 0 for partition in starts.keys() & homes), (
        f"A replayed only what B added to the logs it had written to: {starts}, tenants on {sorted(homes)}")


def stop_logged(worker: LogPipe) -> dict:
    """Stop a worker as an operator does (SIGTERM); its summary."""
    return worker.stop()


def test_a_batch_a_dropped_worker_sends_after_the_new_owners_fence_is_dropped_and_its_state_rebuilt(
        kafka_broker: EmbeddedBroker, topics: TopicSettings, tmp_path: Path, logged: StartLogged) -> None:
    """The window the membership check leaves: A commits its first batch, the group confirms it a
    member, and A is paused (SIGSTOP) right before it sends, long enough for the group to evict it.
    B takes the partitions over, fences the log and applies the whole stream. A resumes and sends its
    batch: it lands after B's fence with A's lower epoch, and no reader applies it. A, back in the
    group, rebuilds from the log, finds its own batch dropped there, discards its state and rebuilds
    it from scratch: it ends with B's versions, transaction times included, as a replica has them."""
    bootstrap = kafka_broker.bootstrap
    paused, produced, release = paused_at_its_first_batch(tmp_path, bootstrap, topics, "g-window", logged,
                                                          "--hold-after-check")
    assert run_through(tmp_path / "B", bootstrap, topics, "g-window")["events_read"] == produced
    release.touch()
    resumed_at = time.time()
    os.kill(paused.process.pid, signal.SIGCONT)
    run_on_to_the_end(paused, tmp_path / "A", input_ends(bootstrap, topics), resumed_at)

    a_id = next(match.group(1) for _, line in paused.stderr if (match := re.search(r"worker (\w+) consuming", line)))
    late = 0
    for records in read_partitions(bootstrap, topics.name(Topic.EDGE_VERSIONS)).values():
        a_fence = next(tuple(r["epoch"]) for r in records if r["kind"] == "fence" and r["worker"] == a_id)
        b_fence = next(i for i, r in enumerate(records) if r["kind"] == "fence" and r["worker"] != a_id)
        assert tuple(records[b_fence]["epoch"]) > a_fence
        a_batch = [i for i, r in enumerate(records) if r["kind"] == "batch" and r["batch"].startswith(f"{a_id}-1-")]
        assert all(i > b_fence for i in a_batch), "A's batch landed after B's fence"
        late += len(a_batch)
    assert late, "A sent its batch"
    assert any(" discards its local state" in line for _, line in paused.stderr), paused.tail()
    replicate(tmp_path / "replica", bootstrap, topics)
    assert_each_holds_loads_versions(tmp_path, ("B", "A", "replica"))
    assert stored_versions(tmp_path / "B") == stored_versions(tmp_path / "replica")
    assert stored_versions(tmp_path / "A") == stored_versions(tmp_path / "replica"), (
        "A holds the versions as the log has them, with B's transaction times, not its own batch's")


def test_a_worker_that_comes_back_in_a_group_made_anew_fences_in_the_next_era(
        kafka_broker: EmbeddedBroker, topics: TopicSettings, tmp_path: Path) -> None:
    """A applies a stream in one group, then comes back with its state in a new group (another
    `--group`; or its offsets expired), whose generations start again below the fences A wrote. The
    group confirms A a member, A fences its partitions in the next era, and a replica applies the
    batches of both groups: it ends with `load`'s versions, as A does."""
    bootstrap, first, second = kafka_broker.bootstrap, tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    write_events(first, 100)
    write_events(second, 100, seed=7, id_prefix="more")
    load_into(tmp_path / "load", [first, second], simulated_clock=False, ontology_path=None)
    produce_files([first], bootstrap, topics, progress=False)
    for _ in range(3):  # a few rebalances, so that the old group's generations are above the new one's first
        run_through(tmp_path / "A", bootstrap, topics, "g-old-group")
    produce_files([second], bootstrap, topics, progress=False)
    run_through(tmp_path / "A", bootstrap, topics, "g-new-group")

    replicate(tmp_path / "replica", bootstrap, topics)
    assert_each_holds_loads_versions(tmp_path, ("A", "replica"))
    assert stored_versions(tmp_path / "A") == stored_versions(tmp_path / "replica")
    fences = [tuple(record["epoch"]) for record in read_topic(bootstrap, topics.name(Topic.EDGE_VERSIONS))
              if record["kind"] == "fence"]
    assert max(fences)[0] == 1 and any(era == 0 and generation > 0 for era, generation in fences), (
        f"the old group's fences, then the new group's in the next era: {fences}")
