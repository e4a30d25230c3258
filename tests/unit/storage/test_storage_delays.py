"""A partition log keeps its delay index in step: parked and fired batches, markers,
idempotence through parked batches, followers, truncation, reopening and rebuilding."""

from __future__ import annotations

from pathlib import Path

from cleaner_helpers import append_pairs, clean, rows, settle
from conftest import OpenLog
from storage_helpers import make_batch

from sluice.common.clock import ManualClock
from sluice.protocol.records.batch import Compression, TimestampType, parse_header
from sluice.protocol.records.builder import decode_batch, decode_batches
from sluice.protocol.records.delayed import (
    Delivery,
    build_fired_batch,
    build_parked_batch,
    decode_parked,
)
from sluice.storage import PartitionLog
from sluice.storage.delay_index import FILE_NAME

DUE = 1_900_000_000_000


def parked_batch(
    values: tuple[bytes, ...] = (b"a", b"b", b"c"),
    *,
    producer_id: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    due_ms: int = DUE,
) -> bytearray:
    produced = make_batch(
        Compression.NONE,
        values,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=base_sequence,
        transactional=transactional,
    )
    decoded = decode_batch(produced)
    deliveries = [Delivery(due_ms + i) for i in range(len(values))]
    return bytearray(build_parked_batch(decoded.header, decoded.records, deliveries))


def fire(log: PartitionLog, offsets: list[int]) -> int:
    """Append the fired batch for the records parked at ``offsets``; its offset."""
    parked = []
    for offset in offsets:
        batch = log.read(offset, 1 << 20).slices[0].read()
        records = decode_batch(batch).records
        parked.append(decode_parked(next(r for r in records if r.offset == offset)))
    fired = bytearray(build_fired_batch(parked, timestamp_type=TimestampType.CREATE_TIME))
    return log.append(fired, leader_epoch=0).base_offset


def pending_offsets(log: PartitionLog) -> list[int]:
    return sorted(record.offset for record in log.delays.due(up_to_ms=2**62, limit=100))


def test_a_log_without_delays_has_no_index(open_log: OpenLog, tmp_path: Path) -> None:
    log = open_log()
    log.append(make_batch(Compression.NONE), leader_epoch=0)
    assert log.delays.index is None
    assert not (tmp_path / "log" / FILE_NAME).exists()
    assert log.delays.counts().pending == 0


def test_parked_records_wait_and_fired_ones_leave(open_log: OpenLog) -> None:
    log = open_log()
    log.append(make_batch(Compression.NONE), leader_epoch=0)
    result = log.append(parked_batch(), leader_epoch=0)
    assert (result.base_offset, result.last_offset) == (3, 5)
    assert pending_offsets(log) == [3, 4, 5]
    fired_at = fire(log, [3, 4])
    assert fired_at == 6
    assert pending_offsets(log) == [5]
    counts = log.delays.counts()
    assert (counts.pending, counts.fired, counts.next_due_ms) == (1, 2, DUE + 2)
    fired = decode_batch(log.read(6, 1 << 20).slices[0].read())
    assert [r.value for r in fired.records] == [b"a", b"b"]


def test_a_parked_batch_keeps_the_producers_sequence(open_log: OpenLog) -> None:
    log = open_log()
    log.append(
        make_batch(Compression.NONE, producer_id=9, producer_epoch=0, base_sequence=0),
        leader_epoch=0,
    )
    parked = log.append(parked_batch(producer_id=9, base_sequence=3), leader_epoch=0)
    # A retry of the parked batch is a duplicate, not parked twice.
    retry = log.append(parked_batch(producer_id=9, base_sequence=3), leader_epoch=0)
    assert retry.duplicate and retry.base_offset == parked.base_offset
    assert pending_offsets(log) == [3, 4, 5]
    # The producer's next batch follows the parked one's sequence numbers.
    log.append(
        make_batch(Compression.NONE, producer_id=9, producer_epoch=0, base_sequence=6),
        leader_epoch=0,
    )
    assert log.log_end_offset == 9


def test_transactional_parked_records_wait_for_the_commit(open_log: OpenLog) -> None:
    log = open_log()
    log.append(parked_batch(producer_id=5, base_sequence=0, transactional=True), leader_epoch=0)
    log.append(
        parked_batch((b"x",), producer_id=6, base_sequence=0, transactional=True), leader_epoch=0
    )
    assert pending_offsets(log) == []
    assert log.delays.counts().pending == 4
    log.append_marker(
        producer_id=5, producer_epoch=0, committed=True, coordinator_epoch=0, leader_epoch=0
    )
    log.append_marker(
        producer_id=6, producer_epoch=0, committed=False, coordinator_epoch=0, leader_epoch=0
    )
    assert pending_offsets(log) == [0, 1, 2]
    assert log.delays.counts().pending == 3


def test_a_follower_builds_the_same_index_and_truncation_undoes_it(
    open_log: OpenLog, tmp_path: Path
) -> None:
    leader = open_log(tmp_path / "leader")
    leader.append(parked_batch(), leader_epoch=0)
    fire(leader, [0])
    leader.append(parked_batch((b"d",)), leader_epoch=0)
    follower = open_log(tmp_path / "follower")
    follower.append_as_follower(b"".join(s.read() for s in leader.read(0, 1 << 20).slices))
    assert pending_offsets(follower) == pending_offsets(leader) == [1, 2, 4]
    assert follower.delays.counts() == leader.delays.counts()
    follower.truncate_to(4)  # the last parked batch goes
    assert pending_offsets(follower) == [1, 2]
    follower.truncate_to(3)  # the fired batch goes: record 0 waits again
    assert pending_offsets(follower) == [0, 1, 2]
    follower.truncate_to(1)  # the batch holding offset 1 goes whole: nothing is left
    assert pending_offsets(follower) == []


def test_reopening_catches_up_and_a_damaged_index_is_rebuilt(
    open_log: OpenLog, tmp_path: Path
) -> None:
    log = open_log()
    log.append(parked_batch(), leader_epoch=0)
    fire(log, [1])
    log.close()
    # Unflushed: the index may lag the log after a crash; reopening replays the rest.
    again = open_log()
    assert pending_offsets(again) == [0, 2]
    again.append(parked_batch((b"z",)), leader_epoch=0)
    again.close()
    (tmp_path / "log" / FILE_NAME).write_bytes(b"garbage" * 1000)
    for suffix in ("-wal", "-shm"):
        (tmp_path / "log" / (FILE_NAME + suffix)).unlink(missing_ok=True)
    rebuilt = open_log()
    assert pending_offsets(rebuilt) == [0, 2, 4]
    assert rebuilt.delays.counts().fired == 1


def test_an_index_ahead_of_the_log_is_cut_back(open_log: OpenLog, tmp_path: Path) -> None:
    """A crash can lose the log's unflushed tail while the index kept it."""
    log = open_log()
    log.append(parked_batch(), leader_epoch=0)
    log.flush()
    log.append(parked_batch((b"lost",)), leader_epoch=0)
    assert pending_offsets(log) == [0, 1, 2, 3]
    index = log.delays.index
    assert index is not None
    index.set_applied(log.log_end_offset)
    segment = log.segments[-1]
    size = segment.size_bytes
    log.close()
    # Cut the last batch off the segment file, as a crash before its fsync would.
    path = segment.log_path
    last = parse_header(parked_batch((b"lost",))).size_bytes
    with path.open("r+b") as f:
        f.truncate(size - last)
    (tmp_path / "log" / ".clean-shutdown").unlink(missing_ok=True)
    recovered = open_log(recover=True)
    assert recovered.log_end_offset == 3
    assert pending_offsets(recovered) == [0, 1, 2]


def test_a_flush_purges_rows_finished_below_the_high_watermark(open_log: OpenLog) -> None:
    log = open_log()
    log.append(parked_batch(), leader_epoch=0)
    fire(log, [0, 1])
    index = log.delays.index
    assert index is not None
    log.update_high_watermark(3)  # the fired batch (offset 3) is not committed yet
    log.flush()
    assert index.rows() == 3
    log.update_high_watermark(log.log_end_offset)
    log.flush()
    assert index.rows() == 1 and pending_offsets(log) == [2]
    assert log.delays.counts().fired == 2


def test_the_cleaner_keeps_parked_batches_and_the_markers_of_their_transactions(
    open_log: OpenLog, clock: ManualClock
) -> None:
    log = open_log(cleanup_policy="compact", delete_retention_ms=0, min_cleanable_dirty_ratio=0.0)
    append_pairs(log, Compression.NONE, [(b"k", b"old")])
    log.append(parked_batch((b"p0", b"p1")), leader_epoch=0)
    log.append(
        parked_batch((b"t0",), producer_id=3, base_sequence=0, transactional=True), leader_epoch=0
    )
    log.append_marker(
        producer_id=3, producer_epoch=0, committed=True, coordinator_epoch=0, leader_epoch=0
    )
    append_pairs(log, Compression.NONE, [(b"k", b"new")])
    settle(log)
    before = pending_offsets(log)
    assert before == [1, 2, 3]
    for _ in range(3):  # the marker is given its horizon in one pass, removed in a later one
        clean(log)
        clock.advance(1000)
        settle(log)
    assert [row[3] for row in rows(log) if row[2] == b"k"] == [b"new"]  # the old value went
    assert pending_offsets(log) == before
    assert log.last_stable_offset == log.high_watermark  # no transaction reopened
    kept = [
        batch.header.base_offset
        for batch in decode_batches(b"".join(s.read() for s in log.read(0, 1 << 20).slices))
        if batch.header.is_control
    ]
    assert kept == [1, 3, 4]  # both parked batches and the commit marker
    log.close()
    reopened = open_log(cleanup_policy="compact")
    assert reopened.last_stable_offset == reopened.log_end_offset
    assert pending_offsets(reopened) == before
