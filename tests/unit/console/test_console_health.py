"""What the console flags on the cluster and topic pages (the same answers as ``sluice
cluster status``: :mod:`sluice.client.cluster_health`), the brokers it shows down and
since when, and their disk use from DescribeLogDirs."""

from __future__ import annotations

from sluice.client.admin import ClusterDescription, LogDirDescription, ReplicaLogInfo
from sluice.client.cluster import BrokerMetadata, PartitionMetadata, TopicMetadata
from sluice.client.cluster_health import ClusterHealth
from sluice.common.errors import KafkaStorageError
from sluice.common.ids import TopicPartition
from sluice.console.brokers import broker_rows, disk_of, partition_state
from sluice.console.history_file import BrokerSighting


def _partition(
    index: int, leader: int, replicas: tuple[int, ...], isr: tuple[int, ...]
) -> PartitionMetadata:
    return PartitionMetadata("orders", index, leader, 3, replicas, isr)


def _health(live: tuple[int, ...], partitions: list[PartitionMetadata]) -> ClusterHealth:
    described = ClusterDescription(
        "c1", live[0], tuple(BrokerMetadata(n, "127.0.0.1", 9000 + n) for n in live)
    )
    return ClusterHealth(described, [TopicMetadata("orders", tuple(partitions))])


def test_offline_under_replicated_and_down_brokers_as_cluster_status_says() -> None:
    health = _health(
        (0, 1),
        [
            _partition(0, 0, (0, 1, 2), (0, 1)),  # broker 2 down: under-replicated
            _partition(1, -1, (2,), (2,)),  # its only replica is down: offline
            _partition(2, 2, (2, 0), (2, 0)),  # leader not listed: offline, not under-replicated
            _partition(3, 1, (1, 0), (1, 0)),
        ],
    )
    assert [p.partition for p in health.offline()] == [1, 2]
    assert [p.partition for p in health.under_replicated()] == [0]
    assert health.down_brokers() == [2]
    assert health.leaders() == {0: 1, 1: 1}
    assert health.replicas() == {0: 3, 1: 2, 2: 3}
    live = health.live
    assert [partition_state(p, live) for p in health.partitions] == [
        "under-replicated",
        "offline",
        "offline",
        "ok",
    ]


def test_a_broker_seen_and_gone_is_down_since_it_was_first_missed() -> None:
    health = _health((0,), [_partition(0, 0, (0, 2), (0,))])
    sightings = {
        0: BrokerSighting(0, "127.0.0.1:9000", 10.0, 50.0),
        1: BrokerSighting(1, "127.0.0.1:9001", 10.0, 30.0, missing_since_s=32.0),
    }
    rows = broker_rows(health, sightings, {})
    assert [(r.node_id, r.up) for r in rows] == [(0, True), (1, False), (2, False)]
    gone = rows[1]
    assert (gone.address, gone.down_since_s, gone.last_seen_s) == ("127.0.0.1:9001", 32.0, 30.0)
    never_seen = rows[2]  # named as a replica, never listed while the console ran
    assert (never_seen.address, never_seen.down_since_s, never_seen.replicas) == (None, None, 1)
    assert rows[0].is_controller and rows[0].leaders == 1


def test_disk_use_is_the_sum_of_the_replicas_sizes() -> None:
    replicas = {
        TopicPartition("a", 0): ReplicaLogInfo(size_bytes=100, offset_lag=0, is_future=False),
        TopicPartition("a", 1): ReplicaLogInfo(size_bytes=23, offset_lag=0, is_future=False),
    }
    disk = disk_of(
        [
            LogDirDescription("/data", replicas, total_bytes=1000, usable_bytes=400),
            LogDirDescription("/gone", {}, error=KafkaStorageError("offline")),
        ]
    )
    assert (disk.used_bytes, disk.total_bytes, disk.usable_bytes, disk.offline_dirs) == (
        123,
        1000,
        400,
        1,
    )
