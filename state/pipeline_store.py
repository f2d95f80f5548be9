"""Worker bookkeeping kept in the ledger's own RocksDB, written in the same batch as the state:
the input offsets consumed (``G``) and the outbox of records still to be sent (``W``); and the
state's lineage, the name this state claims partitions in (``streams.worker.claims``)."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import NamedTuple

import orjson

from state.keys import pack, unpack
from state.kv import OrderedKV
from state.layout import StateFormatError

OFFSET = b"G"
OUTBOX = b"W"
_OUTBOX_SEQUENCE = b"M" + pack("outbox_seq")
_LINEAGE = b"M" + pack("lineage")
_REBUILDING = b"M" + pack("rebuilding")
"""Log partitions this state claimed and has not finished rebuilding (one row each, ``pack(partition)``)."""
_GIVEN_UP = b"M" + pack("given_up")
"""Log partitions this state gave up in a rebalance, each with where the partition's log ended then,
the record id this state last sent there and the epoch of its fence there (``pack(partition)`` ->
``[OFFSET, RECORD_ID, [ERA, GENERATION] | null]``): of that partition, the state holds the log
before that offset, if the record before it is that one."""

_TOPIC_OF = b"M" + pack("topic_of")
"""The identity of the topic each stored offset was read from (``pack(topic, partition)`` -> identity,
``processors.positions``): an offset is resumed from only while its topic still has it."""

_FENCE = b"M" + pack("fence")
"""The last fence on each log partition (``pack(partition)`` -> ``[ERA, GENERATION]``, as a given-up
note holds it) that this state wrote (a worker: its markers there carry it, and a batch of its own
the log dropped shows by it) or read (a replica: ``streams.worker.fences``)."""


class GivenUp(NamedTuple):
    """Where a log partition was given up (``give_up`` also takes a plain (end, record id) pair)."""

    end: int
    """The log's end when the partition was given up."""
    record_id: str
    """The record id this state last sent there."""
    fence: tuple[int, int] | None = None
    """The epoch of this state's fence there then: the last fence before ``end``."""


_FRAME = struct.Struct(">HHIi")
"""Outbox frame header: the sizes of topic, key and value, and the partition (-1: the key's)."""
_FRAMED = b"\xfe\x02"
"""How an outbox row of ``_FRAME`` frames begins: a row that does not is refused, not misread."""

OutboxRecord = tuple[str, str, bytes, int]
"""(topic, key, value, partition): ``partition`` -1 lets the producer choose by key."""


class PipelineStore:
    def __init__(self, kv: OrderedKV, *, reader: bool = False) -> None:
        """``reader``: the bookkeeping of a state opened read-only beside its writer, which names no
        lineage of its own (one being cleared and rebuilt may have none for a moment)."""
        self.kv = kv
        raw = kv.get(_OUTBOX_SEQUENCE)
        self._sequence = int(raw) if raw else 0
        stored = kv.get(_LINEAGE)
        self.lineage = stored.decode() if stored else "" if reader else self._new_lineage()

    def reset(self) -> None:
        """Forget the outbox sequence, after the KV it lives in was cleared (``LedgerStore.reset``), and
        start a new lineage: what this state was is gone."""
        self._sequence = 0
        self.lineage = self._new_lineage()

    def _new_lineage(self) -> str:
        """A name for this state, kept as long as the state is: the worker claims its partitions in
        this name (``streams.worker.claims``), so that any other state's claim shows another worker took one over."""
        lineage = uuid.uuid4().hex
        self.kv.write([(_LINEAGE, lineage.encode())])
        return lineage

    def rebuilding(self) -> set[int]:
        """The log partitions whose rebuild this state began and did not finish."""
        return {int(unpack(key[len(_REBUILDING):])[0]) for key, _ in self.kv.scan(_REBUILDING)}

    def begin_rebuilds(self, partitions: Sequence[int]) -> None:
        """Mark the partitions as being rebuilt before claiming them: the claim then says this state
        owns them, and only the marks still say, after a crash, that their rebuild is unfinished."""
        if partitions:
            self.kv.write([(_REBUILDING + pack(partition), b"") for partition in partitions])

    def end_rebuild(self, partition: int) -> None:
        """The partition is rebuilt to its log's end: it is this state's again, from there on."""
        self.kv.write([], [_REBUILDING + pack(partition), _GIVEN_UP + pack(partition)])

    def given_up_at(self) -> dict[int, GivenUp]:
        """Where each log partition this state gave up ended when it did, and what it last sent there (``give_up``)."""
        found = {}
        for key, value in self.kv.scan(_GIVEN_UP):
            partition = int(unpack(key[len(_GIVEN_UP):])[0])
            if not value.startswith(b"["):
                raise StateFormatError(f"log partition {partition}'s given-up note {value[:40]!r} is not "
                                       "[OFFSET, RECORD_ID, EPOCH]: rebuild the state from the edge-versions log")
            end, record_id, fence = orjson.loads(value)
            found[partition] = GivenUp(int(end), str(record_id), tuple(fence) if fence is not None else None)
        return found

    def give_up(self, log_ends: dict[int, GivenUp]) -> None:
        """Note, per log partition, where its log ends as this state gives the partition up, and the id
        of the last record it sent there, and its fence there: if the partition comes back after
        another worker held it, a rebuild need replay only the log from there, once it finds that
        record right before, judging batches by that fence."""
        if log_ends:
            self.kv.write([(_GIVEN_UP + pack(partition), orjson.dumps(list(GivenUp(*note))))
                           for partition, note in log_ends.items()])

    def take_back(self, partitions: Sequence[int]) -> None:
        """Forget where these partitions were given up: the state applies their inputs again, and then
        holds more than the log did there."""
        if partitions:
            self.kv.write([], [_GIVEN_UP + pack(partition) for partition in partitions])

    def fences(self) -> dict[int, tuple[int, int]]:
        """The last fence's epoch (era, generation) on each log partition, as this state knows it."""
        found = {}
        for key, value in self.kv.scan(_FENCE):
            era, generation = orjson.loads(value)
            found[int(unpack(key[len(_FENCE):])[0])] = (int(era), int(generation))
        return found

    def fence_puts(self, fences: dict[int, tuple[int, int]]) -> list[tuple[bytes, bytes]]:
        return [(_FENCE + pack(partition), orjson.dumps(list(epoch))) for partition, epoch in fences.items()]

    def record_fences(self, fences: dict[int, tuple[int, int]]) -> None:
        if fences:
            self.kv.write(self.fence_puts(fences))

    def input_offsets(self) -> dict[tuple[str, int], int]:
        """The last offset applied, per input (topic, partition)."""
        offsets = {}
        for key, value in self.kv.scan(OFFSET):
            topic, partition = unpack(key[1:])
            offsets[(str(topic), int(partition))] = int(value)
        return offsets

    def topic_identities(self) -> dict[tuple[str, int], str]:
        """The identity of the topic each position's offset was read from, where one was recorded."""
        found = {}
        for key, value in self.kv.scan(_TOPIC_OF):
            topic, partition = unpack(key[len(_TOPIC_OF):])
            found[(str(topic), int(partition))] = value.decode()
        return found

    def adopt_positions(self, identities: dict[tuple[str, int], str], reset: Sequence[tuple[str, int]],
                        forget_fences: Sequence[int] = ()) -> None:
        """Record the topic identity of each position, and forget the offsets of ``reset`` ones (-1: read
        from the start) and the fences read on the log partitions ``forget_fences`` (a log made anew
        starts without them), in one write: a crash between them cannot leave an old offset or fence
        recorded for a new topic."""
        puts = [(_TOPIC_OF + pack(topic, partition), identity.encode())
                for (topic, partition), identity in identities.items()]
        puts += self.offset_puts(dict.fromkeys(reset, -1))
        deletes = [_FENCE + pack(partition) for partition in forget_fences]
        if puts or deletes:
            self.kv.write(puts, deletes)

    def offset_puts(self, offsets: dict[tuple[str, int], int]) -> list[tuple[bytes, bytes]]:
        return [(OFFSET + pack(topic, partition), str(offset).encode())
                for (topic, partition), offset in offsets.items()]

    def outbox_puts(self, records: Sequence[OutboxRecord]) -> tuple[list[tuple[bytes, bytes]], list[bytes]]:
        """Puts that park a batch's ``(topic, key, value, partition)`` records in the outbox, and their
        keys for trimming.

        Speed: the whole batch is one row (length-prefixed frames), so parking and trimming cost one
        put and one delete per batch rather than per record."""
        if not records:
            return [], []
        self._sequence += 1
        outbox_key = OUTBOX + pack(self._sequence)
        frames = [_FRAMED]
        for topic, key, value, partition in records:
            topic_bytes, key_bytes = topic.encode(), key.encode()
            frames.append(_FRAME.pack(len(topic_bytes), len(key_bytes), len(value), partition))
            frames += (topic_bytes, key_bytes, value)
        return [(outbox_key, b"".join(frames)), (_OUTBOX_SEQUENCE, str(self._sequence).encode())], [outbox_key]

    def outbox(self) -> list[tuple[bytes, OutboxRecord]]:
        """Records committed but not yet confirmed sent, in commit order, each with its outbox row's key."""
        pending = []
        for row_key, row in self.kv.scan(OUTBOX):
            if not row.startswith(_FRAMED):
                raise StateFormatError(f"the outbox row {row_key!r} is not in frames this edgeledger writes: "
                                       "rebuild the state from the edge-versions log")
            position = len(_FRAMED)
            while position < len(row):
                topic_size, key_size, value_size, partition = _FRAME.unpack_from(row, position)
                position += _FRAME.size
                topic = row[position:position + topic_size].decode()
                position += topic_size
                key = row[position:position + key_size].decode()
                position += key_size
                pending.append((row_key, (topic, key, row[position:position + value_size], partition)))
                position += value_size
        return pending

    def trim(self, keys: list[bytes]) -> None:
        if keys:
            self.kv.write([], sorted(set(keys)))
