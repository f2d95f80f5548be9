"""Fence epochs: the group generation as librdkafka hands it over, and the era a group made anew moves to."""

import struct

import orjson
import pytest

from streams.worker.fences import Fencer, NotAMember, epoch_of, fence_record, generation_in, next_epoch


def metadata(generation: int) -> bytes:
    """librdkafka's serialised consumer group metadata: magic, generation, group id, member id, no instance id."""
    return b"CGMDv2:" + struct.pack("=i", generation) + b"edgeledger-ledger\x00rdkafka-1234\x00\x00"


def test_the_generation_is_read_from_the_group_metadata() -> None:
    assert [generation_in(metadata(g)) for g in (-1, 0, 7, 2**31 - 1)] == [-1, 0, 7, 2**31 - 1]
    with pytest.raises(RuntimeError, match="unexpected consumer group metadata"):
        generation_in(b"CGMDv1:\x00\x00\x00\x00")


def test_an_epoch_stays_in_its_era_while_generations_rise_and_moves_on_when_they_start_again() -> None:
    assert next_epoch(None, 4) == (0, 4)
    assert next_epoch((0, 4), 9) == (0, 9)
    assert next_epoch((0, 9), 2) == (1, 2), "a group made anew starts its generations again"
    assert next_epoch((1, 2), 2) == (2, 2), "never at or below the last fence"
    assert next_epoch((1, 2), 3) > (1, 2) and next_epoch((1, 2), 0) > (1, 2)


def test_a_fence_record_carries_its_epoch() -> None:
    record_id, value = fence_record(3, (1, 5), "w1", "lineage-1")
    record = orjson.loads(value)
    assert (record["kind"], record["record_id"], record["partition"]) == ("fence", record_id, 3)
    assert epoch_of(record) == (1, 5)
    assert epoch_of({"kind": "batch"}) is None


class Delivered:
    """A stand-in producer for ``deliver``: keeps what it is given, delivers everything."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def produce(self, topic: str, value: bytes, key: bytes, partition: int, on_delivery: object) -> None:
        """``Producer.produce``'s parameters in its order (``deliver`` passes them by position)."""
        self.values.append(value)

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0


def fencer(generation: int, member: bool) -> tuple[Fencer, Delivered, list[dict]]:
    producer, recorded = Delivered(), []
    return Fencer(producer, "log", "w1", lambda: "lineage-1", lambda: generation,  # type: ignore[arg-type]
                  lambda partition: member, recorded.append), producer, recorded


def test_a_worker_the_group_does_not_count_a_member_does_not_move_to_the_next_era() -> None:
    """Dropped from the group, a worker of generation 5 reads the new owner's fence of generation 6:
    by its generation it looks like a member of a group made anew, and its fence in the next era would
    outrank the owner's. The group is asked first, and it writes nothing."""
    dropped, produced, recorded = fencer(5, member=False)
    with pytest.raises(NotAMember):
        dropped.fence({0: (0, 6)})
    assert produced.values == [] and recorded == []

    made_anew, produced, recorded = fencer(5, member=True)
    (epoch, record_id), = made_anew.fence({0: (0, 6)}).values()
    assert epoch == (1, 5) and recorded == [{0: (1, 5)}]
    assert [orjson.loads(value)["record_id"] for value in produced.values] == [record_id]

    rising, produced, _ = fencer(7, member=False)  # within its era a fence needs no question
    assert [epoch for epoch, _ in rising.fence({0: (0, 6), 1: None}).values()] == [(0, 7), (0, 7)]
    with pytest.raises(NotAMember):
        fencer(-1, member=True)[0].fence({0: None})
