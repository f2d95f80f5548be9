"""What a ledger worker holds and knows between batches, shared by its parts (``streams.worker.loop``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING

from processors.model import Epoch

InputPosition = tuple[str, int]
"""(input topic, partition number)."""
ParkedRecord = tuple[bytes, tuple[str, str, bytes, int]]
"""An outbox row: its key, and the record (topic, key, value, partition) it holds."""


@dataclass
class Holdings:
    """The worker's partitions, what its state applied of them, and what it sent, fenced and parked."""

    log_partitions: int
    """Partitions of ``edge-versions`` (as the cluster has it, once the worker runs)."""
    applied_offsets: dict[InputPosition, int]
    """The last input offset the state applied, per input partition."""
    inputs: list[str] = field(default_factory=list)
    """The input topics' names."""
    assigned: set[InputPosition] = field(default_factory=set)
    """The input partitions whose records are applied: assigned, and not waiting for a rebuild."""
    parked: list[ParkedRecord] = field(default_factory=list)
    """Outbox records committed but not known to be sent, settled at the next assignment."""
    last_sent: dict[int, str] = field(default_factory=dict)
    """Per log partition: the id of the last record this worker sent there (its last batch's marker
    without a tenant), since it last took the partition (``Assignment.note_given_up``)."""
    fences: dict[int, Epoch] = field(default_factory=dict)
    """Per log partition: the epoch of the fence this worker put there when it last took the
    partition; its markers there carry it (``streams.worker.fences``)."""
    batch_first: dict[InputPosition, int] = field(default_factory=dict)
    """The first input offset of each input partition in the batch being applied."""
    must_rejoin: bool = False
    """An assignment could not fence its partitions: the loop lets them go and joins again."""
    assigned_at: float = field(default_factory=time.monotonic)
    """When the last assignment came (an assignment is not idle time)."""

    def resume_offset(self, topic: str, partition: int) -> int:
        """Right after the last offset this state applied (not the group's), or the beginning."""
        applied = self.applied_offsets.get((topic, partition))
        return applied + 1 if applied is not None else OFFSET_BEGINNING

    def forget(self) -> None:
        """The local state is discarded: nothing of it was applied, parked, sent or fenced. Emptied in
        place, so that no collaborator can keep reading a copy of what was discarded."""
        self.applied_offsets.clear()
        self.parked = []
        self.fences.clear()
        self.last_sent.clear()
