"""The record with the largest timestamp (ListOffsets MAX_TIMESTAMP, KIP-734): found from
what each segment keeps, after appends, a clean reopen, recovery and truncation, for
every codec; and found without reading the log."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import OpenLog
from storage_helpers import make_batch, values_of

from sluice.protocol.records.batch import Compression
from sluice.storage import PartitionLog, TimestampAndOffset

START_MS = 1_700_000_000_000


def _fill(
    log_: PartitionLog, codec: Compression, batches: int, peak_batch: int, peak_ms: int
) -> None:
    """``batches`` four-record batches with rising timestamps, except that record 2 of
    ``peak_batch`` carries ``peak_ms`` (a batch's max is not its last record)."""
    for i in range(batches):
        timestamps = [START_MS + i * 100 + j * 10 for j in range(4)]
        if i == peak_batch:
            timestamps[2] = peak_ms
        log_.append(
            make_batch(codec, values_of(60, 4, seed=i), timestamps=timestamps),
            leader_epoch=i // 4,
        )
    log_.update_high_watermark(log_.log_end_offset)


def test_empty_log_has_no_max_timestamp(open_log: OpenLog) -> None:
    assert open_log().max_timestamp_offset() is None


def test_max_timestamp_in_a_middle_segment_names_the_record_not_the_batch(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log(segment_bytes=1024)
    _fill(log, codec, batches=12, peak_batch=5, peak_ms=START_MS + 99_999)
    assert len(log.segments) > 3
    # batch 5 holds offsets 20..23; record 2 of it is offset 22; leader epoch 5 // 4
    assert log.max_timestamp_offset() == TimestampAndOffset(START_MS + 99_999, 22, 1)


def test_equal_max_timestamps_answer_the_first_record(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log(segment_bytes=1024)
    peak = START_MS + 50_000
    for i in range(10):
        timestamps = [START_MS + i, peak if i in (3, 8) else START_MS + i, peak, START_MS]
        log.append(
            make_batch(codec, values_of(60, 4, seed=i), timestamps=timestamps), leader_epoch=0
        )
    assert len(log.segments) > 2
    # batch 3 (offsets 12..15): its record 1 is the first with the peak; batches 0-2
    # carry the peak only in record 2, at offsets 2, 6, 10, and batch 0 comes first.
    assert log.max_timestamp_offset() == TimestampAndOffset(peak, 2, 0)


@pytest.mark.parametrize("recover", [False, True], ids=["clean-reopen", "recovery"])
def test_max_timestamp_survives_reopening(
    open_log: OpenLog, codec: Compression, tmp_path: Path, recover: bool
) -> None:
    directory = tmp_path / "reopened"
    log = open_log(directory, segment_bytes=1024)
    _fill(log, codec, batches=12, peak_batch=2, peak_ms=START_MS + 77_777)
    expected = log.max_timestamp_offset()
    assert expected == TimestampAndOffset(START_MS + 77_777, 10, 0)
    log.close()
    reopened = open_log(directory, recover=recover, segment_bytes=1024)
    assert reopened.max_timestamp_offset() == expected


def test_truncation_forgets_a_max_timestamp_it_removes(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log(segment_bytes=1024)
    _fill(log, codec, batches=12, peak_batch=10, peak_ms=START_MS + 88_888)
    assert log.max_timestamp_offset() == TimestampAndOffset(START_MS + 88_888, 42, 2)
    log.truncate_to(40)  # drops batch 10 and 11
    # The largest left is the last record of batch 9: offset 39.
    assert log.max_timestamp_offset() == TimestampAndOffset(START_MS + 930, 39, 2)


def test_log_append_time_answers_the_batch_first_offset(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log(message_timestamp_type="LogAppendTime")
    log.append(make_batch(codec, timestamp_ms=5), leader_epoch=3, now_ms=2_000)
    log.append(make_batch(codec, timestamp_ms=5), leader_epoch=3, now_ms=9_000)
    log.append(make_batch(codec, timestamp_ms=5), leader_epoch=3, now_ms=4_000)
    assert log.max_timestamp_offset() == TimestampAndOffset(9_000, 3, 3)


def test_max_timestamp_reads_one_batch_not_the_log(
    open_log: OpenLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(segment_bytes=1024)
    _fill(log, Compression.NONE, batches=60, peak_batch=7, peak_ms=START_MS + 66_666)
    assert len(log.segments) > 15
    log_bytes = log.size_bytes()
    read_bytes = 0
    real_pread = os.pread

    def counting_pread(fd: int, size: int, position: int) -> bytes:
        nonlocal read_bytes
        data = real_pread(fd, size, position)
        read_bytes += len(data)
        return data

    monkeypatch.setattr(os, "pread", counting_pread)
    assert log.max_timestamp_offset() == TimestampAndOffset(START_MS + 66_666, 30, 1)
    assert read_bytes < 2048 < log_bytes // 4, (read_bytes, log_bytes)
