"""Delayed delivery on the broker: parking produced batches, and firing due records.

The produce path hands each batch that mentions Sluice's headers (or goes to a topic
with ``sluice.delivery.delay.ms``) to :func:`park_if_delayed`, which turns a batch
holding any delayed record into a parked batch (see
:mod:`sluice.protocol.records.delayed`); the partition log's delay index picks it up.

:class:`DelayScheduler` fires the parked records of the partitions this broker leads.
It keeps only the near future in memory::

    index (SQLite, per partition) ──due(up_to = now + WINDOW, LOAD_MAX)──▶ heap
        ▲ parked batches appended          produce: parked(tp, [(due, offset)])
        │ fired batches appended  ◀──fire── one task: sleep until the heap's first due
                                            time; pop what is due, check it is still
                                            ready (not replaced, cancelled, fired),
                                            read it back, append one fired batch

Per partition the heap holds every ready record up to a *horizon* position (due time,
offset): the load reads up to ``now + WINDOW`` or ``LOAD_MAX`` records, and a record
parked later is pushed at once when it sorts before the horizon (else a later load finds
it). The horizon moves on as the heap drains. Leadership is checked on every fire and
every ``LEADERS_SCAN_S``: a new leader starts firing from its own index, kept by the
replica fetcher while it followed; one that lost leadership drops its heap.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final, Protocol

from sluice.broker.replication.partition import Partition
from sluice.common import errors
from sluice.common.clock import Clock
from sluice.common.config import TopicConfig
from sluice.common.ids import TopicPartition
from sluice.protocol.records.batch import BatchHeader, TimestampType
from sluice.protocol.records.builder import decode_batch
from sluice.protocol.records.delayed import (
    FIRED_PRODUCER_ID,
    Delivery,
    ParkedRecord,
    build_fired_batch,
    build_moved_batch,
    build_parked_batch,
    decode_parked,
    delivery_of,
)
from sluice.storage import PartitionLog

log = logging.getLogger(__name__)

SLUICE_HEADER_PREFIX: Final = b"x-sluice-"
"""The produce check looks for this in a batch's records before anything is decoded."""

WINDOW_MS: Final = 30_000
"""How far ahead of now the heap is filled from the index."""
LOAD_MAX: Final = 10_000
"""A load brings at most this many records of a partition into memory; records parked
meanwhile that sort before what was loaded join them, up to twice this, and past that
the partition is loaded again from the index (so memory per partition stays bounded)."""
FIRE_RECORDS_MAX: Final = 500
FIRE_BYTES_MAX: Final = 512 * 1024
"""One fired batch holds at most this many records and about this many bytes."""
LEADERS_SCAN_S: Final = 1.0
"""How often the scheduler looks for partitions it came to lead (or no longer leads)."""


def park_if_delayed(
    records: bytes, header: BatchHeader, config: TopicConfig, now_ms: int
) -> tuple[bytes, list[Delivery]] | None:
    """The parked batch for a produced batch holding a delayed record, with each
    record's delivery (due now for the others); None when no record is delayed. Raises
    InvalidRecord for a bad delay header (naming it)."""
    if header.producer_id == FIRED_PRODUCER_ID:
        raise errors.InvalidRecord(f"producer id {FIRED_PRODUCER_ID} is the broker's own")
    decoded = decode_batch(records)
    deliveries = [
        delivery_of(record.headers, now_ms=now_ms, topic_delay_ms=config.sluice_delivery_delay_ms)
        for record in decoded.records
    ]
    if all(delivery is None for delivery in deliveries):
        return None
    due = [Delivery(now_ms) if delivery is None else delivery for delivery in deliveries]
    return build_parked_batch(header, decoded.records, due), due


class Partitions(Protocol):
    """The partitions hosted here (the replica manager)."""

    def __iter__(self) -> Iterator[Partition]: ...

    def find(self, topic_partition: TopicPartition) -> Partition | None: ...


@dataclass
class _Tracked:
    """A partition whose parked records this broker fires."""

    leader_epoch: int
    generation: int
    """Heap entries of an earlier tracking of the partition (another epoch) are stale."""
    revision: int
    """The index's revision when loaded: a newer one (a commit, a truncation) reloads."""
    horizon: tuple[int, int] = (-(2**63), -1)
    """Every ready record at or before this (due time, offset) is in the heap or fired."""
    loaded_to_ms: int | None = None
    """Set when the last load reached its time limit (fewer than LOAD_MAX found): every
    ready record due by then is in the heap or fired."""
    in_heap: int = 0


_Entry = tuple[int, int, int, TopicPartition]
"""(due time, offset, generation, partition): tuples, compared in C by the heap."""


class DelayScheduler:
    """Fires due parked records of the partitions led here (see the module docstring)."""

    def __init__(self, replicas: Partitions, clock: Clock) -> None:
        self._replicas = replicas
        self._clock = clock
        self._tracked: dict[TopicPartition, _Tracked] = {}
        self._heap: list[_Entry] = []
        self._generations = itertools.count()
        self._wake = asyncio.Event()
        self._leaders_seen_ms: int | None = None
        """When the partitions led here were last looked at (None: look now)."""
        self.fired_records = 0

    def wake(self) -> None:
        """Look again now, at leadership too (metadata applied, a manual clock moved)."""
        self._leaders_seen_ms = None
        self._wake.set()

    def parked(self, topic_partition: TopicPartition, due: Iterable[tuple[int, int]]) -> None:
        """Records (due time, offset) were just parked in a partition led here."""
        tracked = self._tracked.get(topic_partition)
        if tracked is None:
            self.wake()  # a partition's first parked records: track it
            return
        pushed = False
        for due_ms, offset in due:
            if (due_ms, offset) <= tracked.horizon:
                self._push(topic_partition, tracked, due_ms, offset)
                pushed = True
        if tracked.in_heap > 2 * LOAD_MAX:
            self._unload(topic_partition, tracked)
        if pushed:
            self._wake.set()

    def _unload(self, topic_partition: TopicPartition, tracked: _Tracked) -> None:
        """Forget what is loaded of a partition; the next step loads it again."""
        self._heap = [entry for entry in self._heap if entry[3] != topic_partition]
        heapq.heapify(self._heap)
        tracked.in_heap = 0
        tracked.horizon = (-(2**63), -1)
        tracked.loaded_to_ms = None

    def _push(
        self, topic_partition: TopicPartition, tracked: _Tracked, due_ms: int, offset: int
    ) -> None:
        heapq.heappush(self._heap, (due_ms, offset, tracked.generation, topic_partition))
        tracked.in_heap += 1

    @property
    def loaded(self) -> int:
        """Records held in memory (the heap), whatever the backlog on disk."""
        return len(self._heap)

    async def run(self) -> None:
        while True:
            now_ms = self._clock.wall_ms()
            await self._sleep(self.step(now_ms) - now_ms)

    def step(self, now_ms: int) -> int:
        """Follow leadership (when woken, or every LEADERS_SCAN_S: it looks at every
        partition hosted here), load what the window needs, fire what is due at
        ``now_ms``; returns when to step next (wall-clock milliseconds)."""
        seen = self._leaders_seen_ms
        if seen is None or not seen <= now_ms < seen + int(LEADERS_SCAN_S * 1000):
            self._follow_leadership()
            self._leaders_seen_ms = now_ms
        self._refill(now_ms)
        self._fire_due(now_ms)
        return self._next_wake_ms(now_ms)

    async def _sleep(self, ms: int) -> None:
        self._wake.clear()
        # asyncio.timeout, not wait_for, which on Python 3.11 can lose a cancellation
        # that comes as the event is set: then this loop never ends (cpython#86296).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(max(ms, 0) / 1000, LEADERS_SCAN_S)):
                await self._wake.wait()

    def _next_wake_ms(self, now_ms: int) -> int:
        """The heap's first due time, or when a partition's loaded window runs short."""
        candidates = [now_ms + int(LEADERS_SCAN_S * 1000)]
        if self._heap:
            candidates.append(self._heap[0][0])
        for tracked in self._tracked.values():
            if tracked.loaded_to_ms is not None:
                candidates.append(tracked.loaded_to_ms - WINDOW_MS // 2)
            elif tracked.in_heap < LOAD_MAX // 2:
                candidates.append(now_ms)  # a long backlog ran short: load more now
        return min(candidates)

    # -- leadership ----------------------------------------------------------------

    def _follow_leadership(self) -> None:
        led: dict[TopicPartition, tuple[int, int]] = {}
        for partition in self._replicas:
            index = partition.log.delays.index
            if partition.is_leader and not partition.detached and index is not None:
                led[partition.topic_partition] = (partition.leader_epoch, index.revision)
                partition.log.delays.on_revision = self.wake
        for topic_partition, tracked in list(self._tracked.items()):
            if led.get(topic_partition) != (tracked.leader_epoch, tracked.revision):
                del self._tracked[topic_partition]
        for topic_partition, (epoch, revision) in led.items():
            if topic_partition not in self._tracked:
                self._tracked[topic_partition] = _Tracked(epoch, next(self._generations), revision)

    # -- loading ---------------------------------------------------------------------

    def _refill(self, now_ms: int) -> None:
        """Load what each partition has due before now + WINDOW and not yet loaded."""
        up_to_ms = now_ms + WINDOW_MS
        for topic_partition, tracked in self._tracked.items():
            if tracked.loaded_to_ms is not None:
                if tracked.loaded_to_ms >= now_ms + WINDOW_MS // 2:
                    continue
            elif tracked.in_heap >= LOAD_MAX // 2:
                continue
            partition = self._replicas.find(topic_partition)
            limit = LOAD_MAX - tracked.in_heap
            if partition is None or limit <= 0:
                continue
            found = partition.log.delays.due(up_to_ms=up_to_ms, after=tracked.horizon, limit=limit)
            for record in found:
                self._push(topic_partition, tracked, record.due_ms, record.offset)
            if len(found) < limit:
                tracked.horizon = max(tracked.horizon, (up_to_ms, 2**63 - 1))
                tracked.loaded_to_ms = up_to_ms
            else:
                tracked.horizon = (found[-1].due_ms, found[-1].offset)
                tracked.loaded_to_ms = None

    # -- firing ----------------------------------------------------------------------

    def _fire_due(self, now_ms: int) -> None:
        due: dict[TopicPartition, list[int]] = {}
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            _, offset, generation, topic_partition = heapq.heappop(heap)
            tracked = self._tracked.get(topic_partition)
            if tracked is None or tracked.generation != generation:
                continue
            tracked.in_heap -= 1
            due.setdefault(topic_partition, []).append(offset)
        for topic_partition, offsets in due.items():
            try:
                self._fire(topic_partition, offsets)
            except errors.KafkaError as e:
                # Not the leader any more, or the log refused: the next leader (or a
                # later load here) fires them from the index.
                log.info("%s: due records not fired now: %s", topic_partition, e)
                self._tracked.pop(topic_partition, None)

    def _fire(self, topic_partition: TopicPartition, offsets: list[int]) -> None:
        partition = self._replicas.find(topic_partition)
        index = None if partition is None else partition.log.delays.index
        if partition is None or index is None or not partition.is_leader:
            self._tracked.pop(topic_partition, None)
            return
        ready_set = index.ready_among(offsets)
        ready = [offset for offset in dict.fromkeys(offsets) if offset in ready_set]
        timestamp_type = (
            TimestampType.LOG_APPEND_TIME
            if partition.log.config.message_timestamp_type == "LogAppendTime"
            else TimestampType.CREATE_TIME
        )
        for chunk in _chunks(read_parked(partition.log, ready)):
            partition.append(
                bytearray(build_fired_batch(chunk, timestamp_type=timestamp_type)),
                acks=1,
                fired_origins=[record.offset for record in chunk],
            )
            self.fired_records += len(chunk)


def park_again_before_retention(partition: Partition, now_ms: int) -> int:
    """On a leader: park again, at the log end, the ready records that retention would
    otherwise delete with their segments. Returns how many moved."""
    log_ = partition.log
    if not partition.is_leader or log_.delays.index is None:
        return 0
    offsets = log_.delayed_records_blocking_retention(now_ms)
    moved = 0
    for chunk in _chunks(read_parked(log_, offsets)):
        partition.append(bytearray(build_moved_batch(chunk)), acks=1)
        moved += len(chunk)
    return moved


def read_parked(log_: PartitionLog, offsets: list[int]) -> list[ParkedRecord]:
    """The parked records at ``offsets``, in that order (one read and decode per batch)."""
    wanted = sorted(offsets)
    found: dict[int, ParkedRecord] = {}
    i = 0
    while i < len(wanted):
        if wanted[i] < log_.log_start_offset:
            i += 1  # deleted (DeleteRecords): nothing to deliver
            continue
        read = log_.read(wanted[i], 1, min_one_batch=True)
        if not read.slices:
            break
        batch = decode_batch(read.slices[0].read())
        for record in batch.records:
            found[record.offset] = decode_parked(record)
        while i < len(wanted) and wanted[i] <= batch.header.last_offset:
            i += 1
    return [found[offset] for offset in offsets if offset in found]


def _chunks(records: list[ParkedRecord]) -> Iterable[list[ParkedRecord]]:
    chunk: list[ParkedRecord] = []
    size = 0
    for record in records:
        record_size = len(record.key or b"") + len(record.value or b"") + 64
        if chunk and (len(chunk) >= FIRE_RECORDS_MAX or size + record_size > FIRE_BYTES_MAX):
            yield chunk
            chunk, size = [], 0
        chunk.append(record)
        size += record_size
    if chunk:
        yield chunk
