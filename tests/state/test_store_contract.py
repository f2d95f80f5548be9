"""The ledger store over both backends passes the same scenario, and survives a reopen."""

import pytest

from state.kv import MemoryKV, RocksKV
from tests.support.harness import Ledger
from tests.support.scenarios import ANALYTICS, CONNECTOR, PLATFORM, late_correction


@pytest.fixture(params=["memory", "rocksdb"])
def backend(request, tmp_path):
    return (lambda: MemoryKV()) if request.param == "memory" else (lambda: RocksKV(tmp_path / "db"))


def test_same_answers_on_every_backend(backend) -> None:
    ledger = late_correction(Ledger(kv=backend()))
    assert ledger.owners(CONNECTOR, valid_at="2026-04-22", known_at="2026-04-22") == {ANALYTICS}
    assert ledger.owners(CONNECTOR, valid_at="2026-04-22") == {PLATFORM}
    assert [t[2] for t in ledger.store.versions_in_tx_order("acme")] == ["appended", "appended", "appended",
                                                                          "closed"]


def test_state_and_clock_survive_reopening(tmp_path) -> None:
    ledger = late_correction(Ledger(kv=RocksKV(tmp_path / "db")))
    last_tx = ledger.store.last_tx()
    ledger.store.close()
    reopened = Ledger(kv=RocksKV(tmp_path / "db"))
    assert reopened.store.last_tx() == last_tx
    assert reopened.owners(CONNECTOR) == {PLATFORM}
    reopened.send(*ledger.lines)
    assert reopened.counts.duplicates == 2, "event ids are remembered across restarts"


def test_state_does_not_depend_on_batch_boundaries() -> None:
    """Workers commit whatever a poll returned; the ledger must not care where batches split."""
    from processors.batch import BatchRunner
    from tests.support.generate import generate_events

    lines = list(generate_events(3000, 300, seed=3))
    states = []
    for batch_size in (1, 7, 500, 5000):
        ledger = Ledger()
        BatchRunner(ledger.processor, ledger.store, ledger.store.commit, batch_size).run(lines)
        store = ledger.store
        states.append(([v for k, v in ledger.kv.scan(b"V")], list(store.versions_in_tx_order("acme")),
                       list(store.corrections("acme"))))
    assert states[0][1] and states[0][2], "the history changes and corrects beliefs"
    assert all(state == states[0] for state in states[1:])


@pytest.mark.parametrize("cache_entries", [2, 200_000])
def test_the_believed_edges_cache_agrees_with_a_cold_read(cache_entries: int) -> None:
    """Versioning reads believed out-edges through a write-through cache; after many commits (with
    constant eviction, or none), every entry equals what a freshly opened store reads from disk."""
    from processors.batch import BatchRunner
    from state.keys import unpack
    from state.store import LedgerStore
    from tests.support.generate import generate_events

    ledger = Ledger()
    warm = LedgerStore(ledger.kv, cache_entries=cache_entries)
    BatchRunner(ledger.processor, warm, warm.commit, batch_size=7).run(generate_events(3000, 300, seed=5))
    cold = LedgerStore(ledger.kv)
    out_edges = {unpack(key[1:])[:3] for key, _ in ledger.kv.scan(b"A") if unpack(key[1:])[3] == "o"}
    assert len(out_edges) > 100
    for tenant, src, rel in sorted(out_edges):
        assert sorted(v.edge_id for v in warm.believed_out(tenant, src, rel)) == sorted(
            v.edge_id for v in cold.believed_out(tenant, src, rel)), (src, rel)
    assert warm._believed_out and len(warm._believed_out) <= cache_entries


def test_state_in_an_older_layout_is_refused_with_a_clear_reason() -> None:
    from state.keys import pack
    from state.layout import StateFormatError
    from state.store import LedgerStore

    ledger = late_correction(Ledger())
    assert LedgerStore(ledger.kv).last_tx() == ledger.store.last_tx(), "the current format opens"
    ledger.kv.write([(b"M" + pack("format"), b"2")])
    with pytest.raises(StateFormatError, match="format 2, this edgeledger reads format 8"):
        LedgerStore(ledger.kv)
    ledger.kv.write([], [b"M" + pack("format")])
    with pytest.raises(StateFormatError, match="format 1, this edgeledger reads format 8"):
        LedgerStore(ledger.kv)


def test_a_past_adjacency_read_is_exactly_what_was_recorded_by_then(backend) -> None:
    """Adjacency rows are in order of recording; a read as of known_at stops at the key alone."""
    from tests.support.generate import generate_events

    ledger = Ledger(kv=backend())
    ledger.send(*generate_events(600, 40, seed=9))
    hub = "Service:cmdb:S0"
    every = ledger.store.adjacent("acme", hub, "depends_on", "in")
    recorded = sorted({v.tx_from for v in every})
    assert len(recorded) > 3 and [v.tx_from for v in every] == sorted(v.tx_from for v in every)
    for known_at in (recorded[0] - 1, recorded[0], recorded[len(recorded) // 2], recorded[-1]):
        read = list(ledger.store.iter_adjacent("acme", hub, "depends_on", "in", known_at))
        assert read == [v for v in every if v.tx_from <= known_at], known_at


def test_an_adjacency_key_whose_version_is_missing_is_a_format_error(backend) -> None:
    """In a long adjacency, a one-version one, and a read of every relationship at a node: an ``A`` key
    always has its ``V`` row in a state this code wrote, so a missing one is named, never skipped."""
    from state.keys import pack
    from state.layout import StateFormatError
    from tests.support.generate import generate_events

    ledger = Ledger(kv=backend())
    ledger.send(*generate_events(600, 40, seed=9))
    hub = "Service:cmdb:S0"
    versions = ledger.store.adjacent("acme", hub, "depends_on", "in")
    middle = versions[len(versions) // 2]
    ledger.at("2026-01-01").change("cmdb", "svc/LONE").asserts(
        "Service:cmdb:LONE", "depends_on", hub, valid_from="2026-01-01").send()
    [lone] = ledger.store.adjacent("acme", "Service:cmdb:LONE", "depends_on", "out")
    ledger.kv.write([], [b"V" + pack("acme", middle.edge_id), b"V" + pack("acme", lone.edge_id)])
    for read in (lambda: ledger.store.adjacent("acme", hub, "depends_on", "in"),
                 lambda: ledger.store.adjacent("acme", lone.src, lone.rel, "out"),
                 lambda: ledger.store.adjacent_any("acme", hub)):
        with pytest.raises(StateFormatError, match="indexes no stored version"):
            read()


class _CountingKV:
    """A ``MemoryKV`` that counts the rows its scans hand out."""

    def __init__(self) -> None:
        from state.kv import MemoryKV

        self.inner, self.rows_read = MemoryKV(), 0

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def scan(self, prefix: bytes, start: bytes | None = None):
        for row in self.inner.scan(prefix, start):
            self.rows_read += 1
            yield row


def test_a_source_too_wide_to_cache_is_read_from_the_other_end() -> None:
    """A policy that applies to every service: once its out-edges are known to exceed the cache's
    fan-out, the believed versions of one of its edges come from that service's in-adjacency, equal
    to the out side's answer, without reading the policy's whole out-adjacency again."""
    from state.store import LedgerStore

    counting = _CountingKV()
    ledger = Ledger(kv=counting)  # type: ignore[arg-type]
    policy, services = "Policy:policy:SOC2", [f"Service:cmdb:S{n}" for n in range(40)]
    change = ledger.at("2026-01-01").change("policy", "pol/SOC2")
    for service in services:
        change.asserts(policy, "applies_to", service, valid_from="2026-01-01")
    change.send()
    ledger.at("2026-02-01").change("policy", "pol/SOC2").retracts(
        policy, "applies_to", services[3], "2026-02-01").send()
    ledger.at("2026-03-01").change("policy", "pol/SOC2").asserts(
        policy, "applies_to", services[5], valid_from="2025-06-01", evidence="backdated").send()

    cold = LedgerStore(counting, believed_fan_out=10)  # type: ignore[arg-type]
    expected = {service: sorted(v.edge_id for v in ledger.believed(policy, "applies_to") if v.dst == service)
                for service in services}
    assert cold.believed_edge("acme", policy, "applies_to", services[0])  # finds the source too wide
    for service in services:
        counting.rows_read = 0
        assert sorted(v.edge_id for v in cold.believed_edge("acme", policy, "applies_to", service)) == \
            expected[service], service
        assert counting.rows_read == len(cold.adjacent("acme", service, "applies_to", "in")) <= 3
    assert expected[services[3]] and expected[services[5]], "a remainder and a backdated version are kept"
    assert sorted(v.edge_id for v in cold.believed_out("acme", policy, "applies_to")) == sorted(
        e for ids in expected.values() for e in ids)


def test_a_cached_source_that_grows_too_wide_leaves_the_cache() -> None:
    """The fan-out cap bounds the cache's memory; a source cached while narrow must not outgrow it
    through write-through, and its answers stay right once it is read from the other end."""
    from state.store import LedgerStore

    ledger = Ledger()
    ledger.store = store = LedgerStore(ledger.kv, believed_fan_out=10)
    policy, key = "Policy:policy:SOC2", ("acme", "Policy:policy:SOC2", "applies_to")
    for batch in range(5):
        change = ledger.at(f"2026-01-0{batch + 1}").change("policy", f"pol/SOC2/{batch}")
        for n in range(batch * 5, batch * 5 + 5):
            change.asserts(policy, "applies_to", f"Service:cmdb:S{n}", valid_from="2026-01-01")
        change.send()
        cached = store._believed_out.get(key)
        assert cached is None or len(cached) <= 10
    assert key in store._too_wide and key not in store._believed_out
    cold = LedgerStore(ledger.kv)
    for n in range(25):
        service = f"Service:cmdb:S{n}"
        assert [v.edge_id for v in store.believed_edge("acme", policy, "applies_to", service)] == \
            [v.edge_id for v in cold.believed_edge("acme", policy, "applies_to", service)] != []


def test_a_failed_commit_leaves_no_cached_belief_behind() -> None:
    """Commit keeps the believed-edges cache in step while it builds the rows; if the write then fails,
    reads must answer from what is stored, not from what the failed batch would have done."""
    from state.store import LedgerStore

    ledger = late_correction(Ledger())
    assert ledger.owners(CONNECTOR) == {PLATFORM}
    before = sorted(v.edge_id for v in ledger.store.believed_out("acme", CONNECTOR, "owned_by"))

    def refuse(puts, deletes=()):
        raise OSError("disk full")

    ledger.kv.write = refuse
    with pytest.raises(OSError, match="disk full"):
        ledger.send({"kind": "change", "event_id": "cmdb-9000", "tenant": "acme",
                     "source": {"system": "cmdb", "record": "ci/CI0042", "version": "9"},
                     "detected_at": "2026-06-01T00:00:00Z",
                     "assert": [{"src": {"type": "Component", "id": "cmdb:CI0042"}, "rel": "owned_by",
                                 "dst": {"type": "Team", "id": "hr:T-SEC"}, "valid_from": "2026-06-01"}]})
    assert sorted(v.edge_id for v in ledger.store.believed_out("acme", CONNECTOR, "owned_by")) == before
    assert sorted(v.edge_id for v in LedgerStore(ledger.kv).believed_out("acme", CONNECTOR, "owned_by")) == before


def test_closing_a_belief_rewrites_its_version_row_and_leaves_its_index_rows_alone() -> None:
    """``A`` rows are keys only, written with the version; a closing writes the ``V`` row with its
    ``tx_to`` and deletes the ``B`` row, and every adjacency read then sees the closed version."""
    ledger = late_correction(Ledger())
    version = next(v for v in ledger.believed(CONNECTOR, "owned_by") if v.dst == PLATFORM)
    edge = version.edge_id.encode() + b"\x00\x01"
    index = [(key, value) for key, value in ledger.kv.scan(b"A") if key.endswith(edge)]
    assert len(index) == 2 and {value for _, value in index} == {b""}, "one keys-only row at each end"
    written: list[tuple[list, list]] = []
    write = ledger.kv.write

    def recording(puts, deletes=()):
        written.append((list(puts), list(deletes)))
        write(puts, deletes)

    ledger.kv.write = recording
    ledger.send({"kind": "revoke", "event_id": "rv-1", "tenant": "acme", "edge_id": version.edge_id,
                 "reason": "entered by mistake"})
    (puts, deletes), = written
    touched = sorted(key[:1] for key, _ in puts if key[:1] in b"VAB")
    assert touched == [b"V"] and [key[:1] for key in deletes] == [b"B"]
    assert [key for key, _ in ledger.kv.scan(b"A") if key in dict(index)] == [key for key, _ in index]
    for direction, node in (("out", CONNECTOR), ("in", PLATFORM)):
        read = [v for v in ledger.store.adjacent("acme", node, "owned_by", direction) if v.edge_id == version.edge_id]
        assert len(read) == 1 and read[0].tx_to is not None, direction
