"""Replication on three real brokers and a real ZooKeeper: an RF=3 topic takes acks=all
writes and killing its leader loses nothing; committed offsets live in a replicated
``__consumer_offsets`` and survive the kill of their coordinator."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from client_helpers import consumer_config, produce_and_flush, producer_config
from cluster_processes import Cluster, running_cluster
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import NewPartitions, NewTopic

from sluice.cli.local_zookeeper import LocalZooKeeper

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 60.0


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster"), zookeeper.connect, 3) as started:
        yield started


def _partition(status: dict, name: str, index: int) -> dict:
    return next(p for p in status["topics"][name] if p["partition"] == index)


def test_an_rf3_topic_survives_the_kill_of_its_leader(cluster: Cluster) -> None:
    name = f"replicated-{uuid.uuid4().hex[:6]}"
    admin = cluster.admin(cluster.broker(0))
    admin.create_topics([NewTopic(name, 1, 3, config={"min.insync.replicas": "2"})])[name].result(
        CLIENT_TIMEOUT_S
    )
    status = cluster.wait_for(
        lambda s: name in s["topics"] and len(_partition(s, name, 0)["isr"]) == 3
    )
    producer = Producer(
        producer_config(cluster.bootstrap, acks="all", **{"enable.idempotence": True})
    )
    produce_and_flush(producer, name, [{"value": f"a-{i}".encode()} for i in range(500)])
    # A consumer in the middle of the partition when its leader dies: librdkafka checks
    # its position against the new leader (OffsetForLeaderEpoch) and goes on.
    consumer = Consumer(consumer_config(cluster.bootstrap))
    consumer.assign([TopicPartition(name, 0, OFFSET_BEGINNING)])
    values = _consume(consumer, 500)
    leader = _partition(status, name, 0)["leader"]
    cluster.broker(leader).kill()
    cluster.wait_for(lambda s: _partition(s, name, 0)["leader"] not in (-1, leader))
    produce_and_flush(producer, name, [{"value": f"b-{i}".encode()} for i in range(500)])
    values += _consume(consumer, 500)
    consumer.close()
    assert values == [f"a-{i}" for i in range(500)] + [f"b-{i}" for i in range(500)]
    # The dead broker is out of the ISR: the partition shows as under-replicated.
    after = cluster.wait_for(
        lambda s: any(e["topic"] == name for e in s["under_replicated_partitions"])
    )
    (entry,) = [e for e in after["under_replicated_partitions"] if e["topic"] == name]
    assert leader not in entry["isr"] and len(entry["isr"]) == 2


def _consume(consumer: Consumer, count: int) -> list[str]:
    values: list[str] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(values) < count and time.monotonic() < deadline:
        for message in consumer.consume(count - len(values), 0.5):
            assert message.error() is None, message.error()
            values.append(message.value().decode())
    return values


def test_committed_offsets_survive_the_kill_of_their_coordinator(cluster: Cluster) -> None:
    name = f"offsets-{uuid.uuid4().hex[:6]}"
    group = f"group-{uuid.uuid4().hex[:6]}"
    admin = cluster.admin(cluster.broker(0))
    admin.create_topics([NewTopic(name, 2, 3)])[name].result(CLIENT_TIMEOUT_S)
    offsets = [TopicPartition(name, 0, 7), TopicPartition(name, 1, 11)]
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    consumer.commit(offsets=offsets, asynchronous=False)
    consumer.close()
    described = admin.describe_consumer_groups([group])[group].result(CLIENT_TIMEOUT_S)
    coordinator = described.coordinator.id
    status = cluster.status()
    offsets_replicas = {len(p["replicas"]) for p in status["topics"]["__consumer_offsets"]}
    assert offsets_replicas == {3}

    cluster.broker(coordinator).kill()
    cluster.wait_for(lambda s: len(s["brokers"]) == 2)
    survivor = cluster.admin(cluster.running()[0])
    listed = survivor.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(name, 0), TopicPartition(name, 1)])]
    )[group].result(CLIENT_TIMEOUT_S)
    assert {(tp.partition, tp.offset) for tp in listed.topic_partitions} == {(0, 7), (1, 11)}
    moved = survivor.describe_consumer_groups([group])[group].result(CLIENT_TIMEOUT_S)
    assert moved.coordinator.id != coordinator


def test_a_replicated_topic_grows_with_replicated_partitions(cluster: Cluster) -> None:
    name = f"growing-{uuid.uuid4().hex[:6]}"
    admin = cluster.admin(cluster.broker(1))
    admin.create_topics([NewTopic(name, 2, 3)])[name].result(CLIENT_TIMEOUT_S)
    admin.create_partitions([NewPartitions(name, 4)])[name].result(CLIENT_TIMEOUT_S)
    status = cluster.wait_for(
        lambda s: (
            len(s["topics"].get(name, [])) == 4
            and all(len(p["isr"]) == 3 for p in s["topics"][name])
        )
    )
    assert all(sorted(p["replicas"]) == [0, 1, 2] for p in status["topics"][name])
    producer = Producer(producer_config(cluster.bootstrap, acks="all"))
    produce_and_flush(
        producer, name, [{"value": f"v{i}".encode(), "partition": i % 4} for i in range(40)]
    )
    consumer = Consumer(consumer_config(cluster.bootstrap))
    consumer.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in range(4)])
    assert sorted(_consume(consumer, 40)) == sorted(f"v{i}" for i in range(40))
    consumer.close()


def test_leadership_returns_to_preferred_replicas_when_a_broker_comes_back(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with running_cluster(
        tmp_path_factory.mktemp("cluster"),
        zookeeper.connect,
        3,
        {"leader.imbalance.check.interval.seconds": "1"},
    ) as cluster:
        name = f"balanced-{uuid.uuid4().hex[:6]}"
        admin = cluster.admin(cluster.broker(0))
        admin.create_topics([NewTopic(name, 6, 3)])[name].result(CLIENT_TIMEOUT_S)
        status = cluster.wait_for(
            lambda s: name in s["topics"] and all(len(p["isr"]) == 3 for p in s["topics"][name])
        )
        preferred = {p["partition"]: p["replicas"][0] for p in status["topics"][name]}
        assert {p["partition"]: p["leader"] for p in status["topics"][name]} == preferred
        cluster.broker(2).kill()
        cluster.wait_for(lambda s: all(p["leader"] != 2 for p in s["topics"][name]))
        cluster.broker(2).start()
        cluster.wait_for(
            lambda s: {p["partition"]: p["leader"] for p in s["topics"][name]} == preferred
        )
