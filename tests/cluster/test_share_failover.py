"""Share groups on a three-broker cluster: the leader of a partition a share group reads
is killed with SIGKILL while a member holds records. The new leader loads the group's
share-partition from ``__share_group_state`` (replicated): every record accepted before
the crash stays done, every record that was only acquired is delivered again (counted),
and nothing is lost."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from client_helpers import produce_and_flush, producer_config
from cluster_processes import Cluster, running_cluster
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from kafka_wire import KafkaConnection
from share_wire import Delivery, ShareMember, set_group_configs, topic_id

from sluice.cli.local_zookeeper import LocalZooKeeper

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TIMEOUT_S = 60.0
RECORDS = 150
"""Fewer than the in-flight window (group.share.partition.max.record.locks, 2000): one
member holds them all at once."""
ACCEPT = 1


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster"), zookeeper.connect, 3) as started:
        yield started


def fetch_until(member: ShareMember, wanted: int) -> list[Delivery]:
    """Fetch (retrying while leadership and coordinators settle) until ``wanted``
    records have come, or the timeout."""
    found: list[Delivery] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(found) < wanted:
        assert time.monotonic() < deadline, f"only {len(found)} of {wanted} records came"
        try:
            found += member.fetch(max_records=500, max_wait_ms=500)
        except AssertionError:
            member.epoch = 0  # a session error: open a new one
            time.sleep(0.2)
    return found


def test_share_partition_leader_failover_loses_nothing_and_keeps_accepts(
    cluster: Cluster,
) -> None:
    topic, group = f"queue-{uuid.uuid4().hex[:8]}", f"workers-{uuid.uuid4().hex[:8]}"
    admin = cluster.admin(cluster.running()[0])
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(
        TIMEOUT_S
    )
    status = cluster.wait_for(lambda s: topic in s["topics"])
    leader = cluster.broker(status["topics"][topic][0]["leader"])
    producer = Producer(producer_config(cluster.bootstrap, acks="all"))
    produce_and_flush(producer, topic, ({"value": b"%d" % i} for i in range(RECORDS)))

    with KafkaConnection(leader.host, leader.port) as connection:
        set_group_configs(connection, group, {"share.auto.offset.reset": "earliest"})
        ids = topic_id(connection, topic)
        member = ShareMember(connection, group, ids)
        held = fetch_until(member, RECORDS)
        assert sorted(d.offset for d in held) == list(range(RECORDS))
        accepted = [d.offset for d in held if d.offset % 3 == 0]
        for offset in accepted:
            assert member.acknowledge([(offset, offset, [ACCEPT])]) == 0

    leader.kill9()
    status = cluster.wait_for(
        lambda s: (
            s["topics"][topic][0]["leader"] not in (-1, leader.node_id)
            and all(
                p["leader"] != leader.node_id for p in s["topics"].get("__share_group_state", [])
            )
        )
    )
    new_leader = cluster.broker(status["topics"][topic][0]["leader"])
    produce_and_flush(producer, topic, ({"value": b"late-%d" % i} for i in range(20)))

    with KafkaConnection(new_leader.host, new_leader.port) as connection:
        member = ShareMember(connection, group, ids)
        unfinished = RECORDS - len(accepted) + 20
        again = fetch_until(member, unfinished)
        offsets = [d.offset for d in again]
        assert len(offsets) == len(set(offsets)) == unfinished
        assert not set(offsets) & set(accepted), "an accepted record was delivered again"
        assert set(offsets) == set(range(RECORDS + 20)) - set(accepted)
        assert all(d.delivery_count == 2 for d in again if d.offset < RECORDS)
        assert all(d.delivery_count == 1 for d in again if d.offset >= RECORDS)
        for delivery in again:
            assert member.acknowledge([(delivery.offset, delivery.offset, [ACCEPT])]) == 0
        assert ShareMember(connection, group, ids).fetch(max_wait_ms=300) == []
