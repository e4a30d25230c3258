"""The producer's record accumulator, driven by plain integers as the clock."""

from __future__ import annotations

from sluice.client.accumulator import (
    BATCH_OVERHEAD_BYTES,
    RecordAccumulator,
    record_size_bytes,
)
from sluice.common.ids import TopicPartition
from sluice.protocol.records.builder import RecordInput

A0 = TopicPartition("a", 0)
A1 = TopicPartition("a", 1)


def _record(value: bytes) -> tuple[RecordInput, int]:
    return RecordInput(None, value), record_size_bytes(None, value)


def _append(
    accumulator: RecordAccumulator[int],
    tp: TopicPartition,
    token: int,
    now_ms: int,
    value: bytes = b"v",
) -> bool:
    record, size = _record(value)
    _, wake = accumulator.append(tp, record, size, token, now_ms)
    return wake


def test_a_batch_is_ready_once_it_has_lingered() -> None:
    accumulator: RecordAccumulator[int] = RecordAccumulator(batch_bytes_max=1000, linger_ms=5)
    assert _append(accumulator, A0, 0, now_ms=100)  # a new batch: the sender must look
    assert not _append(accumulator, A0, 1, now_ms=102)
    assert accumulator.ready(104) == ([], 1)
    assert accumulator.ready(105) == ([A0], None)
    [batch] = accumulator.drain([A0])
    assert batch.tokens == [0, 1]
    assert batch.closed


def test_a_full_batch_is_ready_at_once_and_a_new_one_opens() -> None:
    size = record_size_bytes(None, b"x" * 100)
    accumulator: RecordAccumulator[int] = RecordAccumulator(
        batch_bytes_max=BATCH_OVERHEAD_BYTES + 2 * size, linger_ms=1000
    )
    for token in range(5):
        _append(accumulator, A0, token, now_ms=0, value=b"x" * 100)
    assert [b.tokens for b in accumulator.queued_batches(A0)] == [[0, 1], [2, 3], [4]]
    assert accumulator.ready(0) == ([A0], None)
    assert accumulator.buffered_bytes == 5 * size


def test_a_record_larger_than_a_batch_gets_a_batch_of_its_own() -> None:
    accumulator: RecordAccumulator[int] = RecordAccumulator(batch_bytes_max=100, linger_ms=5)
    _append(accumulator, A0, 0, now_ms=0, value=b"x" * 500)
    _append(accumulator, A0, 1, now_ms=0)
    assert [b.tokens for b in accumulator.queued_batches(A0)] == [[0], [1]]


def test_one_batch_per_partition_in_flight_and_retries_go_first() -> None:
    accumulator: RecordAccumulator[int] = RecordAccumulator(batch_bytes_max=1000, linger_ms=0)
    _append(accumulator, A0, 0, now_ms=0)
    [first] = accumulator.drain(accumulator.ready(0)[0])
    _append(accumulator, A0, 1, now_ms=1)
    _append(accumulator, A1, 2, now_ms=1)
    # A0 is muted while its first batch is in flight; A1 is independent.
    assert accumulator.ready(1)[0] == [A1]
    accumulator.requeue(first, retry_at_ms=50)
    ready, wait_ms = accumulator.ready(10)
    assert ready == [A1] and wait_ms == 40  # the retry waits for its backoff…
    ready, _ = accumulator.ready(50)
    assert ready == [A0, A1]
    [again, _other] = accumulator.drain(ready)
    assert again is first and again.tokens == [0]  # …and goes before the newer batch
    accumulator.unmute(A0)
    [newer] = accumulator.drain(accumulator.ready(50)[0])
    assert newer.tokens == [1]


def test_flushing_makes_every_head_ready_and_release_frees_memory() -> None:
    accumulator: RecordAccumulator[int] = RecordAccumulator(batch_bytes_max=1000, linger_ms=500)
    _append(accumulator, A0, 0, now_ms=0)
    assert accumulator.ready(1)[0] == []
    accumulator.set_flushing(True)
    assert accumulator.ready(1)[0] == [A0]
    [batch] = accumulator.drain([A0])
    assert accumulator.batch_count == 1
    accumulator.release(batch)
    assert accumulator.buffered_bytes == 0
    assert accumulator.batch_count == 0
    assert not accumulator.has_queued


def test_queued_batches_expire_after_the_delivery_timeout() -> None:
    accumulator: RecordAccumulator[int] = RecordAccumulator(batch_bytes_max=1000, linger_ms=5)
    _append(accumulator, A0, 0, now_ms=0)
    _append(accumulator, A1, 1, now_ms=20)
    expired = accumulator.expired(now_ms=100, delivery_timeout_ms=90)
    assert [b.tokens for b in expired] == [[0]]
    assert accumulator.queued_batches(A1)[0].tokens == [1]
    assert [b.tokens for b in accumulator.abort_all()] == [[1]]
