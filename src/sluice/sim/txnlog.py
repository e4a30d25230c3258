"""What a partition's simulated log says of transactions: each producer's open
transaction (the offset it began at), the transactions completed (their markers), the
aborted ones a read_committed fetch is told of, and each producer's latest epoch. From
them follows a replica's last stable offset.

This is what Kafka's producer state manager and aborted-transaction index keep for every
replica, leader or follower. It is brought up to date lazily, from the offset it last
looked at to the log end; a log that was truncated or lost its tail since (the last
record looked at is no longer in its place) is looked at again from the start.

The last stable offset is Kafka's: the first offset of the oldest transaction that is
not yet stable, never above the high watermark. A transaction is unstable while it is
open, and also once its marker is written but not yet below the high watermark (a
leader change could still cut that marker off)."""

from __future__ import annotations

from dataclasses import dataclass, field
from weakref import WeakKeyDictionary

from sluice.sim.disk import SimLog, SimRecord


@dataclass(frozen=True, slots=True)
class CompletedTransaction:
    """A producer's transaction from its first record to its marker (both offsets)."""

    producer_id: int
    first_offset: int
    last_offset: int
    committed: bool


@dataclass
class LogTransactions:
    open: dict[int, int] = field(default_factory=dict)
    """Producer id → the offset of the first record of its open transaction."""
    completed: list[CompletedTransaction] = field(default_factory=list)
    """In the order of their markers."""
    producer_epochs: dict[int, int] = field(default_factory=dict)
    """Producer id → the highest producer epoch of its records and markers here."""
    _looked_at: int = 0
    _last: SimRecord | None = None

    def catch_up(self, log: SimLog) -> None:
        records = log.records
        looked_at = self._looked_at
        if looked_at > len(records) or (looked_at and records[looked_at - 1] is not self._last):
            self.open.clear()
            self.completed.clear()
            self.producer_epochs.clear()
            looked_at = 0
        for offset in range(looked_at, len(records)):
            self._look(offset, records[offset])
        self._looked_at = len(records)
        self._last = records[-1] if records else None

    def _look(self, offset: int, record: SimRecord) -> None:
        producer_id = record.producer_id
        if producer_id < 0:
            return
        if record.producer_epoch > self.producer_epochs.get(producer_id, -1):
            self.producer_epochs[producer_id] = record.producer_epoch
        if record.control is not None:
            first = self.open.pop(producer_id, None)
            if first is not None:
                self.completed.append(
                    CompletedTransaction(producer_id, first, offset, record.control == "commit")
                )
        elif record.transactional and producer_id not in self.open:
            self.open[producer_id] = offset


_INDEXES: WeakKeyDictionary[SimLog, LogTransactions] = WeakKeyDictionary()


def transactions(log: SimLog) -> LogTransactions:
    """``log``'s transactions, up to its end."""
    found = _INDEXES.get(log)
    if found is None:
        found = _INDEXES[log] = LogTransactions()
    found.catch_up(log)
    return found


def last_stable_offset(log: SimLog) -> int:
    """The first offset of the oldest unstable transaction, at most the high watermark."""
    state = transactions(log)
    high_watermark = log.high_watermark
    stable = min(state.open.values(), default=high_watermark)
    for completed in reversed(state.completed):
        if completed.last_offset < high_watermark:
            break
        stable = min(stable, completed.first_offset)
    return min(stable, high_watermark)


def aborted_between(log: SimLog, start: int, end: int) -> list[CompletedTransaction]:
    """The aborted transactions a fetch of ``[start, end)`` is told of: those begun below
    ``end`` whose ABORT marker is at ``start`` or later."""
    return [
        completed
        for completed in transactions(log).completed
        if not completed.committed
        and completed.first_offset < end
        and completed.last_offset >= start
    ]
