"""Idempotent producers: duplicates answered with their original offsets, gaps and
stale epochs refused, and the state surviving clean and unclean restarts, truncation and
damaged snapshots. Log-level tests run once per codec."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from conftest import OpenLog
from storage_helpers import crash_image, make_batch

from sluice.common import errors
from sluice.common.clock import ManualClock
from sluice.common.limits import PRODUCER_BATCHES_REMEMBERED
from sluice.protocol.records.batch import Compression
from sluice.storage import AppendResult, PartitionLog, ProducerStateManager

PRODUCER = 7000


def produce(
    log: PartitionLog,
    codec: Compression,
    sequence: int,
    *,
    records: int = 2,
    producer_id: int = PRODUCER,
    epoch: int = 0,
) -> AppendResult:
    values = [b"seq-%d" % (sequence + i) for i in range(records)]
    batch = make_batch(
        codec,
        values,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
    )
    return log.append(batch, leader_epoch=0)


def offsets(result: AppendResult) -> tuple[int, int, bool]:
    return result.base_offset, result.last_offset, result.duplicate


def test_a_retried_batch_is_answered_with_its_original_offsets(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log()
    assert offsets(produce(log, codec, 0)) == (0, 1, False)
    assert offsets(produce(log, codec, 2)) == (2, 3, False)
    assert offsets(produce(log, codec, 2)) == (2, 3, True)
    assert offsets(produce(log, codec, 0)) == (0, 1, True)
    assert log.log_end_offset == 4
    assert offsets(produce(log, codec, 4)) == (4, 5, False)


def test_only_the_last_batches_are_remembered(open_log: OpenLog, codec: Compression) -> None:
    log = open_log()
    for i in range(PRODUCER_BATCHES_REMEMBERED + 1):
        produce(log, codec, 2 * i)
    assert produce(log, codec, 2).duplicate
    with pytest.raises(errors.OutOfOrderSequenceNumber):
        produce(log, codec, 0)


def test_a_sequence_gap_is_refused(open_log: OpenLog, codec: Compression) -> None:
    log = open_log()
    produce(log, codec, 0)
    with pytest.raises(errors.OutOfOrderSequenceNumber):
        produce(log, codec, 5)
    with pytest.raises(errors.OutOfOrderSequenceNumber):
        produce(log, codec, 1)  # overlaps the last batch without matching it
    assert log.log_end_offset == 2
    assert offsets(produce(log, codec, 2)) == (2, 3, False)


def test_epochs(open_log: OpenLog, codec: Compression) -> None:
    log = open_log()
    produce(log, codec, 0, epoch=1)
    with pytest.raises(errors.InvalidProducerEpoch):
        produce(log, codec, 2, epoch=0)
    with pytest.raises(errors.OutOfOrderSequenceNumber):
        produce(log, codec, 2, epoch=2)  # a new epoch starts at sequence 0
    assert offsets(produce(log, codec, 0, epoch=2)) == (2, 3, False)
    with pytest.raises(errors.InvalidProducerEpoch):
        produce(log, codec, 2, epoch=1)


def test_an_unknown_producer_may_start_at_any_sequence(
    open_log: OpenLog, codec: Compression
) -> None:
    log = open_log()
    assert offsets(produce(log, codec, 42)) == (0, 1, False)
    assert offsets(produce(log, codec, 44)) == (2, 3, False)


def test_sequences_wrap_at_int32(open_log: OpenLog, codec: Compression) -> None:
    log = open_log()
    produce(log, codec, 2**31 - 2)
    assert offsets(produce(log, codec, 0)) == (2, 3, False)


def test_producers_are_independent(open_log: OpenLog, codec: Compression) -> None:
    log = open_log()
    produce(log, codec, 0, producer_id=1)
    produce(log, codec, 0, producer_id=2)
    assert offsets(produce(log, codec, 0, producer_id=1)) == (0, 1, True)
    assert offsets(produce(log, codec, 0, producer_id=2)) == (2, 3, True)
    assert log.append(make_batch(codec), leader_epoch=0).base_offset == 4  # no producer id


def test_state_survives_a_clean_restart(open_log: OpenLog, codec: Compression) -> None:
    log = open_log(segment_bytes=512)
    for i in range(10):
        produce(log, codec, 2 * i)
    log.close()
    assert (log.directory / "00000000000000000020.snapshot").exists()
    reopened = open_log(recover=False)
    assert offsets(produce(reopened, codec, 18)) == (18, 19, True)
    with pytest.raises(errors.OutOfOrderSequenceNumber):
        produce(reopened, codec, 22)
    assert offsets(produce(reopened, codec, 20)) == (20, 21, False)


@pytest.mark.parametrize("snapshots", ["kept", "deleted", "corrupted"])
def test_state_survives_a_crash(
    open_log: OpenLog,
    codec: Compression,
    clock: ManualClock,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    snapshots: str,
) -> None:
    log = open_log(segment_bytes=512)
    for i in range(10):
        produce(log, codec, 2 * i, producer_id=1)
        produce(log, codec, 2 * i, producer_id=2)
    assert len(log.segments) > 2
    image = crash_image(log.directory, tmp_path / "image")
    found = sorted(image.glob("*.snapshot"))
    assert found
    if snapshots == "deleted":
        for path in found:
            path.unlink()
    elif snapshots == "corrupted":
        found[-1].write_bytes(found[-1].read_bytes()[:-1] + b"\x00")
    with caplog.at_level(logging.WARNING, logger="sluice.storage"):
        recovered = PartitionLog.open(image, log.config, clock, recover=True)
    if snapshots == "corrupted":
        assert "unreadable producer snapshot" in caplog.text
        assert not found[-1].exists()
    assert offsets(produce(recovered, codec, 18, producer_id=1)) == (36, 37, True)
    assert offsets(produce(recovered, codec, 18, producer_id=2)) == (38, 39, True)
    assert offsets(produce(recovered, codec, 20, producer_id=2)) == (40, 41, False)
    recovered.close()


def test_truncation_rewinds_the_producer_state(open_log: OpenLog, codec: Compression) -> None:
    log = open_log(segment_bytes=512)
    for i in range(8):
        produce(log, codec, 2 * i)
    log.truncate_to(10)
    assert offsets(produce(log, codec, 10)) == (10, 11, False)
    assert offsets(produce(log, codec, 8)) == (8, 9, True)
    log.truncate_to(0)
    assert offsets(produce(log, codec, 0)) == (0, 1, False)


def test_follower_appends_update_the_producer_state(
    open_log: OpenLog, codec: Compression, tmp_path: Path
) -> None:
    leader = open_log(tmp_path / "leader")
    for i in range(3):
        produce(leader, codec, 2 * i)
    follower = open_log(tmp_path / "follower")
    follower.append_as_follower(leader.read(0, 1 << 20).read_bytes())
    assert offsets(produce(follower, codec, 4)) == (4, 5, True)
    assert offsets(produce(follower, codec, 6)) == (6, 7, False)


# -- the manager on its own ----------------------------------------------------------------


def test_snapshot_round_trip(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path)
    for producer_id in range(3):
        for i in range(7):
            manager.record(
                producer_id,
                producer_id + 1,
                first_sequence=3 * i,
                last_sequence=3 * i + 2,
                first_offset=100 * producer_id + 3 * i,
                last_offset=100 * producer_id + 3 * i + 2,
                timestamp_ms=1000 + i,
            )
    manager.record(
        9, 0, first_sequence=-1, last_sequence=-1, first_offset=5, last_offset=5, timestamp_ms=1
    )
    manager.take_snapshot(300)
    loaded = ProducerStateManager(tmp_path)
    assert loaded.load_latest_snapshot(299) is None
    assert loaded.load_latest_snapshot(300) == 300
    assert loaded.producers == manager.producers
    assert len(loaded.producers[0].batches) == PRODUCER_BATCHES_REMEMBERED


def test_snapshot_housekeeping(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path)
    for offset in (10, 20, 30, 40):
        manager.take_snapshot(offset)
    manager.delete_snapshots_after(30)
    assert manager.snapshot_offsets() == [10, 20, 30]
    manager.delete_snapshots_before(100)
    assert manager.snapshot_offsets() == [30]  # the newest always stays
