"""The two-step flush the broker runs off the event loop: the recovery point moves only
to what was synced, and appends made while the fsync runs stay marked unflushed."""

from __future__ import annotations

import threading

from conftest import OpenLog
from storage_helpers import make_batch

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
