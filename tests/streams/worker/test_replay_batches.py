"""What the replay agent does at a batch marker, without a broker: the records of the traces the
batch's changes touched, and of traces recorded in the batch that earlier changes had touched."""

from pathlib import Path

import orjson

from schemas.ontology import default_ontology
from state.changes import LedgerFollower
from state.kv import MemoryKV, RocksKV
from streams.worker.replay_agent import BatchReplayer
from tests.state.test_replays import TRACES, late_changes, organisation
from tests.streams.worker.test_replay_agent import EXPECTED
from tests.support.harness import Ledger


def test_a_marker_replays_new_traces_that_earlier_changes_touched_and_a_repeated_marker_nothing(
        tmp_path: Path) -> None:
    ledger = Ledger(kv=RocksKV(tmp_path / "state"))
    organisation(ledger)
    late_changes(ledger)
    follower = LedgerFollower(tmp_path / "state", min_interval_s=0.0)
    replayer = BatchReplayer(follower, MemoryKV(), default_ontology(), "replay-results")
    first = ledger.store.last_tx()
    assert replayer.caught_up(first)
    assert replayer.records("b1", "acme", first) == []
    replayer.done("acme", first)
    # Recorded on 4 May, answers as known on 22 April: the 3 May changes came after what they saw.
    ledger.at("2026-05-04T00:00:00Z").send(*TRACES)
    second = ledger.store.last_tx()
    assert replayer.caught_up(second)
    records = [orjson.loads(value) for _, _, value in replayer.records("b2", "acme", second)]
    assert {r["trace_id"]: r["verdict"] for r in records} == EXPECTED
    assert {r["record_id"] for r in records} == {f"acme/b2/{trace_id}" for trace_id in EXPECTED}
    own = next(r for r in records if r["trace_id"] == "own-c-ext")
    assert [c["event_id"] for c in own["changes"]] == ["own-fix"]
    replayer.done("acme", second)
    assert replayer.records("b2", "acme", second) == [], "a marker seen again after a restart"
    follower.close()
