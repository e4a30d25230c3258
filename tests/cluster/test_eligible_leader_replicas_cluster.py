"""Eligible leader replicas (KIP-966) on three real brokers and a real ZooKeeper: the
last in-sync replica that restarts after losing its unflushed tail does not lead over
the replica that left the ISR with every acknowledged record, and nothing acknowledged
is lost. The controller's ELR shows in DescribeTopicPartitions."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import pytest
from broker_process import BrokerProcess
from client_helpers import consumer_config, produce_and_flush, producer_config, wait_until
from cluster_processes import Cluster, running_cluster
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from kafka_wire import KafkaConnection
from kio.schema.describe_topic_partitions.v0 import request as describe_partitions_v0
from kio.schema.errors import ErrorCode
from zookeeper_sessions import cluster_nodes

from sluice.cli.local_zookeeper import LocalZooKeeper

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 60.0
SETTLE_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.1
RECORDS_PER_BATCH = 200
A, B, C = 0, 1, 2
"""The replicas in preference order: A leads first."""


class Described(NamedTuple):
    leader: int
    isr: tuple[int, ...]
    elr: tuple[int, ...]
    last_known_elr: tuple[int, ...]


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster"), zookeeper.connect, 3) as started:
        yield started


def _describe(broker: BrokerProcess, topic: str) -> Described:
    """Partition 0 of ``topic`` as DescribeTopicPartitions v0 answers it."""
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(
            describe_partitions_v0.DescribeTopicPartitionsRequest(
                topics=(describe_partitions_v0.TopicRequest(name=topic),),
                response_partition_limit=10,
                cursor=None,
            )
        )
    (answer,) = response.topics
    assert answer.error_code == ErrorCode.none, answer
    (partition,) = answer.partitions
    return Described(
        int(partition.leader_id),
        tuple(sorted(int(r) for r in partition.isr_nodes)),
        tuple(int(r) for r in partition.eligible_leader_replicas or ()),
        tuple(int(r) for r in partition.last_known_elr or ()),
    )


def _wait_for(
    broker: BrokerProcess,
    topic: str,
    expected: Described | Callable[[Described], bool],
    cluster: Cluster,
) -> None:
    """Poll DescribeTopicPartitions through ``broker`` until it answers ``expected`` (or
    an answer ``expected`` accepts)."""
    accepts = expected if callable(expected) else expected.__eq__
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    seen = _describe(broker, topic)
    while not accepts(seen):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"partition state through broker {broker.node_id} is {seen}, expected "
                f"{expected}\n{cluster.log_tails()}"
            )
        time.sleep(POLL_INTERVAL_S)
        seen = _describe(broker, topic)


def _produce(cluster: Cluster, topic: str, prefix: str) -> list[str]:
    producer = Producer(
        producer_config(cluster.bootstrap, acks="all", **{"enable.idempotence": True})
    )
    values = [f"{prefix}-{i}" for i in range(RECORDS_PER_BATCH)]
    produce_and_flush(producer, topic, [{"value": v.encode()} for v in values])
    return values


def _consume_all(cluster: Cluster, topic: str, count: int) -> list[str]:
    consumer = Consumer(consumer_config(cluster.bootstrap))
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[str] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    try:
        while len(values) < count and time.monotonic() < deadline:
            for message in consumer.consume(count - len(values), 0.5):
                assert message.error() is None, message.error()
                values.append(message.value().decode())
    finally:
        consumer.close()
    return values


def test_the_last_isr_member_that_lost_its_tail_does_not_lead_over_the_elr_member(
    cluster: Cluster,
) -> None:
    topic = f"elr-{uuid.uuid4().hex[:6]}"
    admin = cluster.admin(cluster.broker(A))
    admin.create_topics(
        [
            NewTopic(
                topic,
                num_partitions=1,
                replica_assignment=[[A, B, C]],
                config={"min.insync.replicas": "2"},
            )
        ]
    )[topic].result(CLIENT_TIMEOUT_S)
    _wait_for(cluster.broker(A), topic, Described(A, (A, B, C), (), ()), cluster)
    acknowledged = _produce(cluster, topic, "all-three")
    segment = sorted((cluster.broker(A).data_dir / f"{topic}-0").glob("*.log"))[-1]
    first_batch_end = segment.stat().st_size

    # C dies: the ISR {A, B} is still at min.insync.replicas, so C is not eligible.
    cluster.broker(C).kill()
    _wait_for(cluster.broker(A), topic, Described(A, (A, B), (), ()), cluster)
    acknowledged += _produce(cluster, topic, "a-and-b")

    # B shuts down cleanly: the ISR {A} is below min.insync.replicas, B has every
    # acknowledged record and becomes an eligible leader replica.
    cluster.broker(B).stop()
    _wait_for(cluster.broker(A), topic, Described(A, (A,), (B,), ()), cluster)

    # A's machine crashes and A loses the unflushed tail of its log: the second batch.
    cluster.broker(A).kill()
    cluster.broker(A).as_after_a_machine_crash()
    assert segment.stat().st_size > first_batch_end, "the second batch is in A's log"
    with segment.open("r+b") as file:
        file.truncate(first_batch_end)

    # A restarts alone (no clean-shutdown marker, another boot): it must not lead; the
    # partition waits for B, and A is only in the last known ELR.
    cluster.broker(A).start()
    _wait_for(cluster.broker(A), topic, Described(-1, (), (B,), (A,)), cluster)

    # B comes back and leads from the ELR (the last known leader is forgotten once the
    # partition has a leader); A and C catch up from it (A may rejoin at once).
    cluster.broker(B).start()
    _wait_for(
        cluster.broker(A),
        topic,
        lambda seen: seen.leader == B and B in seen.isr and seen.last_known_elr == (),
        cluster,
    )
    cluster.broker(C).start()
    cluster.wait_for(lambda s: len(s["brokers"]) == 3)
    _wait_for(cluster.broker(A), topic, Described(B, (A, B, C), (), ()), cluster)
    acknowledged += _produce(cluster, topic, "after")

    assert _consume_all(cluster, topic, len(acknowledged)) == acknowledged


def test_a_registration_says_whether_the_logs_are_intact(cluster: Cluster) -> None:
    """A broker killed while its machine stays up lost nothing it appended (the page
    cache keeps it): it registers with its logs intact, as after a clean shutdown, and
    may lead at once. One whose machine went down (another boot) registers with its
    tail at risk, and the controller takes it out of the ISRs."""
    broker = cluster.broker(B)

    def registered_again(before: int | None) -> dict[str, Any]:
        wait_until(
            lambda: nodes.broker_epoch(B) not in (None, before), f"broker {B} registers again"
        )
        document = nodes.registration(B)
        assert document is not None
        return document

    with cluster_nodes(cluster.zookeeper_connect) as nodes:
        wait_until(lambda: nodes.broker_epoch(B) is not None, f"broker {B} is registered")
        epoch = nodes.broker_epoch(B)
        broker.kill()
        broker.start()
        assert registered_again(epoch)["logs_intact"] is True, "killed, the machine up"

        epoch = nodes.broker_epoch(B)
        broker.kill()
        broker.as_after_a_machine_crash()
        broker.start()
        assert registered_again(epoch)["logs_intact"] is False, "the machine went down"

        epoch = nodes.broker_epoch(B)
        broker.stop()
        broker.start()
        assert registered_again(epoch)["logs_intact"] is True, "a clean shutdown"
