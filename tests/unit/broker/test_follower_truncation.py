"""A follower truncates by leader epoch (Kafka's rule for OffsetForLeaderEpoch answers and
diverging epochs in fetch answers), with real logs: never to a stale high watermark,
asking again while its log holds epochs the leader never had; and the reassignment
throttle's bucket."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.broker.replication.partition import Partition
from sluice.broker.replication.purgatory import Purgatory
from sluice.broker.replication.replica_fetcher import ReplicaFetcher, ReplicationThrottle, _Followed
from sluice.cluster.model import PartitionState
from sluice.common.clock import ManualClock
from sluice.common.config import BrokerConfig, TopicConfig
from sluice.common.ids import TopicPartition
from sluice.protocol.records.builder import RecordInput, build_batch
from sluice.storage import PartitionLog


def _follower(tmp_path: Path, epochs_and_counts: list[tuple[int, int]]) -> _Followed:
    """A follower whose log holds, in order, ``count`` one-record batches written in each
    epoch (a follower's batches are its leader's, so epochs end on batch boundaries)."""
    clock = ManualClock()
    log = PartitionLog.create(tmp_path / "orders-0", TopicConfig(), clock)
    for epoch, count in epochs_and_counts:
        for _ in range(count):
            log.append(bytearray(build_batch([RecordInput(None, b"v")])), leader_epoch=epoch)
    state = PartitionState(replicas=(0, 1), leader=1, leader_epoch=9, isr=(0, 1), version=1)
    partition = Partition(TopicPartition("orders", 0), log, state, 0, Purgatory(), clock)
    return _Followed(partition, leader_epoch=9)


def _fetcher() -> ReplicaFetcher:
    return ReplicaFetcher((1, "127.0.0.1", 9092), BrokerConfig(), lambda e: None)


def test_same_epoch_truncates_to_where_it_ends_at_the_leader(tmp_path: Path) -> None:
    followed = _follower(tmp_path, [(1, 10), (3, 5)])
    _fetcher()._truncate_to_leader_epoch(followed, 3, 12)
    assert followed.partition.log.log_end_offset == 12
    assert not followed.truncating


def test_an_epoch_the_leader_never_had_is_cut_and_the_older_one_asked(tmp_path: Path) -> None:
    followed = _follower(tmp_path, [(1, 10), (3, 5)])
    fetcher = _fetcher()
    # The leader's largest epoch not above 3 is 2, ending at 12: epoch 3 here is not its.
    fetcher._truncate_to_leader_epoch(followed, 2, 12)
    log = followed.partition.log
    assert log.log_end_offset == 10
    assert log.latest_epoch == 1
    assert followed.truncating  # epoch 1 must be checked too
    fetcher._truncate_to_leader_epoch(followed, 1, 12)
    assert log.log_end_offset == 10
    assert not followed.truncating


def test_an_empty_epoch_at_the_log_end_is_dropped(tmp_path: Path) -> None:
    followed = _follower(tmp_path, [(1, 10)])
    log = followed.partition.log
    log.begin_leader_epoch(3)  # led at epoch 3 without writing anything
    _fetcher()._truncate_to_leader_epoch(followed, 2, 20)
    assert log.log_end_offset == 10
    assert log.latest_epoch == 1


def test_never_to_a_stale_high_watermark(tmp_path: Path) -> None:
    """Records above this follower's high watermark may be committed at the leader."""
    followed = _follower(tmp_path, [(1, 10)])
    log = followed.partition.log
    log.update_high_watermark(4)
    _fetcher()._truncate_to_leader_epoch(followed, 1, 10)
    assert log.log_end_offset == 10


def test_a_leader_without_the_epoch_leaves_what_is_committed(tmp_path: Path) -> None:
    followed = _follower(tmp_path, [(5, 10)])
    log = followed.partition.log
    log.update_high_watermark(6)
    _fetcher()._truncate_to_leader_epoch(followed, -1, -1)
    assert log.log_end_offset == 6
    assert not followed.truncating


def test_the_reassignment_throttle_is_a_token_bucket_per_topic() -> None:
    throttle = ReplicationThrottle()
    assert throttle.available("t", 1000, now=0.0) == 1000  # starts with one second's worth
    throttle.spend("t", 1500, now=0.0)  # a first batch may overdraw it
    assert throttle.available("t", 1000, now=0.2) == pytest.approx(-300)
    assert throttle.ready_at("t", 1000, now=0.2) == pytest.approx(0.501)
    assert throttle.available("t", 1000, now=10.0) == 1000  # never more than a second's
    assert throttle.available("other", 50, now=10.0) == 50
