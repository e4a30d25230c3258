"""The two-step flush the broker runs off the event loop: the recovery point moves only
to what was synced, and appends made while the fsync runs stay marked unflushed."""

from __future__ import annotations

import os
import threading

import pytest
from conftest import OpenLog
from storage_helpers import make_batch

from sluice.common import errors
from sluice.protocol.records.batch import Compression


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
