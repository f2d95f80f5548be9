"""Worker bookkeeping kept in the ledger's own RocksDB, written in the same batch as the state:
the input offsets consumed (``G``) and the outbox of records still to be sent (``W``)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from state.keys import pack, unpack
from state.kv import OrderedKV

OFFSET = b"G"
OUTBOX = b"W"
_OUTBOX_SEQUENCE = b"M" + pack("outbox_seq")
_FRAME = struct.Struct(">HHI")
"""Outbox frame header: the sizes of topic, key and value."""


class PipelineStore:
    def __init__(self, kv: OrderedKV) -> None:
        self.kv = kv
        raw = kv.get(_OUTBOX_SEQUENCE)
        self._sequence = int(raw) if raw else 0

    def reset(self) -> None:
        """Forget the outbox sequence, after the KV it lives in was cleared (``LedgerStore.reset``)."""
        self._sequence = 0

    def input_offsets(self) -> dict[tuple[str, int], int]:
        """The last offset applied, per input (topic, partition)."""
        offsets = {}
        for key, value in self.kv.scan(OFFSET):
            topic, partition = unpack(key[1:])
            offsets[(str(topic), int(partition))] = int(value)
        return offsets

    def offset_puts(self, offsets: dict[tuple[str, int], int]) -> list[tuple[bytes, bytes]]:
        return [(OFFSET + pack(topic, partition), str(offset).encode())
                for (topic, partition), offset in offsets.items()]

    def outbox_puts(self, records: Sequence[tuple[str, str, bytes]]) -> tuple[list[tuple[bytes, bytes]], list[bytes]]:
        """Puts that park a batch's ``(topic, key, value)`` records in the outbox, and their keys for trimming.

        Speed: the whole batch is one row (length-prefixed frames), so parking and trimming cost one
        put and one delete per batch rather than per record."""
        if not records:
            return [], []
        self._sequence += 1
        outbox_key = OUTBOX + pack(self._sequence)
        frames = []
        for topic, key, value in records:
            topic_bytes, key_bytes = topic.encode(), key.encode()
            frames.append(_FRAME.pack(len(topic_bytes), len(key_bytes), len(value)))
            frames += (topic_bytes, key_bytes, value)
        return [(outbox_key, b"".join(frames)), (_OUTBOX_SEQUENCE, str(self._sequence).encode())], [outbox_key]

    def outbox(self) -> list[tuple[bytes, tuple[str, str, bytes]]]:
        """Records committed but not yet confirmed sent, in commit order, each with its outbox row's key."""
        pending = []
        for row_key, row in self.kv.scan(OUTBOX):
            position = 0
            while position < len(row):
                topic_size, key_size, value_size = _FRAME.unpack_from(row, position)
                position += _FRAME.size
                topic = row[position:position + topic_size].decode()
                position += topic_size
                key = row[position:position + key_size].decode()
                position += key_size
                pending.append((row_key, (topic, key, row[position:position + value_size])))
                position += value_size
        return pending

    def trim(self, keys: list[bytes]) -> None:
        if keys:
            self.kv.write([], sorted(set(keys)))
