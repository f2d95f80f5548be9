"""Fence epochs: the group generation as librdkafka hands it over, and the era a group made anew moves to."""

import struct

import orjson
import pytest

from streams.fences import epoch_of, fence_record, generation_in, next_epoch


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
