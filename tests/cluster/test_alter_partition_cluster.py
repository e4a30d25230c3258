"""ISR changes go through the controller (AlterPartition, KIP-497), with three real
brokers and a real ZooKeeper: a follower paused with SIGSTOP leaves the ISR once it lags
for ``replica.lag.time.max.ms`` (well inside its ZooKeeper session, so it is the
leader's AlterPartition and not the controller's failover that takes it out) and returns
after SIGCONT, each change stored by the controller; and an AlterPartition made at a
leader epoch older than the partition's is refused with FENCED_LEADER_EPOCH and changes
nothing; and an ElectLeaders asked of a broker that is not the controller is forwarded
to the controller, which moves the leadership."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from client_helpers import produce_and_flush, producer_config
from cluster_processes import Cluster, running_cluster
from confluent_kafka import ElectionType, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from kafka_wire import KafkaConnection
from kazoo.client import KazooClient
from kio.schema.alter_partition.v3 import request as alter_partition_v3
from share_wire import topic_id

from sluice.cli.local_zookeeper import LocalZooKeeper
from sluice.cluster.zookeeper import split_connect
from sluice.common.errors import ErrorCode

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LAG_TIME_MAX_MS = 1_500
SESSION_TIMEOUT_MS = 60_000
"""Far above the lag time: the paused follower's session holds, so it leaves the ISR by
the leader's AlterPartition and not by the controller's failover."""
CLIENT_TIMEOUT_S = 60.0
TOPIC = "isr-through-controller"


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    overrides = {
        "replica.lag.time.max.ms": str(LAG_TIME_MAX_MS),
        "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    }
    with running_cluster(
        tmp_path_factory.mktemp("cluster"), zookeeper.connect, 3, overrides
    ) as started:
        admin = started.admin(started.running()[0])
        admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(CLIENT_TIMEOUT_S)
        started.wait_for(lambda s: _partition(s)["isr"] and len(_partition(s)["isr"]) == 3)
        yield started


def _partition(status: dict[str, Any]) -> dict[str, Any]:
    partitions = status["topics"].get(TOPIC) or [{"isr": []}]
    found: dict[str, Any] = partitions[0]
    return found


def _stored_by_controller(cluster: Cluster, controller_id: int, since: int) -> int:
    """How many ISR changes asked by leaders the controller's log records past ``since``."""
    text = cluster.broker(controller_id).log_text()[since:]
    return text.count("controller: stored ISR change(s) asked by a leader")


def test_a_paused_follower_leaves_the_isr_and_returns_through_the_controller(
    cluster: Cluster,
) -> None:
    status = cluster.status()
    controller_id = status["controller_id"]
    leader_id = _partition(status)["leader"]
    follower = (
        next(b for b in cluster.brokers if b.node_id not in (leader_id, controller_id))
        if leader_id != controller_id
        else next(b for b in cluster.brokers if b.node_id != leader_id)
    )
    others = [b for b in cluster.brokers if b is not follower]
    since = len(cluster.broker(controller_id).log_text())
    producer = Producer(producer_config(others[0].bootstrap, acks="all"))
    os.kill(follower.pid, signal.SIGSTOP)
    try:
        produce_and_flush(producer, TOPIC, [{"value": b"while paused"}])
        shrunk = cluster.wait_for(
            lambda s: follower.node_id not in _partition(s)["isr"], via=others[0]
        )
        assert follower.node_id in {b["node_id"] for b in shrunk["brokers"]}
    finally:
        os.kill(follower.pid, signal.SIGCONT)
    produce_and_flush(producer, TOPIC, [{"value": b"after resume"}])
    cluster.wait_for(lambda s: len(_partition(s)["isr"]) == 3, via=others[0])
    assert _stored_by_controller(cluster, controller_id, since) >= 2, cluster.log_tails()


def _broker_epoch(cluster: Cluster, node_id: int) -> int:
    """The broker's registration epoch (its ZooKeeper znode's czxid)."""
    hosts, chroot = split_connect(cluster.zookeeper_connect)
    zookeeper = KazooClient(hosts=hosts)
    zookeeper.start(timeout=30)
    try:
        _, stat = zookeeper.get(f"{chroot}/sluice/brokers/{node_id}")
        return int(stat.czxid)
    finally:
        zookeeper.stop()
        zookeeper.close()


def _alter_partition(
    connection: KafkaConnection,
    broker_id: int,
    broker_epoch: int,
    topic: Any,
    leader_epoch: int,
    isr: list[int],
    partition_epoch: int,
) -> Any:
    m = alter_partition_v3
    request = m.AlterPartitionRequest(
        broker_id=m.BrokerId(broker_id),
        broker_epoch=broker_epoch,
        topics=(
            m.TopicData(
                topic_id=topic,
                partitions=(
                    m.PartitionData(
                        partition_index=0,
                        leader_epoch=leader_epoch,
                        new_isr_with_epochs=tuple(
                            m.BrokerState(broker_id=m.BrokerId(r), broker_epoch=-1) for r in isr
                        ),
                        leader_recovery_state=0,
                        partition_epoch=partition_epoch,
                    ),
                ),
            ),
        ),
    )
    return connection.request(request)


def test_a_leader_at_an_older_epoch_cannot_change_the_isr(cluster: Cluster) -> None:
    status = cluster.status()
    old = _partition(status)
    deposed = cluster.broker(old["leader"])
    # The leader dies and another replica leads at a newer epoch; back, the old leader
    # asks for an ISR change at its old epoch.
    deposed.kill()
    others = [b for b in cluster.brokers if b is not deposed]
    cluster.wait_for(lambda s: _partition(s)["leader"] not in (-1, deposed.node_id), via=others[0])
    deposed.start()
    cluster.wait_for(lambda s: len(_partition(s)["isr"]) == 3)
    before = _partition(cluster.status())
    assert before["leader_epoch"] > old["leader_epoch"]
    controller = cluster.broker(cluster.status()["controller_id"])
    with KafkaConnection(controller.host, controller.port) as connection:
        topic = topic_id(connection, TOPIC)
        epoch = _broker_epoch(cluster, deposed.node_id)
        answer = _alter_partition(
            connection, deposed.node_id, epoch, topic, old["leader_epoch"], [deposed.node_id], 0
        )
        (answered,) = answer.topics[0].partitions
        assert answered.error_code == ErrorCode.fenced_leader_epoch, answer
        answer = _alter_partition(
            connection,
            deposed.node_id,
            epoch + 1,
            topic,
            before["leader_epoch"],
            [deposed.node_id],
            0,
        )
        assert answer.error_code == ErrorCode.stale_broker_epoch, answer
    after = _partition(cluster.status())
    assert after["isr"] == before["isr"]
    assert after["leader_epoch"] == before["leader_epoch"]


def test_an_election_asked_of_another_broker_is_made_by_the_controller(cluster: Cluster) -> None:
    status = cluster.status()
    preferred = cluster.broker(_partition(status)["leader"])
    preferred.kill()
    others = [b for b in cluster.brokers if b is not preferred]
    cluster.wait_for(
        lambda s: _partition(s)["leader"] not in (-1, preferred.node_id), via=others[0]
    )
    preferred.start()
    cluster.wait_for(lambda s: len(_partition(s)["isr"]) == 3)
    controller_id = cluster.status()["controller_id"]
    via = next(b for b in cluster.brokers if b.node_id != controller_id)
    asked = TopicPartition(TOPIC, 0)
    admin = cluster.admin(via)
    elected = admin.elect_leaders(ElectionType.PREFERRED, [asked])
    assert elected.result(CLIENT_TIMEOUT_S)[asked] is None
    cluster.wait_for(lambda s: _partition(s)["leader"] == preferred.node_id)
