"""The two-step flush the broker runs off the event loop: the recovery point moves only
to what was synced, appends made while the fsync runs stay marked unflushed, and the
checkpoints are written by a job for a worker thread, in order with the log's own."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from conftest import OpenLog
from storage_helpers import make_batch, values_of

from sluice.common import errors
from sluice.protocol.records.batch import Compression
from sluice.storage import PartitionLog
from sluice.storage.checkpoint import read_offsets_checkpoint, read_pairs_checkpoint
from sluice.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT_NAME
from sluice.storage.log import PARTITION_CHECKPOINT_NAME
from sluice.storage.segment import LogSegment


def test_recovery_point_moves_only_to_the_offset_noted_before_the_sync(
    open_log: OpenLog,
) -> None:
    log = open_log()
    for _ in range(3):
        log.append(bytearray(make_batch(Compression.NONE, [b"a", b"b"])), leader_epoch=0)
    pending = log.begin_flush()
    assert pending.log_end_offset == 6
    log.append(
        bytearray(make_batch(Compression.NONE, [b"late"])), leader_epoch=0
    )  # lands during the sync
    worker = threading.Thread(target=pending.sync)
    worker.start()
    worker.join()
    log.complete_flush(pending)
    assert log.recovery_point == 6
    assert log.log_end_offset == 7

    second = log.begin_flush()
    assert second.descriptors, "the late append is still unflushed"
    second.sync()
    log.complete_flush(second)
    assert log.recovery_point == 7


def test_nothing_to_sync_when_nothing_was_appended(open_log: OpenLog) -> None:
    log = open_log()
    log.append(bytearray(make_batch(Compression.NONE, [b"x"])), leader_epoch=0)
    first = log.begin_flush()
    first.sync()
    log.complete_flush(first)
    again = log.begin_flush()
    assert again.descriptors == []
    assert again.directory is None
    again.sync()
    log.complete_flush(again)
    assert log.recovery_point == 1


def test_a_flush_completed_after_close_is_ignored(open_log: OpenLog) -> None:
    log = open_log()
    log.append(bytearray(make_batch(Compression.NONE, [b"x"])), leader_epoch=0)
    pending = log.begin_flush()
    log.close()
    pending.sync()  # duplicated descriptors outlive the closed segment
    log.complete_flush(pending)


def test_after_a_flush_fails_on_its_worker_no_fsync_of_the_log_counts_as_a_success(
    open_log: OpenLog,
) -> None:
    """A failed fsync is reported once per open file description, and a flush's
    duplicated descriptors share the segment's: after the worker's fsync fails, an
    append that fsyncs before its acknowledgement (flush.ms=0) must fail too rather than
    succeed over pages the failure may have lost."""
    log = open_log(flush_ms=0)
    log.append(bytearray(make_batch(Compression.NONE, [b"before"])), leader_epoch=0)
    log.append(bytearray(make_batch(Compression.NONE, [b"unsynced"])), leader_epoch=0)
    pending = log.begin_flush()
    # The worker's fsync fails: a pipe cannot be synced (a real EINVAL stands in for
    # the disk's EIO); the flush closes the descriptor it was given.
    unsyncable, other_end = os.pipe()
    pending.descriptors.insert(0, unsyncable)
    try:
        with pytest.raises(errors.KafkaStorageError, match="fsync failed"):
            pending.sync()
    finally:
        os.close(other_end)
    with pytest.raises(errors.KafkaStorageError, match="an earlier fsync failed"):
        log.append(bytearray(make_batch(Compression.NONE, [b"after"])), leader_epoch=0)
    with pytest.raises(errors.KafkaStorageError, match="an earlier fsync failed"):
        log.flush()
    log.close_for_deletion()  # a clean close would fsync, and fail as well


def on_disk(log: PartitionLog) -> dict[str, int] | None:
    return read_offsets_checkpoint(log.directory / PARTITION_CHECKPOINT_NAME)


def test_the_flush_checkpoints_are_written_by_the_job_it_returns_with_the_synced_offset(
    open_log: OpenLog,
) -> None:
    """complete_flush writes nothing on the appending thread: it returns the job (values
    taken after the sync) that the broker runs on a worker thread."""
    log = open_log()
    log.begin_leader_epoch(3)
    log.append(bytearray(make_batch(Compression.NONE, [b"a", b"b"])), leader_epoch=3)
    log.append(bytearray(make_batch(Compression.NONE, [b"c"])), leader_epoch=4)
    written_before = on_disk(log)
    pending = log.begin_flush()
    log.append(bytearray(make_batch(Compression.NONE, [b"late"])), leader_epoch=4)
    pending.sync()
    job = log.complete_flush(pending)
    assert job is not None
    assert on_disk(log) == written_before, "complete_flush itself wrote the checkpoint"
    assert [path.name for path, _ in job.files] == [
        LEADER_EPOCH_CHECKPOINT_NAME,  # first: the recovery point relies on its epochs
        PARTITION_CHECKPOINT_NAME,
    ]
    worker = threading.Thread(target=job.run)
    worker.start()
    worker.join()
    checkpoint = on_disk(log)
    assert checkpoint is not None
    assert checkpoint["recovery_point"] == 3, "never the late append, not yet synced"
    assert read_pairs_checkpoint(log.directory / LEADER_EPOCH_CHECKPOINT_NAME) == [(3, 0), (4, 2)]
    second = log.begin_flush()
    second.sync()
    late = log.complete_flush(second)
    assert late is not None
    late.run()
    assert on_disk(log) == {"log_start_offset": 0, "high_watermark": 0, "recovery_point": 4}
    assert log.complete_flush(log.begin_flush()) is None, "nothing changed since"


def test_close_writes_a_queued_flush_checkpoint_first_and_a_late_run_changes_nothing(
    open_log: OpenLog,
) -> None:
    log = open_log()
    log.append(bytearray(make_batch(Compression.NONE, [b"a", b"b"])), leader_epoch=0)
    pending = log.begin_flush()
    pending.sync()
    job = log.complete_flush(pending)
    assert job is not None
    log.append(bytearray(make_batch(Compression.NONE, [b"c"])), leader_epoch=0)
    log.close()
    assert on_disk(log) == {"log_start_offset": 0, "high_watermark": 0, "recovery_point": 3}
    job.run()  # the flusher's worker, late: the close's newer values stay
    assert on_disk(log) == {"log_start_offset": 0, "high_watermark": 0, "recovery_point": 3}


def roll_once(log: PartitionLog) -> LogSegment:
    """Append until the log rolls; the segment rolled."""
    while len(log.segments) < 2:
        log.append(bytearray(make_batch(Compression.NONE, values_of(300, 2))), leader_epoch=0)
    return log.segments[0]


def test_a_roll_leaves_its_index_fsyncs_to_the_flush_that_moves_the_recovery_point_past_it(
    open_log: OpenLog,
) -> None:
    """A roll trims the indexes but does not wait for their fsync on the appending
    thread: the next flush syncs them on its worker thread, before the recovery point
    (below which recovery trusts the indexes) passes the segment."""
    log = open_log()
    rolled = roll_once(log)
    assert rolled.needs_sync
    assert log.recovery_point == 0
    pending = log.begin_flush()
    synced = {Path(os.readlink(f"/proc/self/fd/{d}")).name for d in pending.descriptors}
    assert {rolled.index_path.name, rolled.time_index_path.name, rolled.log_path.name} <= synced
    assert not rolled.needs_sync
    worker = threading.Thread(target=pending.sync)
    worker.start()
    worker.join()
    log.complete_flush(pending)
    assert log.recovery_point == log.log_end_offset
    assert pending.descriptors == [], "the flush closed every descriptor it was given"


def test_a_flush_on_the_appending_thread_syncs_the_rolled_indexes_too(open_log: OpenLog) -> None:
    log = open_log()
    rolled = roll_once(log)
    log.flush()
    assert not rolled.needs_sync
    assert log.recovery_point == log.log_end_offset
