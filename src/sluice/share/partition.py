"""One share-partition's in-flight records: which a member holds, which wait, which are
done; deterministic, no I/O (the broker's ``share_partitions`` drives it).

The *window* is the offsets ``[start_offset, end_offset)``: everything below it is
finished; everything from ``end_offset`` on has never been handed out. Inside it an
offset is *available* (waiting to be handed out, again), *acquired* by one member until
its lock deadline, or *finished* (acknowledged, archived, or no record at all: a control
batch, a compacted gap). Only the unfinished ones are kept, so the start offset is the
smallest of them (or the end offset). The window is at most
``group.share.partition.max.record.locks`` long, which bounds memory, the persisted
state and how far consumers may run ahead of a record that is slow to finish.

::

    available ──acquire──▶ acquired ──ACCEPT / GAP──▶ finished (acknowledged)
        ▲                     │  ──REJECT──────────▶ finished (archived: dead letter)
        │                     │  ──RENEW──▶ acquired, a new lock deadline
        └──RELEASE / lock ────┘
           expired / session closed   (archived instead once the delivery count has
                                       reached group.share.delivery.count.limit)

The delivery count goes up at every acquisition. Acquisition takes whole producer
batches by default (Kafka's ``batch_optimized`` acquire mode, KIP-1206: ``max_records``
and the window may be exceeded by the rest of the last batch started), or exactly up to
``max_records``, cutting inside a batch (``record_limit``). An acknowledgement batch is applied
whole or not at all: every offset in it must be acquired by the acknowledging member
(INVALID_RECORD_STATE otherwise), except that GAP may name an offset that has no record.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sluice.common.errors import ErrorCode
from sluice.share.state import DeliveryState, ShareState, StateBatch


class AckType(enum.IntEnum):
    """ShareFetch/ShareAcknowledge acknowledgement types."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class ArchiveReason(enum.Enum):
    REJECTED = "rejected"
    DELIVERY_COUNT_LIMIT = "delivery-count-limit"


@dataclass(frozen=True, slots=True)
class SharePartitionConfig:
    max_record_locks: int = 2_000
    """group.share.partition.max.record.locks: the longest the window may be."""
    delivery_count_limit: int = 5
    """group.share.delivery.count.limit: deliveries before a record is archived."""
    lock_duration_ms: int = 30_000
    """group.share.record.lock.duration.ms (or the group's share.record.lock.duration.ms)."""


@dataclass(frozen=True, slots=True)
class Acquired:
    """Offsets handed to a member in one fetch, all with the same delivery count."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class Archived:
    """A record that will not be delivered again: a candidate for the dead-letter topic."""

    offset: int
    delivery_count: int
    reason: ArchiveReason


@dataclass(frozen=True, slots=True)
class LogBatch:
    """What acquisition needs to know of a batch read from the partition's log."""

    base_offset: int
    last_offset: int
    deliverable: bool
    """False for a batch no consumer is given (a control batch: markers, parked
    delayed records): its offsets finish at once."""


@dataclass(slots=True)
class _Record:
    acquired: bool
    delivery_count: int
    member_id: str = ""
    lock_deadline_ms: int = 0
    batch_last_offset: int = -1
    """The last offset of the producer batch holding the record (-1: not known, as
    after loading persisted state)."""


class SharePartition:
    """The in-flight records of one share group on one partition, from its persisted
    :class:`ShareState`."""

    def __init__(self, state: ShareState, config: SharePartitionConfig) -> None:
        self.config = config
        self.state_epoch = state.state_epoch
        self.start_offset = state.start_offset
        self.end_offset = state.start_offset
        self._records: dict[int, _Record] = {}
        covered = state.start_offset
        for batch in state.batches:
            first = max(batch.first_offset, state.start_offset)
            # Offsets no batch covers between two batches were never finished: available.
            for offset in range(covered, first):
                self._records[offset] = _Record(False, 0)
            if batch.state in (DeliveryState.AVAILABLE, DeliveryState.ACQUIRED):
                for offset in range(first, batch.last_offset + 1):
                    self._records[offset] = _Record(False, batch.delivery_count)
            covered = max(covered, batch.last_offset + 1)
        self.end_offset = covered
        self._advance_start()

    # ================================================================ queries

    @property
    def room(self) -> int:
        """How many more offsets the window may take."""
        return self.config.max_record_locks - (self.end_offset - self.start_offset)

    def has_available(self) -> bool:
        """Some record in the window waits to be handed out again."""
        return any(not record.acquired for record in self._records.values())

    def acquired_count(self) -> int:
        return sum(1 for record in self._records.values() if record.acquired)

    def next_deadline_ms(self) -> int | None:
        """The earliest lock deadline, or None when nothing is acquired."""
        deadlines = [r.lock_deadline_ms for r in self._records.values() if r.acquired]
        return min(deadlines) if deadlines else None

    def holder(self, offset: int) -> str | None:
        """The member holding ``offset``, or None."""
        record = self._records.get(offset)
        return record.member_id if record is not None and record.acquired else None

    def snapshot(self, leader_epoch: int) -> ShareState:
        """The state to persist: the whole window as runs of one state and count. An
        acquired record is persisted as available with the count it has now (this
        delivery included), so a new leader hands it out again but counts it."""
        batches: list[StateBatch] = []
        run_first = self.start_offset
        run_key: tuple[DeliveryState, int] | None = None
        for offset in range(self.start_offset, self.end_offset):
            record = self._records.get(offset)
            key = (
                (DeliveryState.ACKNOWLEDGED, 0)
                if record is None
                else (DeliveryState.AVAILABLE, record.delivery_count)
            )
            if key != run_key:
                if run_key is not None:
                    batches.append(StateBatch(run_first, offset - 1, *run_key))
                run_first, run_key = offset, key
        if run_key is not None:
            batches.append(StateBatch(run_first, self.end_offset - 1, *run_key))
        return ShareState(self.state_epoch, self.start_offset, tuple(batches), leader_epoch)

    # ============================================================= acquiring

    def acquire_available(
        self, member_id: str, now_ms: int, max_records: int, *, whole_batches: bool = False
    ) -> list[Acquired]:
        """Hand out records of the window waiting to be delivered again, lowest offset
        first, at most ``max_records`` (with ``whole_batches``, then the rest of the
        producer batch of the last one taken)."""
        offsets: list[int] = []
        batch_end = -1
        for offset in sorted(self._records):
            if len(offsets) >= max_records and offset > batch_end:
                break
            record = self._records[offset]
            if not record.acquired:
                self._lock(record, member_id, now_ms)
                offsets.append(offset)
                if whole_batches and len(offsets) <= max_records:
                    batch_end = max(batch_end, record.batch_last_offset)
        return self._ranges(offsets)

    def acquire_new(
        self,
        member_id: str,
        now_ms: int,
        batches: Iterable[LogBatch],
        max_records: int,
        *,
        whole_batches: bool = False,
    ) -> list[Acquired]:
        """Take records from the log past the window: ``batches`` as read from the log
        at ``end_offset`` (the first may start below it), at most ``max_records`` and
        no further than the window allows.

        With ``whole_batches`` (Kafka's default acquire mode) a batch once started is
        taken to its end, so ``max_records`` and the window may be exceeded by the rest
        of that one batch ("for alignment of batch boundaries"); without, the last batch
        is cut (the member still receives it whole, but only the acquired offsets are
        its)."""
        acquired: list[int] = []
        for batch in batches:
            if batch.last_offset < self.end_offset:
                continue
            if self.room <= 0 or (len(acquired) >= max_records):
                break
            if not batch.deliverable:
                self.end_offset = batch.last_offset + 1
                continue
            first = max(batch.base_offset, self.end_offset)
            limit = batch.last_offset - first + 1
            if not whole_batches:
                limit = min(self.room, limit, max_records - len(acquired))
            for offset in range(first, first + limit):
                record = self._records[offset] = _Record(
                    False, 0, batch_last_offset=batch.last_offset
                )
                self._lock(record, member_id, now_ms)
                acquired.append(offset)
            self.end_offset = first + limit
            if first + limit <= batch.last_offset:
                break  # the window is full (or the records asked for were reached)
        self._advance_start()
        return self._ranges(acquired)

    def skip_to(self, offset: int) -> None:
        """Records below ``offset`` are gone from the log (retention, DeleteRecords): they
        are finished, wherever they were."""
        if offset <= self.start_offset:
            return
        for held in [o for o in self._records if o < offset]:
            del self._records[held]
        self.end_offset = max(self.end_offset, offset)
        self.start_offset = offset
        self._advance_start()

    # ========================================================= acknowledging

    def acknowledge(
        self,
        member_id: str,
        first_offset: int,
        last_offset: int,
        types: Sequence[int],
        now_ms: int,
    ) -> tuple[ErrorCode, list[Archived]]:
        """Apply one acknowledgement batch: one type for the whole range, or one per
        offset. Returns the error (nothing applied unless NONE) and the records it
        archived."""
        count = last_offset - first_offset + 1
        if count <= 0 or len(types) not in (1, count) or first_offset < 0:
            return ErrorCode.invalid_request, []
        try:
            kinds = [AckType(t) for t in types]
        except ValueError:
            return ErrorCode.invalid_request, []
        if len(kinds) == 1:
            kinds = kinds * count
        for offset, kind in zip(range(first_offset, last_offset + 1), kinds, strict=True):
            record = self._records.get(offset)
            held = record is not None and record.acquired and record.member_id == member_id
            finished = record is None and self.start_offset <= offset < self.end_offset
            below = offset < self.start_offset
            if not (held or (kind is AckType.GAP and (finished or below))):
                return ErrorCode.invalid_record_state, []
        archived: list[Archived] = []
        for offset, kind in zip(range(first_offset, last_offset + 1), kinds, strict=True):
            record = self._records.get(offset)
            if record is None:
                continue
            if kind is AckType.RENEW:
                record.lock_deadline_ms = now_ms + self.config.lock_duration_ms
            elif kind is AckType.RELEASE:
                archived += self._make_available(offset, record)
            else:
                del self._records[offset]
                if kind is AckType.REJECT:
                    archived.append(Archived(offset, record.delivery_count, ArchiveReason.REJECTED))
        self._advance_start()
        return ErrorCode.none, archived

    def expire_locks(self, now_ms: int) -> list[Archived]:
        """Locks past their deadline end: the records wait again (or are archived)."""
        archived: list[Archived] = []
        for offset, record in list(self._records.items()):
            if record.acquired and record.lock_deadline_ms <= now_ms:
                archived += self._make_available(offset, record)
        self._advance_start()
        return archived

    def release_member(self, member_id: str) -> list[Archived]:
        """The member's session closed: everything it holds waits again."""
        archived: list[Archived] = []
        for offset, record in list(self._records.items()):
            if record.acquired and record.member_id == member_id:
                archived += self._make_available(offset, record)
        self._advance_start()
        return archived

    # ================================================================ plumbing

    def _lock(self, record: _Record, member_id: str, now_ms: int) -> None:
        record.acquired = True
        record.member_id = member_id
        record.delivery_count += 1
        record.lock_deadline_ms = now_ms + self.config.lock_duration_ms

    def _make_available(self, offset: int, record: _Record) -> list[Archived]:
        if record.delivery_count >= self.config.delivery_count_limit:
            del self._records[offset]
            return [Archived(offset, record.delivery_count, ArchiveReason.DELIVERY_COUNT_LIMIT)]
        record.acquired = False
        record.member_id = ""
        record.lock_deadline_ms = 0
        return []

    def _advance_start(self) -> None:
        self.start_offset = min(self._records, default=self.end_offset)

    @staticmethod
    def _ranges_of(offsets: list[int], counts: list[int]) -> list[Acquired]:
        ranges: list[Acquired] = []
        for offset, count in zip(offsets, counts, strict=True):
            last = ranges[-1] if ranges else None
            if last is not None and last.last_offset + 1 == offset and last.delivery_count == count:
                ranges[-1] = Acquired(last.first_offset, offset, count)
            else:
                ranges.append(Acquired(offset, offset, count))
        return ranges

    def _ranges(self, offsets: list[int]) -> list[Acquired]:
        return self._ranges_of(offsets, [self._records[o].delivery_count for o in offsets])
