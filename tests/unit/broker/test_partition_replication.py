"""The leader's side of replication on one partition, with a manual clock and real logs:
the high watermark follows the ISR, followers join and leave the ISR, acks=all settles
as Kafka settles it, and a follower appends its leader's batches as they are."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from pathlib import Path

import pytest

from sluice.broker.replication.partition import Partition
from sluice.broker.replication.purgatory import Purgatory
from sluice.broker.replication.replica_manager import NOT_REGISTERED, ReplicaManager
from sluice.cluster.model import BrokerInfo, PartitionState, TopicMetadata
from sluice.common import errors
from sluice.common.clock import ManualClock
from sluice.common.config import TopicConfig
from sluice.common.ids import TopicPartition
from sluice.protocol.records.builder import RecordInput, build_batch
from sluice.storage import PartitionLog

LAG_TIME_MAX_MS = 10_000
TOPIC_PARTITION = TopicPartition("orders", 0)


class RecordedIsrChanges:
    def __init__(self) -> None:
        self.submitted: list[tuple[int, ...]] = []

    def submit(self, partition: Partition, isr: tuple[int, ...]) -> None:
        self.submitted.append(isr)


def _batch(count: int = 1) -> bytearray:
    return bytearray(build_batch([RecordInput(None, b"v")] * count))


def _leader(
    tmp_path: Path,
    *,
    isr: tuple[int, ...] = (0, 1, 2),
    min_insync: int = 1,
    clock: ManualClock | None = None,
) -> tuple[Partition, RecordedIsrChanges, ManualClock]:
    clock = clock or ManualClock()
    config = TopicConfig(min_insync_replicas=min_insync)
    log = PartitionLog.create(tmp_path / "orders-0", config, clock)
    sink = RecordedIsrChanges()
    state = PartitionState(replicas=(0, 1, 2), leader=0, leader_epoch=3, isr=isr, version=7)
    partition = Partition(TOPIC_PARTITION, log, state, 0, Purgatory(), clock, sink)
    return partition, sink, clock


def test_the_high_watermark_is_the_smallest_log_end_of_the_isr(tmp_path: Path) -> None:
    partition, _, _ = _leader(tmp_path)
    partition.append(_batch(5), acks=-1)
    assert partition.high_watermark == 0  # no follower heard from yet
    partition.record_follower_fetch(1, 5)
    assert partition.high_watermark == 0
    partition.record_follower_fetch(2, 3)
    assert partition.high_watermark == 3
    partition.record_follower_fetch(2, 5)
    assert partition.high_watermark == 5
    assert partition.acks_all_outcome(5, 3) is True


def test_a_new_leader_epoch_starts_at_the_log_end(tmp_path: Path) -> None:
    partition, _, _ = _leader(tmp_path)
    assert partition.log.leader_epoch_cache.entries == [(3, 0)]
    partition.append(_batch(4), acks=1)
    partition.update_state(
        PartitionState(replicas=(0, 1, 2), leader=0, leader_epoch=5, isr=(0, 1, 2), version=9)
    )
    assert partition.log.leader_epoch_cache.entries == [(3, 0), (5, 4)]
    assert partition.log.end_offset_for_epoch(3) == (3, 4)


def test_a_caught_up_follower_joins_the_isr(tmp_path: Path) -> None:
    partition, sink, _ = _leader(tmp_path, isr=(0, 1))
    partition.append(_batch(3), acks=1)
    partition.record_follower_fetch(1, 3)
    partition.record_follower_fetch(2, 1)
    assert sink.submitted == []  # below the high watermark
    partition.record_follower_fetch(2, 3)
    assert sink.submitted == [(0, 1, 2)]
    # While the change is pending, the joining follower already counts (maximal ISR).
    partition.append(_batch(2), acks=1)
    partition.record_follower_fetch(1, 5)
    assert partition.high_watermark == 3
    partition.record_follower_fetch(2, 5)
    assert partition.high_watermark == 5


def test_a_lagging_follower_leaves_the_isr_after_the_lag_time(tmp_path: Path) -> None:
    partition, sink, clock = _leader(tmp_path)
    partition.append(_batch(2), acks=1)
    partition.record_follower_fetch(1, 2)
    partition.record_follower_fetch(2, 0)
    clock.advance(LAG_TIME_MAX_MS)
    partition.record_follower_fetch(1, 2)
    partition.shrink_isr_if_lagging(LAG_TIME_MAX_MS)
    assert sink.submitted == []  # exactly the lag time is not past it
    clock.advance(1)
    partition.shrink_isr_if_lagging(LAG_TIME_MAX_MS)
    assert sink.submitted == [(0, 1)]


def test_a_follower_that_keeps_fetching_behind_a_busy_leader_stays(tmp_path: Path) -> None:
    """Caught up as of its previous fetch when it reaches the leader's end of then."""
    partition, sink, clock = _leader(tmp_path, isr=(0, 1))
    for _ in range(5):
        partition.append(_batch(), acks=1)
        leader_end = partition.log.log_end_offset
        partition.record_follower_fetch(1, leader_end - 1)
        clock.advance(LAG_TIME_MAX_MS // 2)
        partition.append(_batch(), acks=1)
        partition.record_follower_fetch(1, leader_end)
    partition.shrink_isr_if_lagging(LAG_TIME_MAX_MS)
    assert sink.submitted == []


def test_acks_all_settles_as_kafka_settles_it(tmp_path: Path) -> None:
    partition, _, _ = _leader(tmp_path, isr=(0, 1), min_insync=2)
    partition.append(_batch(), acks=-1)
    assert partition.acks_all_outcome(1, 3) is False
    # The ISR shrank to the leader before the follower had it: committed, but too few.
    state = dataclasses.replace(partition.state, isr=(0,), version=8)
    partition.update_state(state)
    outcome = partition.acks_all_outcome(1, 3)
    assert isinstance(outcome, errors.NotEnoughReplicasAfterAppend)
    with pytest.raises(errors.NotEnoughReplicas):
        partition.append(_batch(), acks=-1)
    partition.append(_batch(), acks=1)  # acks=1 does not need the ISR


def test_a_waiting_append_fails_when_leadership_moves(tmp_path: Path) -> None:
    partition, _, _ = _leader(tmp_path)
    partition.append(_batch(), acks=-1)
    partition.update_state(
        PartitionState(replicas=(0, 1, 2), leader=1, leader_epoch=4, isr=(1, 2), version=8)
    )
    assert isinstance(partition.acks_all_outcome(1, 3), errors.NotLeaderOrFollower)


def test_an_older_state_is_ignored(tmp_path: Path) -> None:
    partition, _, _ = _leader(tmp_path)
    newer = dataclasses.replace(partition.state, isr=(0, 1), version=9)
    partition.update_state(newer)
    partition.update_state(dataclasses.replace(partition.state, isr=(0, 1, 2), version=8))
    assert partition.state == newer


def test_a_follower_appends_the_leaders_batches_as_they_are(tmp_path: Path) -> None:
    (tmp_path / "leader").mkdir()
    (tmp_path / "follower").mkdir()
    leader, _, clock = _leader(tmp_path / "leader", isr=(0, 1))
    leader.append(_batch(3), acks=1)
    leader.append(_batch(2), acks=1)
    fetched = leader.log.read(0, 1 << 20).read_bytes()
    follower_log = PartitionLog.create(tmp_path / "follower" / "orders-0", TopicConfig(), clock)
    state = dataclasses.replace(leader.state, leader=1)
    follower = Partition(TOPIC_PARTITION, follower_log, state, 0, Purgatory(), clock)
    follower.append_as_follower(fetched, leader_high_watermark=3)
    assert follower_log.log_end_offset == 5
    assert follower.high_watermark == 3
    assert follower_log.read(0, 1 << 20).read_bytes() == fetched
    assert follower_log.latest_epoch == 3


def _hosted_before_registration(tmp_path: Path, written_at: int) -> ReplicaManager:
    """A replica manager hosting ``orders-0``, whose state (written at ``written_at`` by
    a store that orders writes and registrations) names broker 0 leader; broker 0 has
    not registered yet."""
    replicas = ReplicaManager(0, tmp_path, ManualClock(), Purgatory(), {})
    state = PartitionState(
        replicas=(0, 1), leader=0, leader_epoch=3, isr=(0, 1), version=7, written_at=written_at
    )
    topic = TopicMetadata("orders", uuid.uuid4(), {0: state}, {})
    replicas.install(topic, replicas.create_logs(topic))
    return replicas


def test_a_replica_leads_no_ordered_state_before_its_broker_registers(tmp_path: Path) -> None:
    """Before registering, every state naming this broker leader is about its previous
    run; once registered, a state written before the registration is still not led."""
    replicas = _hosted_before_registration(tmp_path, written_at=40)
    partition = replicas.get(TOPIC_PARTITION)
    assert not partition.is_leader and partition.core.named_leader_of_a_previous_run
    replicas.registered(50)
    assert not partition.is_leader
    with pytest.raises(errors.NotLeaderOrFollower):
        partition.check_leader()
    replicas.close_all()


def test_a_state_written_after_the_registration_is_led(tmp_path: Path) -> None:
    replicas = _hosted_before_registration(tmp_path, written_at=60)
    partition = replicas.get(TOPIC_PARTITION)
    assert not partition.is_leader
    replicas.registered(50)
    assert partition.is_leader
    assert partition.log.leader_epoch_cache.entries == [(3, 0)]  # it began leading
    replicas.close_all()


def test_a_store_that_does_not_order_writes_is_led_before_registration(tmp_path: Path) -> None:
    replicas = ReplicaManager(0, tmp_path, ManualClock(), Purgatory(), {})
    state = PartitionState(replicas=(0,), leader=0, leader_epoch=3, isr=(0,), version=7)
    topic = TopicMetadata("orders", uuid.uuid4(), {0: state}, {})
    replicas.install(topic, replicas.create_logs(topic))
    assert replicas.get(TOPIC_PARTITION).is_leader
    replicas.registered(0)
    assert replicas.get(TOPIC_PARTITION).is_leader
    replicas.close_all()


def test_registered_again_a_leader_stops_leading_states_written_before(tmp_path: Path) -> None:
    """The store registered the broker again after its session was lost: a state of the
    old session is no longer led, and producers waiting on it are answered."""
    replicas = _hosted_before_registration(tmp_path, written_at=60)
    replicas.registered(50)
    partition = replicas.get(TOPIC_PARTITION)
    partition.append(_batch(), acks=-1)
    replicas.registration_seen(BrokerInfo(0, "127.0.0.1", 9092, epoch=50))
    assert partition.is_leader  # the registration it has: nothing changes
    replicas.registration_seen(BrokerInfo(0, "127.0.0.1", 9092, epoch=70))
    assert replicas.broker_epoch == 70
    assert not partition.is_leader and not partition.core.followers
    assert isinstance(partition.acks_all_outcome(1, 3), errors.NotLeaderOrFollower)
    replicas.close_all()


def test_a_registration_seen_before_the_broker_registered_is_its_previous_runs(
    tmp_path: Path,
) -> None:
    """At start, the image may still hold the previous run's registration (its session
    has not expired): that is not this run's epoch."""
    replicas = _hosted_before_registration(tmp_path, written_at=40)
    replicas.registration_seen(BrokerInfo(0, "127.0.0.1", 9092, epoch=30))
    assert replicas.broker_epoch == NOT_REGISTERED
    assert not replicas.get(TOPIC_PARTITION).is_leader
    replicas.close_all()


def test_waiting_for_the_controller_is_said_once_per_state(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="sluice.broker.replication.partition")
    replicas = _hosted_before_registration(tmp_path, written_at=40)
    partition = replicas.get(TOPIC_PARTITION)
    replicas.registered(50)
    replicas.registered(55)
    for version in (8, 9):  # the same leader epoch, newer versions written before
        partition.update_state(dataclasses.replace(partition.state, version=version))
    said = [r.message for r in caplog.records if "waits for the controller" in r.message]
    assert len(said) == 1, said
    # Another state of a previous run (another leader epoch) is said again.
    partition.update_state(dataclasses.replace(partition.state, leader_epoch=4, version=10))
    said = [r.message for r in caplog.records if "waits for the controller" in r.message]
    assert len(said) == 2, said
    replicas.close_all()
