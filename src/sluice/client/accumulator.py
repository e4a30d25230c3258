"""The producer's record accumulator: one queue of batches per partition, no I/O.

``send`` appends a record to the open batch of its partition; the sender asks which
partitions are ready and drains one batch from each. The accumulator never reads a
clock or touches a socket: every call that depends on time takes ``now_ms`` (a
monotonic time), so tests drive it with plain integers.

One partition's queue, oldest first::

    [retried batch] [closed batch] … [open batch] ◄── append()
          ▲                                │ full (batch_bytes_max) or linger expired
          │ requeue() puts a retry         ▼
          └── in front of newer ones    ready() ──► drain() hands the head to the sender
                                                     and mutes the partition until
                                                     unmute() (its answer arrived)

A partition is *ready* when it is not muted and its head batch is closed or full, has
lingered ``linger_ms``, is being flushed, or is a retry whose backoff has passed. At
most one batch per partition is in flight (muted until answered): a retried batch
therefore always goes out before any newer batch of its partition, so records of one
partition are never reordered, whatever the number of requests in flight per connection.

Each record carries a *token* of the caller's choice (the producer uses the future it
completes on delivery); the accumulator only keeps it next to the record.

Sizes are estimates of the encoded record (key + value + headers + a fixed overhead):
they bound batches and the buffered memory, they need not be exact.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from sluice.common.ids import TopicPartition
from sluice.protocol.records.batch import NO_SEQUENCE
from sluice.protocol.records.builder import RecordInput
from sluice.protocol.records.record import Header

T = TypeVar("T")

RECORD_OVERHEAD_BYTES = 21
"""Upper bound of a record's framing in a batch (length, attributes, deltas, varint
lengths of key, value and header count) for small records."""

BATCH_OVERHEAD_BYTES = 61
"""The v2 batch header."""


def record_size_bytes(
    key: bytes | None, value: bytes | None, headers: Sequence[Header] = ()
) -> int:
    """Estimated encoded size of one record, used for batch and buffer limits."""
    size = RECORD_OVERHEAD_BYTES
    if key is not None:
        size += len(key)
    if value is not None:
        size += len(value)
    for header_key, header_value in headers:
        size += len(header_key) + (len(header_value) if header_value is not None else 0) + 4
    return size


@dataclass(slots=True, eq=False)
class ProducerBatch(Generic[T]):
    """Records bound for one partition, sent as one v2 record batch."""

    topic_partition: TopicPartition
    created_ms: int
    """Monotonic time the first record was appended (linger and delivery timeout)."""
    records: list[RecordInput] = field(default_factory=list)
    tokens: list[T] = field(default_factory=list)
    size_bytes: int = BATCH_OVERHEAD_BYTES
    closed: bool = False
    """No more records may be appended (drained once, or full)."""
    attempts: int = 0
    """How many times it was sent."""
    retry_at_ms: int = 0
    """Monotonic time before which a retry may not be sent."""
    encoded: bytes | None = None
    """The batch bytes, built at the first drain and re-sent unchanged on retries (the
    sequence numbers of an idempotent producer must not change)."""
    base_sequence: int = NO_SEQUENCE
    base_timestamp_ms: int = -1
    """Timestamp given to records that had none (wall clock at the first drain)."""
    producer_id: int = -1
    producer_epoch: int = -1

    @property
    def record_count(self) -> int:
        return len(self.records)


class RecordAccumulator(Generic[T]):
    """Per-partition batch queues with size, linger and ordering rules."""

    def __init__(self, *, batch_bytes_max: int, linger_ms: int) -> None:
        assert batch_bytes_max > 0
        assert linger_ms >= 0
        self.batch_bytes_max = batch_bytes_max
        self.linger_ms = linger_ms
        self._queues: dict[TopicPartition, deque[ProducerBatch[T]]] = {}
        self._muted: set[TopicPartition] = set()
        self._flushing = False
        self.buffered_bytes = 0
        """Bytes of every record appended and not yet released (sent and answered)."""
        self.batch_count = 0
        """Batches appended to and not yet released."""

    # ── appending ──────────────────────────────────────────────────────────────────

    def append(
        self,
        topic_partition: TopicPartition,
        record: RecordInput,
        size_bytes: int,
        token: T,
        now_ms: int,
    ) -> tuple[ProducerBatch[T], bool]:
        """Append ``record`` to the open batch of its partition (a new batch if there is
        none or it has no room). Returns the batch and whether the sender should look
        again: a new batch started (its linger clock runs) or a batch became full."""
        queue = self._queues.get(topic_partition)
        if queue is None:
            queue = self._queues[topic_partition] = deque()
        batch = queue[-1] if queue else None
        wake = False
        if (
            batch is None
            or batch.closed
            or (batch.records and batch.size_bytes + size_bytes > self.batch_bytes_max)
        ):
            if batch is not None and not batch.closed:
                batch.closed = True  # full: ready at once
            batch = ProducerBatch(topic_partition, now_ms)
            queue.append(batch)
            self.batch_count += 1
            wake = True
        batch.records.append(record)
        batch.tokens.append(token)
        batch.size_bytes += size_bytes
        self.buffered_bytes += size_bytes
        return batch, wake

    # ── the sender's side ──────────────────────────────────────────────────────────

    def ready(self, now_ms: int) -> tuple[list[TopicPartition], int | None]:
        """Partitions whose head batch may be sent now, and how many milliseconds until
        the next one becomes ready by time (None when nothing is waiting on time)."""
        ready: list[TopicPartition] = []
        next_ms: int | None = None
        for topic_partition, queue in self._queues.items():
            if not queue or topic_partition in self._muted:
                continue
            head = queue[0]
            if head.retry_at_ms:
                due_ms = head.retry_at_ms  # a retry, after its backoff
            elif (
                head.closed
                or len(queue) > 1
                or self._flushing
                or head.size_bytes >= self.batch_bytes_max
            ):
                due_ms = now_ms
            else:
                due_ms = head.created_ms + self.linger_ms
            if due_ms <= now_ms:
                ready.append(topic_partition)
            else:
                wait_ms = due_ms - now_ms
                next_ms = wait_ms if next_ms is None else min(next_ms, wait_ms)
        return ready, next_ms

    def drain(self, topic_partitions: Iterable[TopicPartition]) -> list[ProducerBatch[T]]:
        """Take the head batch of each partition (they must be ready), close it and
        mute its partition until :meth:`unmute`."""
        drained = []
        for topic_partition in topic_partitions:
            assert topic_partition not in self._muted, f"{topic_partition} is in flight"
            batch = self._queues[topic_partition].popleft()
            batch.closed = True
            self._muted.add(topic_partition)
            drained.append(batch)
        return drained

    def head_size_bytes(self, topic_partition: TopicPartition) -> int:
        """Estimated size of the batch :meth:`drain` would take from the partition."""
        return self._queues[topic_partition][0].size_bytes

    def requeue(self, batch: ProducerBatch[T], retry_at_ms: int) -> None:
        """Put a drained batch back at the front of its queue, to be sent again no
        earlier than ``retry_at_ms``, and unmute its partition."""
        assert batch.closed
        batch.retry_at_ms = retry_at_ms
        self._queues[batch.topic_partition].appendleft(batch)
        self._muted.discard(batch.topic_partition)

    def unmute(self, topic_partition: TopicPartition) -> None:
        """The partition's in-flight batch was answered: its next batch may go."""
        self._muted.discard(topic_partition)

    def release(self, batch: ProducerBatch[T]) -> None:
        """The batch is done (delivered or failed): give back its buffered bytes."""
        self.buffered_bytes -= batch.size_bytes - BATCH_OVERHEAD_BYTES
        self.batch_count -= 1
        assert self.buffered_bytes >= 0 and self.batch_count >= 0

    def expired(self, now_ms: int, delivery_timeout_ms: int) -> list[ProducerBatch[T]]:
        """Remove and return queued (not in-flight) batches older than the delivery
        timeout; their records are to be failed."""
        expired: list[ProducerBatch[T]] = []
        deadline_ms = now_ms - delivery_timeout_ms
        for queue in self._queues.values():
            while queue and queue[0].created_ms <= deadline_ms:
                batch = queue.popleft()
                batch.closed = True
                expired.append(batch)
        return expired

    def abort_all(self) -> list[ProducerBatch[T]]:
        """Remove and return every queued batch (closing without flushing)."""
        aborted = [batch for queue in self._queues.values() for batch in queue]
        for batch in aborted:
            batch.closed = True
        self._queues.clear()
        return aborted

    def set_flushing(self, flushing: bool) -> None:
        """While flushing, every head batch is ready at once, whatever its linger."""
        self._flushing = flushing

    @property
    def has_queued(self) -> bool:
        """True while any batch waits to be sent."""
        return any(self._queues.values())

    def queued_batches(self, topic_partition: TopicPartition) -> list[ProducerBatch[T]]:
        """The batches waiting for ``topic_partition``, oldest first (for tests)."""
        return list(self._queues.get(topic_partition, ()))
