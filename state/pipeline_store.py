"""Worker bookkeeping kept in the ledger's own RocksDB, written in the same batch as the state:
the input offsets consumed (``G``) and the outbox of records still to be sent (``W``)."""

from __future__ import annotations

import orjson

from state.keys import pack, unpack
from state.kv import OrderedKV

OFFSET = b"G"
OUTBOX = b"W"
_OUTBOX_SEQUENCE = b"M" + pack("outbox_seq")


class PipelineStore:
    def __init__(self, kv: OrderedKV) -> None:
        self.kv = kv
        raw = kv.get(_OUTBOX_SEQUENCE)
        self._sequence = int(raw) if raw else 0

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

    def outbox_puts(self, records: list[tuple[str, str, bytes]]) -> tuple[list[tuple[bytes, bytes]], list[bytes]]:
        """Puts that park ``(topic, key, value)`` records in the outbox, and their keys for trimming."""
        puts, keys = [], []
        for topic, key, value in records:
            self._sequence += 1
            outbox_key = OUTBOX + pack(self._sequence)
            puts.append((outbox_key, orjson.dumps([topic, key, value.decode()])))
            keys.append(outbox_key)
        puts.append((_OUTBOX_SEQUENCE, str(self._sequence).encode()))
        return puts, keys

    def outbox(self) -> list[tuple[bytes, tuple[str, str, bytes]]]:
        """Records committed but not yet confirmed sent, in commit order."""
        pending = []
        for key, value in self.kv.scan(OUTBOX):
            topic, record_key, text = orjson.loads(value)
            pending.append((key, (topic, record_key, text.encode())))
        return pending

    def trim(self, keys: list[bytes]) -> None:
        if keys:
            self.kv.write([], keys)
