"""A KIP-848 consumer group on a three-broker cluster: its coordinator (the leader of the
group's ``__consumer_offsets`` partition) is killed with SIGKILL. The new leader loads
the group from the replicated records: the same group epoch, the same members with
their epochs and assignments, and the members carry on heartbeating there, raw requests
and confluent-kafka members alike."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from broker_process import BrokerProcess
from cluster_processes import Cluster, running_cluster
from confluent_kafka.admin import NewTopic
from consumer_group_wire import CONSUMER_PROTOCOL, assigned, describe, heartbeat, heartbeat_request
from group_workers import (
    ContinuousProducer,
    all_processed,
    assert_processed_exactly_once,
    split_evenly,
    worker_pool,
)
from kafka_wire import KafkaConnection
from kio.schema.find_coordinator.v4 import request as find_coordinator_v4
from share_wire import topic_id

from sluice.cli.local_zookeeper import LocalZooKeeper
from sluice.common.errors import ErrorCode

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TIMEOUT_S = 60.0
PARTITIONS = 6


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with running_cluster(
        tmp_path_factory.mktemp("cluster"), zookeeper.connect, 3, CONSUMER_PROTOCOL
    ) as started:
        yield started


def coordinator_of(cluster: Cluster, group: str, dead: int | None = None) -> BrokerProcess:
    """The group's coordinator as FindCoordinator names it (which creates
    ``__consumer_offsets`` the first time), once it is a running broker other than
    ``dead``."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        via = cluster.running()[0]
        with KafkaConnection(via.host, via.port) as connection:
            response = connection.request(
                find_coordinator_v4.FindCoordinatorRequest(
                    key_type=find_coordinator_v4.i8(0), coordinator_keys=(group,)
                )
            )
        (found,) = response.coordinators
        running = {b.node_id for b in cluster.running()}
        if found.error_code == ErrorCode.none and found.node_id in running - {dead}:
            return cluster.broker(int(found.node_id))
        assert time.monotonic() < deadline, f"no coordinator for {group}: {found}"


def test_the_group_is_reloaded_on_the_new_coordinator(cluster: Cluster) -> None:
    topic, group = f"orders-{uuid.uuid4().hex[:8]}", f"readers-{uuid.uuid4().hex[:8]}"
    admin = cluster.admin(cluster.running()[0])
    admin.create_topics([NewTopic(topic, 4, 3, config={"min.insync.replicas": "2"})])[topic].result(
        TIMEOUT_S
    )
    coordinator = coordinator_of(cluster, group)
    with KafkaConnection(coordinator.host, coordinator.port) as connection:
        orders = topic_id(connection, topic)
    first, second = str(uuid.uuid4()), str(uuid.uuid4())

    def beat(request: Any) -> Any:
        return heartbeat(coordinator.host, coordinator.port, request)

    assert beat(heartbeat_request(group, first, 0, (topic,))).member_epoch == 1
    beat(heartbeat_request(group, second, 0, (topic,)))
    kept = assigned(beat(heartbeat_request(group, first, 1, owned={orders: (0, 1, 2, 3)})))
    beat(heartbeat_request(group, first, 1, owned=kept))
    given = assigned(beat(heartbeat_request(group, second, 2, owned={})))
    (before,) = describe(coordinator.host, coordinator.port, group)
    assert (before.error_code, before.group_state, before.group_epoch) == (0, "Stable", 2)

    coordinator.kill9()
    successor = coordinator_of(cluster, group, dead=coordinator.node_id)

    def loaded_beat(request: Any) -> Any:
        return heartbeat(successor.host, successor.port, request)

    (after,) = describe(successor.host, successor.port, group)
    assert (after.error_code, after.group_state) == (0, "Stable"), after
    assert (after.group_epoch, after.assignment_epoch) == (2, 2)

    def by_member(description: Any) -> dict[str, tuple[int, tuple[int, ...]]]:
        return {
            m.member_id: (
                m.member_epoch,
                tuple(p for t in m.assignment.topic_partitions for p in sorted(t.partitions)),
            )
            for m in description.members
        }

    assert by_member(after) == by_member(before)
    assert by_member(after) == {first: (2, kept[orders]), second: (2, given[orders])}
    # The members carry on at the new coordinator with the epochs they had.
    for member, owned in ((first, kept), (second, given)):
        answer = loaded_beat(heartbeat_request(group, member, 2, owned=owned))
        assert (answer.error_code, answer.member_epoch) == (ErrorCode.none, 2), answer


def test_confluent_members_keep_their_partitions_across_a_coordinator_failover(
    cluster: Cluster,
) -> None:
    """Two confluent-kafka members (``group.protocol=consumer``) consume under a steady
    load; the coordinator dies with SIGKILL. The members find the new coordinator, which
    knows their epochs: nobody is fenced, no partition moves, no record is lost and none
    is processed twice."""
    topic, group = f"orders-{uuid.uuid4().hex[:8]}", f"readers-{uuid.uuid4().hex[:8]}"
    admin = cluster.admin(cluster.running()[0])
    admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[
        topic
    ].result(TIMEOUT_S)
    coordinator = coordinator_of(cluster, group)
    with worker_pool() as pool:
        members = [
            pool.spawn(
                f"member-{i}",
                bootstrap=cluster.bootstrap,
                topic=topic,
                group=group,
                group_protocol="consumer",
            )
            for i in range(2)
        ]
        pool.wait_until(split_evenly(members, PARTITIONS), TIMEOUT_S, "a 3/3 split")
        marks = {m.name: len(m.events) for m in members}
        with ContinuousProducer(cluster.bootstrap, topic, PARTITIONS) as producer:
            pool.wait_until(
                lambda: all(m.committed() for m in members), TIMEOUT_S, "every member to commit"
            )
            coordinator.kill9()
            killed_s = time.monotonic()
            successor = coordinator_of(cluster, group, dead=coordinator.node_id)
            pool.wait_until(
                lambda: all(
                    any(event.arrived_s > killed_s for event in m.of_kind("committed"))
                    for m in members
                ),
                TIMEOUT_S,
                "every member to commit at the new coordinator",
            )
        delivered = producer.stop()
        pool.wait_until(all_processed(pool, delivered), TIMEOUT_S, "every record processed")
        for member in members:
            moved = member.of_kind("assigned", "revoked", "lost", since=marks[member.name])
            assert not moved, f"{member.name}'s partitions moved in the failover: {moved}"
        assert_processed_exactly_once(pool, delivered, members)
        (described,) = describe(successor.host, successor.port, group)
        assert (described.error_code, described.group_state) == (0, "Stable"), described
        for member in members:
            member.close()
