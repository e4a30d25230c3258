"""A follower truncates by leader epoch (Kafka's rule for OffsetForLeaderEpoch answers and
diverging epochs in fetch answers), with real logs: never to a stale high watermark,
asking again while its log holds epochs the leader never had; and the reassignment
throttle's bucket."""

from __future__ import annotations

from pathlib import Path

from sluice.common.clock import ManualClock
from sluice.common.config import TopicConfig
from sluice.protocol.records.builder import RecordInput, build_batch
from sluice.replication.follower import ReplicationThrottle, truncation_target
from sluice.storage import PartitionLog


def _follower_log(tmp_path: Path, epochs_and_counts: list[tuple[int, int]]) -> PartitionLog:
    """A follower's log holding, in order, ``count`` one-record batches written in each
    epoch (a follower's batches are its leader's, so epochs end on batch boundaries)."""
    log = PartitionLog.create(tmp_path / "orders-0", TopicConfig(), ManualClock())
    for epoch, count in epochs_and_counts:
        for _ in range(count):
            log.append(bytearray(build_batch([RecordInput(None, b"v")])), leader_epoch=epoch)
    return log


def _truncate(log: PartitionLog, leader_epoch: int, leader_end_offset: int) -> bool:
    """Apply the leader's answer as the fetcher does; whether to ask again."""
    offset, ask_again, _ = truncation_target(leader_epoch, leader_end_offset, log)
    log.truncate_to(offset)
    return ask_again


def test_same_epoch_truncates_to_where_it_ends_at_the_leader(tmp_path: Path) -> None:
    log = _follower_log(tmp_path, [(1, 10), (3, 5)])
    assert not _truncate(log, 3, 12)
    assert log.log_end_offset == 12


def test_an_epoch_the_leader_never_had_is_cut_and_the_older_one_asked(tmp_path: Path) -> None:
    log = _follower_log(tmp_path, [(1, 10), (3, 5)])
    # The leader's largest epoch not above 3 is 2, ending at 12: epoch 3 here is not its.
    assert _truncate(log, 2, 12)  # epoch 1 must be checked too
    assert log.log_end_offset == 10
    assert log.latest_epoch == 1
    assert not _truncate(log, 1, 12)
    assert log.log_end_offset == 10


def test_an_empty_epoch_at_the_log_end_is_dropped(tmp_path: Path) -> None:
    log = _follower_log(tmp_path, [(1, 10)])
    log.begin_leader_epoch(3)  # led at epoch 3 without writing anything
    _truncate(log, 2, 20)
    assert log.log_end_offset == 10
    assert log.latest_epoch == 1


def test_never_to_a_stale_high_watermark(tmp_path: Path) -> None:
    """Records above this follower's high watermark may be committed at the leader."""
    log = _follower_log(tmp_path, [(1, 10)])
    log.update_high_watermark(4)
    _truncate(log, 1, 10)
    assert log.log_end_offset == 10


def test_a_leader_without_the_epoch_leaves_what_is_committed(tmp_path: Path) -> None:
    log = _follower_log(tmp_path, [(5, 10)])
    log.update_high_watermark(6)
    assert not _truncate(log, -1, -1)
    assert log.log_end_offset == 6


def test_the_reassignment_throttle_is_a_token_bucket_per_topic() -> None:
    throttle = ReplicationThrottle()
    assert throttle.available("t", 1000, now_ms=0) == 1000  # starts with one second's worth
    throttle.spend("t", 1500, now_ms=0)  # a first batch may overdraw it
    assert throttle.available("t", 1000, now_ms=200) == -300
    assert throttle.ready_at_ms("t", 1000, now_ms=200) == 501
    assert throttle.available("t", 1000, now_ms=10_000) == 1000  # never more than a second's
    assert throttle.available("other", 50, now_ms=10_000) == 50
