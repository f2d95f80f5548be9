"""The log's records: what a replay reads back, and records too large for one Kafka record."""

import base64
import re
from dataclasses import asdict

import orjson
import pytest

from processors.model import Correction, DeadLetter
from processors.outbox import (
    ORIGINAL_KEPT,
    VERSION_LAYOUT,
    is_marker,
    outbox_for,
    parked_inputs,
    version_head,
    version_record,
)
from processors.pending import PendingLedger
from schemas.times import parse_micros
from schemas.topics import tenant_partition
from state.keys import pack, unpack
from state.kv import MemoryKV
from state.pipeline_store import PipelineStore
from state.store import LedgerStore
from streams.cli.demo import DEMO_EVENTS
from streams.log.records import LogFormatError, Replay, decode_logged_version
from streams.worker.fences import fence_record, next_epoch
from tests.support.harness import Ledger


def _late_corrected(ledger: Ledger) -> list:
    """Two versions of one edge: a fact, then the same fact closed by a correction (tx_to set)."""
    ledger.at("2026-03-01T00:00:00.250000Z").change("cmdb", "r1", version="7").asserts(
        "Service:cmdb:S1", "owned_by", "Team:hr:T1", "2025-01-01", evidence='calls "it" \u00e9').send()
    ledger.at("2026-03-02T00:00:00Z").change("cmdb", "r1", version="8").asserts(
        "Service:cmdb:S1", "owned_by", "Team:hr:T2", "2025-06-01").send()
    return ledger.versions("Service:cmdb:S1", "owned_by")


def test_a_version_record_carries_the_stored_row_and_reads_back_as_the_same_version(ledger: Ledger) -> None:
    versions = _late_corrected(ledger)
    assert any(v.tx_to is not None for v in versions) and any(v.valid_to is not None for v in versions)
    for version in versions:
        stored = ledger.kv.get(b"V" + pack("acme", version.edge_id))
        assert stored is not None
        for appended, closed in [(False, False), (False, True), (True, False), (True, True)]:
            raw = version_record(version, appended, closed, stored, version_head('b-"1'))
            record = orjson.loads(raw)
            state = "closed" if version.tx_to is not None else "open"
            assert raw == orjson.dumps({"kind": "edge_version", "batch": 'b-"1',
                                        "record_id": f"acme/{version.edge_id}@{state}", "appended": appended,
                                        "closed": closed, "layout": VERSION_LAYOUT, "version": list(version)})
            assert decode_logged_version(record) == version


def test_a_record_id_with_characters_json_escapes_is_still_valid_json() -> None:
    from processors.model import EdgeVersion
    from state import codec

    version = EdgeVersion('e"1\\', 'ten"ant\n\u00e9', "A:x", "owned_by", "B:y", None, None, 5, None, "cmdb", None, None,
                          "", 1.0, 'e"1\\', (), "ev", None)
    raw = version_record(version, True, False, codec.encode_version(version), version_head("b-1"))
    assert orjson.loads(raw)["record_id"] == 'ten"ant\n\u00e9/e"1\\@open'


def test_a_version_that_is_not_the_stored_array_is_refused_with_its_reason() -> None:
    record = {"kind": "edge_version", "batch": "b-1", "record_id": "r", "appended": True, "closed": False}
    with pytest.raises(LogFormatError, match="array of 19 fields"):
        decode_logged_version({**record, "layout": VERSION_LAYOUT, "version": ["e1", "acme"]})
    with pytest.raises(LogFormatError, match="got str"):
        decode_logged_version({**record, "layout": VERSION_LAYOUT, "version": "e1"})
    with pytest.raises(LogFormatError, match="layout 2: this edgeledger reads layout 1"):
        decode_logged_version({**record, "layout": 2, "version": []})
    with pytest.raises(LogFormatError, match="layout None"):
        decode_logged_version({**record, "version": {"edge_id": "e1"}})  # the contract's edge shape is not read


def test_a_record_or_marker_of_no_batch_or_of_an_unknown_kind_is_refused() -> None:
    """Every record this edgeledger writes names its batch; a log of any other shape is not misread."""
    _, log = _logged_load(DEMO_EVENTS.read_bytes().splitlines()[:10])
    for raw in log:
        record = orjson.loads(raw)
        if record["kind"] == "batch":
            marker = record
        elif record["kind"] == "edge_version":
            version = record
    for refused, what in ((version, "a record of kind 'edge_version'"), (marker, "a batch marker")):
        nameless = orjson.dumps({key: value for key, value in refused.items() if key != "batch"})
        with pytest.raises(LogFormatError, match=f"{what} .* names no batch"):
            Replay(LedgerStore(MemoryKV())).feed([nameless], lambda pending: None, {})
    unknown = orjson.dumps({**version, "kind": "edge"})
    with pytest.raises(LogFormatError, match="kind 'edge'"):
        Replay(LedgerStore(MemoryKV())).feed([unknown], lambda pending: None, {})


def test_a_correction_too_large_for_one_record_is_sent_in_parts() -> None:
    """Revoking a whole source closes every version it asserted; the correction must still reach
    edge-corrections, in records the producer accepts, naming every id once."""
    import orjson

    from processors.model import Correction
    from processors.outbox import CORRECTION_IDS_PER_RECORD, correction_records
    from streams.kafka.config import MAX_RECORD_BYTES

    old = tuple(f"e{n:016x}" for n in range(CORRECTION_IDS_PER_RECORD * 2 + 5))
    new = tuple(f"e{n:016x}" for n in range(10**6, 10**6 + 7))
    correction = Correction("c1", "acme", "ev-9", 1_700_000_000_000_000, "revoke_source", old, new)

    parts = correction_records(correction)

    assert [(p["part"], p["parts"]) for p in parts] == [(1, 3), (2, 3), (3, 3)]
    assert len({p["record_id"] for p in parts}) == 3 and {p["correction_id"] for p in parts} == {"c1"}
    assert [e for p in parts for e in p["old_edge_ids"]] == list(old)
    assert [e for p in parts for e in p["new_edge_ids"]] == list(new)
    assert all(len(orjson.dumps(p)) < MAX_RECORD_BYTES / 4 for p in parts)
    [single] = correction_records(Correction("c2", "acme", "ev-1", 1, "assert", ("e1",), ("e2", "e3")))
    assert single["record_id"] == "c2" and "part" not in single
    assert (single["old_edge_ids"], single["new_edge_ids"]) == (("e1",), ("e2", "e3"))


def test_a_dead_letter_record_carries_bytes_that_are_not_utf8_as_bounded_base64() -> None:
    ledger = Ledger()
    raw = b"\xff" * (ORIGINAL_KEPT + 10)
    pending = PendingLedger(ledger.store)
    pending.dead_letters.append(DeadLetter(tx_at=1, stage="decode", reason="not UTF-8 text", original="\ufffd",
                                           original_base64=base64.b64encode(raw).decode()))
    (record,) = [orjson.loads(r.value) for r in outbox_for(pending, [], {}, "b-1") if r.topic == "dead-letter"]
    kept = base64.b64decode(record["original_base64"])
    assert len(record["original_base64"]) <= ORIGINAL_KEPT and raw.startswith(kept) and len(kept) > 0
    assert record["original_base64_truncated"] is True


def test_parked_inputs_are_the_input_partitions_the_parked_batches_consumed() -> None:
    ledger = Ledger()
    ledger.change("cmdb").asserts("Service:cmdb:S1", "depends_on", "Service:cmdb:S2").send()
    pending = PendingLedger(ledger.store)
    pending.mark_seen("acme", "ev-x", "applied")
    records = outbox_for(pending, [], {("p.source-changes", 2): 41, ("p.corrections", 0): 7}, "b-1")
    bookkeeping = PipelineStore(ledger.kv)
    puts, _ = bookkeeping.outbox_puts(records)
    ledger.kv.write(puts)
    parked = [record for _, record in bookkeeping.outbox()]
    assert parked_inputs(parked) == {("p.source-changes", 2): -1, ("p.corrections", 0): -1}, "no first: unknown"
    records = outbox_for(pending, [], {("p.source-changes", 2): 41}, "b-2", first={("p.source-changes", 2): 30})
    assert parked_inputs([(*record[:3], record.partition) for record in records]) == {("p.source-changes", 2): 30}
    assert parked_inputs([]) == {}


def _logged_load(lines: list[bytes], epoch: tuple[int, int] | None = None) -> tuple[LedgerStore, list[bytes]]:
    """The lines through the ledger in batches of 5, each commit also writing its edge-versions records
    (their markers carrying ``epoch``, when given, as a worker's that fenced the partition at it)."""
    from processors.batch import BatchRunner

    ledger = Ledger()
    ledger.processor.clock.simulated = True
    log: list[bytes] = []
    batches = iter(range(1_000_000))

    def commit(pending: PendingLedger) -> None:
        def log_rows(versions) -> list:
            records = outbox_for(pending, versions, {("in", 0): next(batches)}, f"b-{len(log)}", log_partitions=1,
                                 epochs={0: epoch} if epoch is not None else None)
            log.extend(r.value for r in records if r.topic == "edge-versions")
            return []
        ledger.store.commit(pending, (), log_rows)

    BatchRunner(ledger.processor, ledger.store, commit, batch_size=5).run(lines)
    return ledger.store, log


def _everything(store: LedgerStore, tenant: str) -> dict[str, object]:
    return {
        "corrections": sorted(store.corrections(tenant)),
        "review": [asdict(item) for item in store.review_items(tenant)],
        "dead letters": sorted((d.tenant or "", d.stage, d.reason, d.original) for d in store.dead_letters()),
        "traces": [asdict(trace) for trace in store.traces(tenant)],
        "heartbeats": [asdict(beat) for beat in store.heartbeats(tenant)],
        "activity": store.source_activity(tenant),
        "activity as of 22 April": store.source_activity(tenant, parse_micros("2026-04-22T12:00:00Z")),
    }


def test_replaying_the_log_rebuilds_corrections_reviews_dead_letters_traces_heartbeats_and_activity() -> None:
    from pathlib import Path

    demo = Path(DEMO_EVENTS)
    store, log = _logged_load(demo.read_bytes().splitlines())
    rebuilt = LedgerStore(MemoryKV())
    Replay(rebuilt).feed(log, lambda pending: rebuilt.commit(pending), {})
    original, replayed = _everything(store, "acme"), _everything(rebuilt, "acme")
    assert original["corrections"] and original["review"] and original["traces"] and original["activity"]
    assert original["dead letters"], "the demo's bad lines"
    assert replayed == original


def test_a_correction_split_into_parts_is_replayed_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    import processors.outbox as ledger_log
    import streams.log.records as log_reader

    monkeypatch.setattr(ledger_log, "CORRECTION_IDS_PER_RECORD", 2)
    correction = Correction("c-1", "acme", "ev-1", 5, "revoke", ("e1", "e2", "e3"), ("e4", "e5"))
    records = [orjson.dumps(part) for part in ledger_log.correction_records(correction)]
    assert len(records) == 3
    parts: dict = {}
    found = [log_reader._correction(parts, orjson.loads(record)) for record in [*reversed(records), records[0]]]
    assert found[:2] == [None, None] and found[2] == correction
    assert found[3] is None and len(parts) == 1, "a part read again after the correction completed starts anew"


def test_each_consumed_input_partition_gets_a_marker_in_its_log_partition() -> None:
    ledger = Ledger()
    pending = PendingLedger(ledger.store)  # a batch that applied nothing: one dead letter with no tenant
    pending.dead_letters.append(DeadLetter(tx_at=1, stage="decode", reason="malformed JSON", original="{"))
    inputs = {("p.source-changes", 1): 10, ("p.source-changes", 3): 4, ("p.corrections", 3): 2, ("p.traces", 7): 0}
    markers = [r for r in outbox_for(pending, [], inputs, "b-1", log_partitions=4)
               if r.topic == "edge-versions" and orjson.loads(r.value)["kind"] == "batch"]
    assert [r.partition for r in markers] == [1, 3], "one per input partition the log has, by number"
    for marker in markers:
        body = orjson.loads(marker.value)
        assert body["tenant"] is None and body["outcomes"] == {}
        assert body["inputs"] == [["p.corrections", 3, 2], ["p.source-changes", 1, 10], ["p.source-changes", 3, 4],
                                  ["p.traces", 7, 0]]
    assert all(r.partition == -1 for r in outbox_for(pending, [], inputs, "b-1")), "no log partitions given: none"


def test_a_batch_is_applied_once_whether_resent_or_read_again_over_state_that_holds_it() -> None:
    from pathlib import Path

    demo = Path(DEMO_EVENTS)
    store, log = _logged_load(demo.read_bytes().splitlines())
    cut_short = log[:3]  # a send cut short: records of the first batch, no marker
    rebuilt = LedgerStore(MemoryKV())
    seen: dict = {}
    replay = Replay(rebuilt)
    replay.feed([*cut_short, *log, *log[: len(log) // 2]], lambda pending: rebuilt.commit(pending), seen)
    again: dict = dict(seen)
    Replay(rebuilt).feed(log, lambda pending: rebuilt.commit(pending), again)  # a rebuild over it all
    assert _everything(rebuilt, "acme") == _everything(store, "acme")
    assert again == seen, "nothing was applied the second time"


def test_a_misrouted_letter_stays_on_the_partition_it_arrived_on_and_marks_no_other() -> None:
    """Its tenant's partition may be another worker's: the letter goes before the marker of the partition
    it was read from, and a replay of that partition rebuilds it."""
    ledger = Ledger()
    home = tenant_partition("acme", 4)
    arrived = (home + 1) % 4
    pending = PendingLedger(ledger.store)
    pending.dead_letters.append(DeadLetter(tx_at=1, stage="validate", reason="misrouted", original="{}",
                                           tenant="acme", event_id="stray", input_topic="p.source-changes",
                                           input_partition=arrived, input_offset=9))
    records = outbox_for(pending, [], {("p.source-changes", arrived): 9}, "b-1", log_partitions=4)
    on_log = [(r.key, r.partition, orjson.loads(r.value)["kind"]) for r in records if r.topic == "edge-versions"]
    assert on_log == [("", arrived, "dead_letter"), ("", arrived, "batch")], "nothing keyed to acme's partition"
    rebuilt = LedgerStore(MemoryKV())
    Replay(rebuilt).feed([r.value for r in records if r.topic == "edge-versions"],
                         lambda done: rebuilt.commit(done), {}, arrived)
    assert [(d.tenant, d.event_id, d.input_partition) for d in rebuilt.dead_letters()] == [("acme", "stray", arrived)]


def test_a_dead_letter_without_a_tenant_goes_where_its_batch_writes_a_marker() -> None:
    pending = PendingLedger(Ledger().store)
    pending.dead_letters.append(DeadLetter(tx_at=1, stage="decode", reason="malformed JSON", original="{"))
    pending.dead_letters.append(DeadLetter(tx_at=2, stage="validate", reason="x", original="{}", tenant="acme"))
    records = outbox_for(pending, [], {("p.source-changes", 2): 5, ("p.source-changes", 1): 3}, "b-1",
                         log_partitions=4)
    letters = [r for r in records if r.topic == "edge-versions" and orjson.loads(r.value)["kind"] == "dead_letter"]
    assert sorted((r.key, r.partition) for r in letters) == [("", 1), ("acme", -1)]
    assert 1 in {r.partition for r in records if orjson.loads(r.value).get("kind") == "batch"}


def test_with_no_marker_without_a_tenant_a_dead_letter_naming_none_comes_before_the_first_marker() -> None:
    """No consumed input partition has a log partition of its number (a log with fewer partitions):
    no marker without a tenant closes such a letter, so the first tenant's marker must."""
    pending = PendingLedger(Ledger().store)
    pending.dead_letters.append(DeadLetter(tx_at=1, stage="decode", reason="malformed JSON", original="{"))
    pending.dead_letters.append(DeadLetter(tx_at=2, stage="validate", reason="x", original="{}", tenant="acme"))
    kinds = [(r.key, orjson.loads(r.value).get("kind")) for r in outbox_for(pending, [], {("in", 5): 3}, "b-1", 4)
             if r.topic == "edge-versions"]
    assert kinds == [("", "dead_letter"), ("acme", "dead_letter"), ("acme", "batch")]


def _two_tenant_log(epoch: tuple[int, int] | None = None) -> tuple[LedgerStore, list[bytes]]:
    from pathlib import Path

    demo = Path(DEMO_EVENTS)
    lines = demo.read_bytes().splitlines()
    return _logged_load([line for acme in lines for line in (acme, acme.replace(b'"acme"', b'"globex"'))], epoch)


def _everyone(store: LedgerStore) -> dict[str, object]:
    """Every tenant's tables, and every stored edge version (as bytes)."""
    tables = {tenant: _everything(store, tenant) for tenant in ("acme", "globex")}
    return {"versions": list(store.kv.scan(b"V")), **tables}


def _a_batch_of_both(log: list[bytes], holding: bytes = b"") -> tuple[int, int]:
    """(start, end) in ``log`` of a batch with a marker for each tenant (and a record ``holding``
    those bytes): from after the marker without a tenant that closed the batch before to its own."""
    closing = [i for i, raw in enumerate(log) if b'"kind":"batch"' in raw and b'"tenant":null' in raw]
    for before, end in zip([-1, *closing], closing, strict=False):
        batch = log[before + 1:end]
        if sum(b'"kind":"batch"' in raw for raw in batch) == 2 and any(holding in raw for raw in batch):
            return before + 1, end + 1
    raise AssertionError("no batch holds both tenants")


def _first_marker(log: list[bytes], start: int) -> int:
    return next(i for i in range(start, len(log)) if b'"kind":"batch"' in log[i])


def test_a_batch_re_sent_right_after_itself_is_applied_once() -> None:
    store, log = _two_tenant_log()
    start, end = _a_batch_of_both(log, b'"kind":"dead_letter"')  # and a dead letter, keyed by its digest
    batch, cut = log[start:end], _first_marker(log, start) + 1
    for stream in ([*log[:end], *batch, *log[end:]], [*log[:cut], *batch, *log[end:]]):  # whole, or cut short
        rebuilt = LedgerStore(MemoryKV())
        Replay(rebuilt).feed(stream, lambda pending, store=rebuilt: store.commit(pending), {})
        assert _everyone(rebuilt) == _everyone(store)


def _tenant_part(store: LedgerStore, tenant: str) -> dict[str, object]:
    """One tenant's edge versions, the events it has seen, and its other tables."""
    prefix = b"\x02" + tenant.encode() + b"\x00\x01"
    return {"versions": [row for row in store.kv.scan(b"V") if row[0][1:].startswith(prefix)],
            "seen": [row for row in store.kv.scan(b"I") if row[0][1:].startswith(prefix)],
            **_everything(store, tenant)}


def test_a_send_cut_short_after_one_tenants_marker_leaves_that_part_whole_and_none_of_the_next() -> None:
    """What another worker's rebuild reads when the sender died between two tenants' markers: the
    first tenant's part of the batch is applied whole, and nothing of the second's, whose events
    the rebuilt worker then applies itself."""
    _, log = _two_tenant_log()
    start, end = _a_batch_of_both(log)
    assert b'"tenant":"globex"' in log[end - 2] and b'"tenant":null' in log[end - 1]

    def replayed(stream: list[bytes]) -> LedgerStore:
        rebuilt = LedgerStore(MemoryKV())
        Replay(rebuilt).feed(stream, lambda pending: rebuilt.commit(pending), {})
        return rebuilt

    before, whole, cut_short = replayed(log[:start]), replayed(log[:end]), replayed(log[:end - 2])
    assert _tenant_part(whole, "globex") != _tenant_part(before, "globex"), "the batch holds globex records"
    assert _tenant_part(cut_short, "acme") == _tenant_part(whole, "acme")
    assert _tenant_part(cut_short, "globex") == _tenant_part(before, "globex")


def test_a_restart_between_two_markers_of_a_batch_applies_the_rest() -> None:
    store, log = _two_tenant_log()
    start, _ = _a_batch_of_both(log)
    cut = _first_marker(log, start) + 1
    rebuilt, seen = LedgerStore(MemoryKV()), {}
    Replay(rebuilt).feed(log[:cut], lambda pending: rebuilt.commit(pending), seen)
    Replay(rebuilt).feed(log[cut:], lambda pending: rebuilt.commit(pending), dict(seen))  # restarted there
    assert _everyone(rebuilt) == _everyone(store)


def test_a_rebuild_begun_again_after_a_crash_between_two_markers_lists_each_dead_letter_once() -> None:
    """A rebuild that died after the first tenant's marker of a batch is begun again from the log's
    start, at the input offsets it stored: those move only at the batch's last marker, so the first
    tenant's part of the batch is applied a second time. Every row it writes is the same again, and
    a dead letter is too: keyed by what it says, not by a count of letters stored."""
    store, log = _two_tenant_log()
    start, _ = _a_batch_of_both(log, b'"kind":"dead_letter"')
    cut = _first_marker(log, start) + 1
    assert any(b'"kind":"dead_letter"' in raw for raw in log[start:cut]), "the first part holds a dead letter"
    rebuilt, stored_offsets = LedgerStore(MemoryKV()), {}
    Replay(rebuilt).feed(log[:cut], lambda pending: rebuilt.commit(pending), stored_offsets)
    Replay(rebuilt).feed(log, lambda pending: rebuilt.commit(pending), dict(stored_offsets))
    assert _everyone(rebuilt) == _everyone(store)


def test_the_rest_of_a_send_cut_short_is_not_applied_with_the_next_batch() -> None:
    store, log = _two_tenant_log()
    start, end = _a_batch_of_both(log)
    stale = []
    for raw in log[start:end]:
        record = orjson.loads(raw)
        if record["kind"] == "edge_version":  # an earlier attempt at the same events: other content
            record["batch"], record["version"][12] = "stale-" + record["batch"], "from the attempt cut short"
            stale.append(orjson.dumps(record))
    assert stale, "the batch has versions to cut short"
    rebuilt = LedgerStore(MemoryKV())
    Replay(rebuilt).feed([*log[:start], *stale, *log[start:]], lambda pending: rebuilt.commit(pending), {})
    assert _everyone(rebuilt) == _everyone(store)


def test_each_marker_counts_the_distinct_records_it_closes() -> None:
    _, log = _two_tenant_log()  # one log partition
    since_marker: set[str] = set()
    markers = 0
    for raw in log:
        record = orjson.loads(raw)
        if record["kind"] != "batch":
            since_marker.add(record["record_id"])
            continue
        assert record["records"] == len(since_marker), record["record_id"]
        since_marker, markers = set(), markers + 1
    assert markers > 10
    pending = PendingLedger(Ledger().store)
    pending.dead_letters.append(DeadLetter(tx_at=1, stage="decode", reason="malformed JSON", original="{"))
    pending.dead_letters.append(DeadLetter(tx_at=2, stage="validate", reason="x", original="{}", tenant="acme"))
    unplaced = [orjson.loads(r.value) for r in outbox_for(pending, [], {("in", 0): 3}, "b-1")]
    assert [(m["tenant"], m.get("records", "none")) for m in unplaced if m.get("kind") == "batch"] == [
        ("acme", "none")], "with no partition count, where a record lands is not known: no count"


def _without_first_version(batch: list[bytes]) -> list[bytes]:
    """The batch as the log has it when its first edge version's delivery failed and the rest arrived."""
    lost = next(i for i, raw in enumerate(batch) if b'"kind":"edge_version"' in raw)
    assert lost < _first_marker(batch, 0), "the record lost is the first tenant's"
    return [*batch[:lost], *batch[lost + 1:]]


def test_a_part_of_a_batch_that_lost_a_record_is_not_applied_until_the_batch_is_sent_whole() -> None:
    """A record whose delivery failed while its tenant's marker arrived: the marker counts one record
    more than it closes. That tenant's part is not applied, the other tenant's is, and the batch's
    input offsets do not move, so a rebuilt worker applies those inputs itself. The worker stops on
    the failure and re-sends the batch at its restart: then the missing part is applied."""
    store, log = _two_tenant_log()
    start, end = _a_batch_of_both(log)
    damaged = _without_first_version(log[start:end])

    def replayed(stream: list[bytes]) -> tuple[LedgerStore, dict]:
        rebuilt, seen = LedgerStore(MemoryKV()), {}
        Replay(rebuilt).feed(stream, lambda pending: rebuilt.commit(pending), seen)
        return rebuilt, seen

    (before, seen_before), (whole, _) = replayed(log[:start]), replayed(log[:end])
    short, seen_short = replayed([*log[:start], *damaged])
    assert _tenant_part(whole, "acme") != _tenant_part(before, "acme"), "the batch holds acme records"
    assert _tenant_part(short, "acme") == _tenant_part(before, "acme"), "nothing of acme's part"
    assert _tenant_part(short, "globex") == _tenant_part(whole, "globex"), "globex's part is whole"
    assert seen_short == seen_before, "the batch's inputs are not taken as applied"

    re_sent, _ = replayed([*log[:start], *damaged, *log[start:end], *log[end:]])
    assert _everyone(re_sent) == _everyone(store)


def _fence(era: int, generation: int) -> bytes:
    return fence_record(0, (era, generation), "worker", "lineage")[1]


def _written_at(records: list[bytes], epoch: tuple[int, int] | None) -> list[bytes]:
    """The records as a writer whose fence was at ``epoch`` (None: one from before fences) wrote them."""
    stamped = b"" if epoch is None else b',"epoch":[%d,%d]' % epoch
    return [re.sub(rb',"epoch":\[\d+,\d+\]', stamped, raw) if b'"kind":"batch"' in raw else raw for raw in records]


def _replayed(stream: list[bytes]) -> tuple[LedgerStore, Replay]:
    rebuilt = LedgerStore(MemoryKV())
    replay = Replay(rebuilt)
    replay.feed(stream, lambda pending: rebuilt.commit(pending), {})
    return rebuilt, replay


def test_each_marker_carries_the_epoch_of_its_partitions_fence() -> None:
    _, log = _two_tenant_log((3, 7))
    markers = [orjson.loads(raw) for raw in log if b'"kind":"batch"' in raw]
    assert markers and {tuple(marker["epoch"]) for marker in markers} == {(3, 7)}
    _, unfenced = _two_tenant_log()
    assert not any(b'"epoch"' in raw for raw in unfenced), "a worker that fenced nothing stamps nothing"


def test_a_batch_written_after_a_higher_fence_by_a_writer_of_a_lower_epoch_is_not_applied() -> None:
    """A writes at epoch (0, 1). B takes the partition over and fences it at (0, 2). A batch A sends
    late, after that fence, is dropped by every reader, with all its markers; B's own batch over the
    same inputs is applied. A fence of A's landing late does not move the partition back to A."""
    store, log = _two_tenant_log((0, 2))
    start, end = _a_batch_of_both(log)
    late = _written_at(log[start:end], (0, 1))
    before, _ = _replayed([_fence(0, 1), *_written_at(log[:start], (0, 1))])

    dropped, replay = _replayed([_fence(0, 1), *_written_at(log[:start], (0, 1)), _fence(0, 2), *late])
    assert _everyone(dropped) == _everyone(before)
    assert replay.fenced_off == 3, "two tenants' markers and the one without a tenant"

    whole, replay = _replayed([_fence(0, 1), *_written_at(log[:start], (0, 1)), _fence(0, 2), *late, _fence(0, 1),
                               *log[start:]])
    assert _everyone(whole) == _everyone(store), "B's batches are applied, a late fence of A's is ignored"
    assert replay.fenced_off == 3

    applied, _ = _replayed([_fence(0, 1), *_written_at(log[:start], (0, 1)), *late, _fence(0, 2), *log[start:]])
    assert _everyone(applied) == _everyone(store), "before B's fence the batch is A's; B's copy is then dropped"


def test_after_a_fence_a_marker_of_before_fences_is_not_applied_and_before_one_it_is() -> None:
    store, log = _two_tenant_log()
    start, end = _a_batch_of_both(log)
    assert _everyone(_replayed(log)[0]) == _everyone(store), "a log of before fences replays as it did"
    before, _ = _replayed(log[:start])
    dropped, replay = _replayed([*log[:start], _fence(0, 0), *log[start:end]])
    assert _everyone(dropped) == _everyone(before) and replay.fenced_off == 3


def test_a_group_made_anew_fences_in_the_next_era() -> None:
    """Generations start again with a new group: its first fence, of a lower generation, is of the next era."""
    store, log = _two_tenant_log((1, 0))
    assert next_epoch((0, 57), 0) == (1, 0)
    rebuilt, replay = _replayed([_fence(0, 57), _fence(1, 0), *log])
    assert _everyone(rebuilt) == _everyone(store) and replay.fenced_off == 0


def test_a_late_batch_landing_in_the_middle_of_the_owners_batch_takes_nothing_of_it() -> None:
    """A's late batch arrives while B, the owner, is sending one: between B's records, before B's
    markers. Held apart by writer, A's batch is dropped at its markers and B's is applied whole."""
    store, log = _two_tenant_log((0, 2))
    start, end = _a_batch_of_both(log)
    batch_id = orjson.loads(log[start])["batch"].encode()
    late = [raw.replace(batch_id, b"zombie-1-5") for raw in _written_at(log[start:end], (0, 1))]
    middle = (start + _first_marker(log, start)) // 2
    assert start < middle, "the owner's batch has records before its first marker"

    rebuilt, replay = _replayed([_fence(0, 2), *log[:middle], *late, *log[middle:]])
    assert _everyone(rebuilt) == _everyone(store)
    assert replay.fenced_off == 3


def test_a_fence_lets_go_of_batches_left_open_before_it() -> None:
    """A send cut short before a fence can only be closed by a marker below the fence: a replica does
    not keep its records for ever (each restarted worker writes under a new worker id)."""
    _, log = _two_tenant_log((0, 1))
    start, _ = _a_batch_of_both(log)
    cut = _first_marker(log, start)
    rebuilt = LedgerStore(MemoryKV())
    replay = Replay(rebuilt, {0: (0, 1)})
    replay.feed(log[start:cut], lambda pending: rebuilt.commit(pending), {})
    assert replay._open[0], "the records before the first marker are held"
    replay.feed([_fence(0, 2)], lambda pending: rebuilt.commit(pending), {})
    assert not replay._open.get(0)


def test_every_record_the_builders_emit_is_of_its_kinds_model() -> None:
    """``schemas.log_records`` describes the log: each record a batch emits, and the fences and probes
    a worker writes, validate strictly against the model of their kind (no field missing or extra)."""
    from pydantic import TypeAdapter, ValidationError

    from schemas.log_records import LOG_RECORD
    from streams.worker.fences import probe_record
    from streams.worker.positions import input_reset_record

    models = TypeAdapter(LOG_RECORD)
    _, log = _logged_load(DEMO_EVENTS.read_bytes().splitlines(), epoch=(0, 3))
    parted = outbox_for(_pending_with_a_large_correction(), [], {("in", 0): 1}, "b-9", log_partitions=1,
                        first={("in", 0): 1})
    _, merged = _logged_load(_merged_and_split())
    log += merged
    log += [record.value for record in parted if record.topic == "edge-versions"]
    log += [_fence(0, 3), probe_record()[1], input_reset_record(0, [("in", 0)], (0, 3), "a new topic"),
            input_reset_record(0, [("in", 0)], None, "a new topic")]
    kinds = set()
    for raw in log:
        record = models.validate_json(raw, strict=True)
        kinds.add(record["kind"])
    assert kinds == {"edge_version", "entity", "alias", "merge", "placeholder", "filings", "correction", "review",
                     "dead_letter", "trace", "heartbeat", "batch", "fence", "probe", "input_reset"}
    marker = next(orjson.loads(raw) for raw in log if is_marker(raw))
    with pytest.raises(ValidationError, match="from"):
        models.validate_python({key: value for key, value in marker.items() if key != "from"}, strict=True)


def _merged_and_split() -> list[bytes]:
    """A placeholder absorbed by the entity that names it, a merge of two services, and its split."""
    ledger = Ledger()
    ledger.at("2026-03-01T00:00:00Z").change("sheet").asserts("Service:billing", "owned_by", "Team:hr:T1").send()
    change = ledger.change("cmdb")
    change.event["assert"].append({"src": {"type": "Service", "id": "cmdb:S7", "name": "Billing"}, "rel": "owned_by",
                                   "dst": {"type": "Team", "id": "hr:T1"}})
    change.send()
    ledger.change("cmdb").asserts("Service:cmdb:S8", "depends_on", "Service:cmdb:S9").send()
    ledger.split(ledger.merge("Service:cmdb:S8", "Service:cmdb:S9", event_id="m-8"))
    ledger.merge("Service:cmdb:S8", "Service:cmdb:S9", event_id="m-9")
    return [line.encode() if isinstance(line, str) else line for line in ledger.lines]


def test_merges_and_placeholders_travel_on_the_log() -> None:
    """A rebuilt worker or a replica holds the same merges (the split one closed) and placeholders."""
    store, log = _logged_load(_merged_and_split())
    rebuilt = LedgerStore(MemoryKV())
    Replay(rebuilt).feed(log, lambda pending: rebuilt.commit(pending), {})
    assert list(rebuilt.merges("acme")) == list(store.merges("acme")) and len(store.merges("acme")) == 3
    assert [m.tx_to is None for m in rebuilt.merges("acme") if m.actor != "matcher"] == [False, True]
    assert rebuilt.has_placeholders("acme") and sorted(rebuilt.kv.scan(b"Q")) == sorted(store.kv.scan(b"Q"))


def _pending_with_a_large_correction() -> PendingLedger:
    from processors.outbox import CORRECTION_IDS_PER_RECORD

    pending = PendingLedger(LedgerStore(MemoryKV()))
    many = tuple(f"e{i}" for i in range(CORRECTION_IDS_PER_RECORD + 1))
    pending.corrections.append(Correction("c-1", "acme", "ev-1", 5, "revoke_source", many, ()))
    return pending


def test_an_input_reset_lets_the_batches_of_a_topic_made_anew_apply_from_its_first_offset() -> None:
    """A topic made anew restarts its offsets: without the worker's ``input_reset`` record on the log, a
    reader takes the new topic's first batches for ones it applied; after it, and only from a writer
    not fenced off, they apply."""
    from streams.worker.positions import input_reset_record

    lines = DEMO_EVENTS.read_bytes().splitlines()
    _, old_topic = _logged_load(lines[: len(lines) // 2])
    _, new_topic = _logged_load(lines[len(lines) // 2:])
    expected = LedgerStore(MemoryKV())
    for part in (old_topic, new_topic):
        Replay(expected).feed(part, lambda pending: expected.commit(pending), {})

    def replayed(stream: list[bytes]) -> dict[str, object]:
        store, seen = LedgerStore(MemoryKV()), {}
        Replay(store).feed(stream, lambda pending: store.commit(pending), seen)
        return _everything(store, "acme")

    reset = input_reset_record(0, [("in", 0)], None, "a new topic")
    assert replayed([*old_topic, reset, *new_topic]) == _everything(expected, "acme")
    assert replayed([*old_topic, *new_topic]) != _everything(expected, "acme"), "skipped without the reset"
    fenced_old = [_fence(0, 2), *_logged_load(lines[: len(lines) // 2], epoch=(0, 2))[1]]
    fenced_new = _logged_load(lines[len(lines) // 2:], epoch=(0, 2))[1]
    owners = input_reset_record(0, [("in", 0)], (0, 2), "a new topic")
    late = input_reset_record(0, [("in", 0)], (0, 1), "a late writer's")
    assert replayed([*fenced_old, owners, *fenced_new]) == _everything(expected, "acme")
    assert replayed([*fenced_old, late, *fenced_new]) == replayed([*old_topic, *new_topic])


def test_replaying_the_log_rebuilds_identity_edits_with_who_made_them() -> None:
    from pathlib import Path

    from state.identity_history import identity_history

    command = {"kind": "alias", "event_id": "a-1", "tenant": "acme", "entity": "Component:cmdb:CI0042",
               "alias": "CI0042", "actor": "carol", "reason": "the CI number people use"}
    store, log = _logged_load([*Path(DEMO_EVENTS).read_bytes().splitlines(), orjson.dumps(command)])
    rebuilt = LedgerStore(MemoryKV())
    Replay(rebuilt).feed(log, lambda pending: rebuilt.commit(pending), {})
    for entity in ("Component:cmdb:CI0042", "Team:hr:T-FINOPS"):
        original = [edit.as_json() for edit in identity_history(store, "acme", entity)]
        assert [edit.as_json() for edit in identity_history(rebuilt, "acme", entity)] == original
        assert any(edit["actor"] in ("carol", "alice") for edit in original), original


def test_a_replica_knows_every_statement_of_a_fact() -> None:
    """The filings travel on the log: revoking one version on a rebuilt worker leaves what another version
    and another record state, as on the writer, and revoking the rest ends it on both."""
    def change(event_id: str, record: str, version: str) -> bytes:
        return orjson.dumps({"kind": "change", "event_id": event_id, "tenant": "acme", "mode": "snapshot",
                             "source": {"system": "cmdb", "record": record, "version": version},
                             "detected_at": "2026-01-01T00:00:00Z",
                             "assert": [{"src": {"type": "Service", "id": "cmdb:A"}, "rel": "depends_on",
                                         "dst": {"type": "Service", "id": "cmdb:B"}, "evidence": record}]})

    def revoke(event_id: str, record: str, version: str | None) -> str:
        return orjson.dumps({"kind": "revoke_source", "event_id": event_id, "tenant": "acme", "reason": "corrupt",
                             "source": {"system": "cmdb", "record": record}
                             | ({"version": version} if version else {})}).decode()

    store, log = _logged_load([change("c-1", "svc/a", "v1"), change("c-2", "svc/a", "v2"),
                               change("c-3", "svc/b", "w1"), revoke("r-1", "svc/a", "v1").encode()])
    rebuilt = LedgerStore(MemoryKV())
    Replay(rebuilt).feed(log, lambda pending: rebuilt.commit(pending), {})
    rows = sorted(store.kv.scan(b"O"))
    assert sorted(rebuilt.kv.scan(b"O")) == rows and {unpack(key[1:])[1] for key, _ in rows} == {"f", "l", "r"}
    for kv in (store.kv, rebuilt.kv):
        ledger = Ledger(kv=kv)
        assert len(ledger.believed("Service:cmdb:A", "depends_on")) == 1, "v2 and svc/b still state it"
        ledger.send(revoke("r-2", "svc/a", "v2"))
        assert len(ledger.believed("Service:cmdb:A", "depends_on")) == 1, "svc/b still states it"
        ledger.send(revoke("r-3", "svc/b", None))
        assert ledger.believed("Service:cmdb:A", "depends_on") == []


def test_a_batch_that_filed_many_facts_sends_them_in_several_records(monkeypatch: pytest.MonkeyPatch) -> None:
    from processors import outbox
    from processors.model import Filing

    monkeypatch.setattr(outbox, "FILED_FACTS_PER_RECORD", 2)
    pending = PendingLedger(LedgerStore(MemoryKV()))
    for tx, facts in ((5, 1), (6, 2), (7, 1)):
        pending.add_filing(Filing("acme", "cmdb", "svc/a", tx, f"v{tx}", f"ev-{tx}",
                                  tuple((f"e{n}", None, None) for n in range(facts))))
    records = [orjson.loads(r.value) for r in outbox_for(pending, [], {("in", 0): 1}, "b-1", log_partitions=1)
               if r.topic == "edge-versions"]
    parts = [[f[3] for f in r["filings"]] for r in records if r["kind"] == "filings"]
    assert parts == [[5], [6], [7]]
    rebuilt = LedgerStore(MemoryKV())
    Replay(rebuilt).feed([orjson.dumps(r) for r in records], lambda held: rebuilt.commit(held), {})
    assert [f.tx for f in rebuilt.record_filings("acme", "cmdb", "svc/a")] == [5, 6, 7]
