"""The partition-log contract: append, read, roll, retention, DeleteRecords, truncation,
timestamps, epochs, reopening. Every test that stores batches runs once per codec:
the log must treat a compressed batch exactly like an uncompressed one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import OpenLog
from storage_helpers import decode, make_batch, read_records, values_of

from sluice.common import errors
from sluice.common.clock import ManualClock
from sluice.protocol.records.batch import Compression, TimestampType
from sluice.storage import (
    AppendResult,
    PartitionLog,
    clean_shutdown_marker_exists,
    remove_clean_shutdown_marker,
    write_clean_shutdown_marker,
)
from sluice.storage.log import FencedLeaderEpoch


def append_values(
    log: PartitionLog,
    codec: Compression,
    batches: int,
    *,
    records: int = 1,
    value_bytes: int = 100,
    leader_epoch: int = 0,
    timestamp_ms: int = 1_700_000_000_000,
    seed: int = 0,
) -> list[AppendResult]:
    """Append ``batches`` batches of ``records`` random values each; batch i has
    timestamp ``timestamp_ms + i``."""
    results = []
    for i in range(batches):
        values = values_of(value_bytes, records, seed=seed * 100_000 + i)
        batch = make_batch(codec, values, timestamp_ms=timestamp_ms + i)
        results.append(log.append(batch, leader_epoch=leader_epoch))
    return results


# -- append and read -------------------------------------------------------------------


def test_append_assigns_consecutive_offsets_and_reads_back(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log()
    results = [
        log.append(make_batch(codec, [b"x%d" % i for i in range(n)]), leader_epoch=0)
        for n in (1, 3, 5)
    ]
    assert [(r.base_offset, r.last_offset) for r in results] == [(0, 0), (1, 3), (4, 8)]
    assert all(not r.duplicate and r.log_append_time_ms == -1 for r in results)
    assert log.log_end_offset == 9
    records = read_records(log)
    assert [r.offset for r in records] == list(range(9))
    assert [r.value for r in records] == [b"x0", b"x0", b"x1", b"x2"] + [
        b"x%d" % i for i in range(5)
    ]


def test_stored_batches_carry_offset_and_leader_epoch(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log()
    append_values(log, codec, 2, records=2, leader_epoch=4)
    headers = [batch.header for batch in decode(log.read(0, 1 << 20))]
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 4), (2, 4)]


def test_read_inside_a_batch_returns_that_whole_batch(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log()
    append_values(log, codec, 3, records=4)
    batches = decode(log.read(6, 1 << 20))
    assert [b.header.base_offset for b in batches] == [4, 8]


def test_read_is_cut_at_whole_batches_by_max_bytes(open_log: OpenLog, codec: Compression) -> None:
    log = open_log(segment_bytes=1 << 20)
    append_values(log, codec, 10, value_bytes=150)
    sizes = [b.header.size_bytes for b in decode(log.read(0, 1 << 20))]
    budget = sum(sizes[:3]) + sizes[3] - 1
    batches = decode(log.read(0, budget))
    assert [b.header.base_offset for b in batches] == [0, 1, 2]
    batches = decode(log.read(2, sum(sizes[2:6])))
    assert [b.header.base_offset for b in batches] == [2, 3, 4, 5]


def test_min_one_batch_returns_a_first_batch_larger_than_max_bytes(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log()
    append_values(log, codec, 2, value_bytes=300)
    batches = decode(log.read(0, 10))
    assert [b.header.base_offset for b in batches] == [0]
    assert log.read(0, 10, min_one_batch=False).slices == []
    assert log.read(0, 0, min_one_batch=False).size_bytes == 0


def test_read_never_returns_a_batch_reaching_max_offset(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log()
    append_values(log, codec, 4, records=2)  # batches at 0, 2, 4, 6
    assert [b.header.base_offset for b in decode(log.read(0, 1 << 20, max_offset=4))] == [0, 2]
    # A max offset inside a batch hides that whole batch.
    assert [b.header.base_offset for b in decode(log.read(0, 1 << 20, max_offset=5))] == [0, 2]
    assert log.read(4, 1 << 20, max_offset=4).slices == []
    assert log.read(5, 1 << 20, max_offset=4).slices == []


def test_read_spans_segments(open_log: OpenLog, codec: Compression) -> None:
    log = open_log(segment_bytes=1024)
    append_values(log, codec, 20, value_bytes=200)
    assert len(log.segments) > 3
    result = log.read(0, 1 << 20)
    assert len(result.slices) == len(log.segments)
    assert [b.header.base_offset for b in decode(result)] == list(range(20))
    # Starting in a middle segment, and cut by max_bytes in a later one.
    sizes = {b.header.base_offset: b.header.size_bytes for b in decode(result)}
    batches = decode(log.read(5, sum(sizes[o] for o in range(5, 15))))
    assert [b.header.base_offset for b in batches] == list(range(5, 15))


def test_read_at_log_end_is_empty_and_outside_the_log_raises(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log()
    assert log.read(0, 1 << 20).slices == []
    append_values(log, codec, 2)
    assert log.read(2, 1 << 20).slices == []
    with pytest.raises(errors.OffsetOutOfRange):
        log.read(3, 1 << 20)
    with pytest.raises(errors.OffsetOutOfRange):
        log.read(-1, 1 << 20)


def test_file_slices_suit_sendfile(open_log: OpenLog, codec: Compression) -> None:
    log = open_log()
    append_values(log, codec, 3)
    result = log.read(0, 1 << 20)
    (piece,) = result.slices
    assert "b" in piece.file.mode and not piece.file.closed
    assert os.pread(piece.file.fileno(), piece.size_bytes, piece.position) == piece.read()


# -- rolling ---------------------------------------------------------------------------


def test_roll_by_size(open_log: OpenLog, codec: Compression) -> None:
    log = open_log(segment_bytes=1024)
    append_values(log, codec, 12, value_bytes=250)
    segments = log.segments
    assert len(segments) >= 4
    assert all(s.size_bytes <= 1024 for s in segments)
    assert [s.base_offset for s in segments[1:]] == [s.next_offset for s in segments[:-1]]
    assert [r.offset for r in read_records(log)] == list(range(12))


def test_a_batch_larger_than_a_segment_gets_a_segment_of_its_own(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log(segment_bytes=256)
    append_values(log, codec, 3, value_bytes=600)
    assert [s.base_offset for s in log.segments] == [0, 1, 2]


def test_roll_by_time(open_log: OpenLog, clock: ManualClock, codec: Compression) -> None:
    log = open_log(segment_ms=1000)
    append_values(log, codec, 2)
    clock.advance(1000)
    append_values(log, codec, 1)
    assert len(log.segments) == 1
    clock.advance(1)
    append_values(log, codec, 1)
    assert [s.base_offset for s in log.segments] == [0, 3]


def test_roll_when_the_time_index_is_full(open_log: OpenLog, codec: Compression) -> None:
    log = open_log(segment_bytes=1 << 30, segment_index_bytes=4096, index_interval_bytes=0)
    append_values(log, codec, 400, value_bytes=10)  # 4096 / 12 = 341 time-index slots
    assert len(log.segments) == 2
    assert [r.offset for r in read_records(log)] == list(range(400))
    assert log.offset_for_timestamp(1_700_000_000_000 + 390) == (390, 1_700_000_000_390)


def test_explicit_roll(open_log: OpenLog, codec: Compression) -> None:
    log = open_log()
    log.roll()
    assert len(log.segments) == 1
    append_values(log, codec, 2)
    log.roll()
    log.roll()
    assert [s.base_offset for s in log.segments] == [0, 2]
    append_values(log, codec, 1)
    assert [r.offset for r in read_records(log)] == [0, 1, 2]


# -- retention and deletion -------------------------------------------------------------


def test_retention_by_time_deletes_old_segments_but_never_the_active_one(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log(segment_bytes=1024, retention_ms=1000)
    start = 1_700_000_000_000
    for i in range(12):
        batch = make_batch(codec, values_of(250, 1, seed=i), timestamp_ms=start + i * 100)
        log.append(batch, leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    count = len(log.segments)
    assert log.apply_retention(now_ms=start + 1099) == 0
    # Segment 0 holds timestamps 0..~300 ms: past retention 1000 ms after 1300 ms.
    deleted = log.apply_retention(now_ms=start + 1301)
    assert deleted >= 1
    assert log.log_start_offset == log.segments[0].base_offset > 0
    with pytest.raises(errors.OffsetOutOfRange):
        log.read(0, 1 << 20)
    assert log.apply_retention(now_ms=start + 10**9) == count - 1 - deleted
    assert len(log.segments) == 1
    assert [r.offset for r in read_records(log)][-1] == 11


def test_retention_by_bytes(open_log: OpenLog, codec: Compression) -> None:
    log = open_log(segment_bytes=1024, retention_bytes=2048)
    append_values(log, codec, 20, value_bytes=250)
    log.update_high_watermark(log.log_end_offset)
    deleted = log.apply_retention()
    assert deleted > 0
    assert log.size_bytes() <= 2048 + 1024
    assert log.size_bytes() - log.segments[0].size_bytes < 2048
    assert log.log_start_offset == log.segments[0].base_offset


def test_retention_keeps_what_is_not_below_the_high_watermark(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log(segment_bytes=1024, retention_bytes=0)
    append_values(log, codec, 12, value_bytes=250)
    assert log.apply_retention() == 0  # high watermark still 0
    log.update_high_watermark(log.segments[2].base_offset)
    assert log.apply_retention() == 2
    assert log.log_start_offset == log.segments[0].base_offset


def test_retention_needs_the_delete_policy(open_log: OpenLog, codec: Compression) -> None:
    log = open_log(segment_bytes=1024, retention_bytes=0, cleanup_policy="compact")
    append_values(log, codec, 12, value_bytes=250)
    log.update_high_watermark(log.log_end_offset)
    assert log.apply_retention() == 0


def test_deleted_segments_stay_readable_until_the_delay_passes(
    open_log: OpenLog, clock: ManualClock, codec: Compression, tmp_path: Path
) -> None:
    log = open_log(segment_bytes=1024, retention_bytes=0, file_delete_delay_ms=5000)
    append_values(log, codec, 12, value_bytes=250)
    log.update_high_watermark(log.log_end_offset)
    in_flight = log.read(0, 1 << 20)
    expected = in_flight.read_bytes()
    deleted = log.apply_retention()
    assert deleted == len(in_flight.slices) - 1
    names = os.listdir(tmp_path / "log")
    assert sum(name.endswith(".log.deleted") for name in names) == deleted
    assert in_flight.read_bytes() == expected
    clock.advance(4999)
    assert log.delete_expired_files() == 0
    clock.advance(1)
    assert log.delete_expired_files() == deleted
    assert not [name for name in os.listdir(tmp_path / "log") if name.endswith(".deleted")]


def test_delete_records_before(open_log: OpenLog, codec: Compression) -> None:
    log = open_log(segment_bytes=1024)
    append_values(log, codec, 12, records=2, value_bytes=100)  # offsets 0..23
    log.update_high_watermark(20)
    with pytest.raises(errors.OffsetOutOfRange):
        log.delete_records_before(21)
    first_segments = len(log.segments)
    assert log.delete_records_before(11) == 11
    assert log.log_start_offset == 11
    assert len(log.segments) < first_segments
    assert log.segments[0].base_offset <= 11
    with pytest.raises(errors.OffsetOutOfRange):
        log.read(10, 1 << 20)
    # The batch holding offset 11 is returned whole; the client skips offset 10.
    assert decode(log.read(11, 1 << 20))[0].header.base_offset == 10
    assert log.delete_records_before(5) == 11
    assert log.delete_records_before(-1) == 20
    log.close()
    reopened = open_log(recover=False)
    assert reopened.log_start_offset == 20
    assert read_records(reopened)[0].offset == 20


# -- truncation -------------------------------------------------------------------------


def test_truncate_to_drops_the_tail_and_appends_continue(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log(segment_bytes=1024)
    append_values(log, codec, 12, records=2, value_bytes=100, leader_epoch=1)
    append_values(log, codec, 4, records=2, value_bytes=100, leader_epoch=2, seed=1)
    log.update_high_watermark(log.log_end_offset)
    assert log.leader_epoch_cache.entries == [(1, 0), (2, 24)]
    log.truncate_to(6)
    assert log.log_end_offset == 6
    assert log.high_watermark == 6
    assert log.segments[-1].next_offset == 6
    assert log.leader_epoch_cache.entries == [(1, 0)]
    assert [r.offset for r in read_records(log)] == list(range(6))
    append_values(log, codec, 2, records=2, leader_epoch=3)
    assert [r.offset for r in read_records(log)] == list(range(10))
    assert log.leader_epoch_cache.entries == [(1, 0), (3, 6)]
    log.close()
    reopened = open_log(recover=False)
    assert [r.offset for r in read_records(reopened)] == list(range(10))
    assert reopened.leader_epoch_cache.entries == [(1, 0), (3, 6)]


def test_truncate_inside_a_batch_drops_it_whole(open_log: OpenLog, codec: Compression) -> None:
    log = open_log()
    append_values(log, codec, 3, records=4)
    log.truncate_to(6)
    assert log.log_end_offset == 4
    log.truncate_to(100)
    assert log.log_end_offset == 4


def test_truncate_back_into_a_rolled_segment(open_log: OpenLog, codec: Compression) -> None:
    log = open_log()
    append_values(log, codec, 3)
    log.roll()
    append_values(log, codec, 3, seed=1)
    log.truncate_to(3)
    assert [s.base_offset for s in log.segments] == [0, 3]  # emptied, kept as active
    assert log.segments[1].size_bytes == 0
    log.truncate_to(2)
    assert [s.base_offset for s in log.segments] == [0]
    assert log.segments[0].active
    append_values(log, codec, 2, seed=2)
    assert [r.offset for r in read_records(log)] == [0, 1, 2, 3]


def test_truncate_below_the_log_start_empties_the_log(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log(segment_bytes=1024)
    append_values(log, codec, 12, value_bytes=250)
    log.update_high_watermark(12)
    log.delete_records_before(8)
    log.truncate_to(5)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (5, 5, 5)
    assert [s.base_offset for s in log.segments] == [5]
    append_values(log, codec, 1)
    assert [r.offset for r in read_records(log)] == [5]


# -- timestamps ---------------------------------------------------------------------------


def test_offset_for_timestamp_finds_the_exact_record(open_log: OpenLog, codec: Compression) -> None:
    log = open_log(segment_bytes=1024)
    start = 1_700_000_000_000
    for i in range(10):
        timestamps = [start + i * 100 + j * 10 for j in range(4)]
        log.append(
            make_batch(codec, values_of(60, 4, seed=i), timestamps=timestamps),
            leader_epoch=0,
        )
    assert len(log.segments) > 2
    assert log.offset_for_timestamp(0) == (0, start)
    assert log.offset_for_timestamp(start + 10) == (1, start + 10)
    assert log.offset_for_timestamp(start + 15) == (2, start + 20)
    assert log.offset_for_timestamp(start + 531) == (24, start + 600)
    assert log.offset_for_timestamp(start + 930) == (39, start + 930)
    assert log.offset_for_timestamp(start + 931) is None
    log.update_high_watermark(log.log_end_offset)
    log.delete_records_before(22)
    assert log.offset_for_timestamp(start + 10) == (22, start + 520)


def test_offset_for_timestamp_with_timestamps_out_of_order(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log(index_interval_bytes=0)
    start = 1_700_000_000_000
    for delta in (500, 100, 900, 300, 1000):
        log.append(make_batch(codec, [b"x"], timestamp_ms=start + delta), leader_epoch=0)
    assert log.offset_for_timestamp(start + 200) == (0, start + 500)
    assert log.offset_for_timestamp(start + 600) == (2, start + 900)
    assert log.offset_for_timestamp(start + 950) == (4, start + 1000)


def test_log_append_time(open_log: OpenLog, codec: Compression) -> None:
    log = open_log(message_timestamp_type="LogAppendTime")
    result = log.append(make_batch(codec, timestamp_ms=5), leader_epoch=0, now_ms=1_234_567)
    assert result.log_append_time_ms == 1_234_567
    (batch,) = decode(log.read(0, 1 << 20))  # decoding checks the CRC
    assert batch.header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert {r.timestamp_ms for r in batch.records} == {1_234_567}
    assert log.offset_for_timestamp(1_000_000) == (0, 1_234_567)


# -- offsets, epochs, durability ---------------------------------------------------------


def test_high_watermark_is_clamped_and_checkpointed(
    open_log: OpenLog, codec: Compression, tmp_path: Path
) -> None:
    log = open_log()
    append_values(log, codec, 3)
    assert log.update_high_watermark(10) == 3
    assert log.update_high_watermark(-5) == 0
    log.update_high_watermark(2)
    log.flush()
    checkpoint = (tmp_path / "log" / "partition.checkpoint").read_text()
    assert "high_watermark 2" in checkpoint and "recovery_point 3" in checkpoint
    log.close()
    assert open_log(recover=False).high_watermark == 2


def test_flush_moves_the_recovery_point(open_log: OpenLog, codec: Compression) -> None:
    log = open_log()
    append_values(log, codec, 3)
    assert log.recovery_point == 0
    log.flush()
    assert log.recovery_point == 3
    log.flush()  # nothing to do


def test_leader_epoch_cache_follows_appends(open_log: OpenLog, codec: Compression) -> None:
    log = open_log()
    for epoch in (0, 0, 3, 3, 7):
        log.append(make_batch(codec, [b"x"]), leader_epoch=epoch)
    assert log.leader_epoch_cache.entries == [(0, 0), (3, 2), (7, 4)]
    assert log.end_offset_for_epoch(0) == (0, 2)
    assert log.end_offset_for_epoch(2) == (0, 2)
    assert log.end_offset_for_epoch(3) == (3, 4)
    assert log.end_offset_for_epoch(7) == (7, 5)
    assert log.end_offset_for_epoch(8) == (-1, -1)
    with pytest.raises(FencedLeaderEpoch):
        log.append(make_batch(codec, [b"stale"]), leader_epoch=6)
    assert log.log_end_offset == 5
    log.close()
    assert open_log(recover=False).leader_epoch_cache.entries == [(0, 0), (3, 2), (7, 4)]


def test_append_as_follower_keeps_offsets_and_epochs(
    open_log: OpenLog, codec: Compression, tmp_path: Path
) -> None:
    leader = open_log(tmp_path / "leader", segment_bytes=1024)
    for epoch in (1, 1, 2):
        append_values(leader, codec, 4, records=2, value_bytes=80, leader_epoch=epoch, seed=epoch)
    follower = open_log(tmp_path / "follower", segment_bytes=1024)
    data = leader.read(0, 1 << 20).read_bytes()
    follower.append_as_follower(data[: len(data) - 7])  # a partial last batch is ignored
    assert follower.log_end_offset == leader.log_end_offset - 2
    follower.append_as_follower(leader.read(follower.log_end_offset, 1 << 20).read_bytes())
    assert follower.read(0, 1 << 20).read_bytes() == data
    assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries
    with pytest.raises(errors.InvalidRecord):
        follower.append_as_follower(leader.read(0, 1 << 20).read_bytes())
    damaged = bytearray(leader.read(0, 1).read_bytes())
    damaged[-1] ^= 0xFF
    follower.truncate_to(0)
    with pytest.raises(errors.CorruptMessage):
        follower.append_as_follower(damaged)


def test_fsync_on_every_append(open_log: OpenLog, codec: Compression) -> None:
    log = open_log(flush_messages=1, segment_bytes=1024)
    append_values(log, codec, 10, value_bytes=200)
    assert [r.offset for r in read_records(log)] == list(range(10))


def test_size_bytes_is_the_sum_of_segment_files(
    open_log: OpenLog, codec: Compression, tmp_path: Path
) -> None:
    log = open_log(segment_bytes=1024)
    append_values(log, codec, 10, value_bytes=200)
    on_disk = sum(p.stat().st_size for p in (tmp_path / "log").glob("*.log"))
    assert log.size_bytes() == on_disk


def test_reopen_after_clean_close(open_log: OpenLog, codec: Compression) -> None:
    log = open_log(segment_bytes=1024)
    append_values(log, codec, 15, records=2, value_bytes=100, leader_epoch=2)
    log.update_high_watermark(25)
    log.delete_records_before(4)
    expected = log.read(log.log_start_offset, 1 << 20).read_bytes()
    segments = [s.base_offset for s in log.segments]
    log.close()
    reopened = open_log(recover=False)
    assert (reopened.log_start_offset, reopened.high_watermark, reopened.log_end_offset) == (
        4,
        25,
        30,
    )
    assert [s.base_offset for s in reopened.segments] == segments
    assert reopened.read(4, 1 << 20).read_bytes() == expected
    assert reopened.leader_epoch_cache.entries == [(2, 4)]
    assert reopened.append(make_batch(codec), leader_epoch=2).base_offset == 30
    assert reopened.offset_for_timestamp(1_700_000_000_003) == (6, 1_700_000_000_003)


def test_an_empty_log(open_log: OpenLog) -> None:
    log = open_log()
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (0, 0, 0)
    assert log.offset_for_timestamp(0) is None
    assert log.apply_retention() == 0
    assert log.delete_records_before(-1) == 0
    log.truncate_to(0)
    log.close()
    reopened = open_log()
    assert reopened.log_end_offset == 0 and len(reopened.segments) == 1


def test_clean_shutdown_marker(tmp_path: Path) -> None:
    assert not clean_shutdown_marker_exists(tmp_path)
    write_clean_shutdown_marker(tmp_path)
    assert clean_shutdown_marker_exists(tmp_path)
    remove_clean_shutdown_marker(tmp_path)
    assert not clean_shutdown_marker_exists(tmp_path)
    remove_clean_shutdown_marker(tmp_path)
