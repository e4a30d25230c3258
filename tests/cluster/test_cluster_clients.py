"""Three brokers and a ZooKeeper, as real processes; every client goes through any
broker: partitions and leaders spread evenly, requests for a partition led elsewhere are
re-routed, topics are managed from any broker, and consumer groups have coordinators on
different brokers."""

from __future__ import annotations

import asyncio
import collections
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from client_helpers import consume_exactly, produce_and_flush, producer_config
from cluster_processes import Cluster
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import NewPartitions, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka_wire import KafkaConnection, Record, encode_batch, produce_request

from sluice.cli.local_zookeeper import LocalZooKeeper
from sluice.common.errors import ErrorCode

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    started = Cluster(tmp_path_factory.mktemp("cluster"), f"{zookeeper.connect}/clients", size=3)
    started.start()
    yield started
    started.stop()


def _create(cluster: Cluster, name: str, partitions: int, via: int = 0) -> None:
    admin = cluster.admin(cluster.broker(via))  # kept alive until the result is in
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(CLIENT_TIMEOUT_S)


def _topic(hint: str) -> str:
    return f"{hint}-{uuid.uuid4().hex[:8]}"


def test_a_twelve_partition_topic_spreads_evenly(cluster: Cluster) -> None:
    name = _topic("spread")
    _create(cluster, name, 12, via=1)
    status = cluster.wait_for(lambda s: name in s["topics"])
    leaders = collections.Counter(p["leader"] for p in status["topics"][name])
    assert leaders == {0: 4, 1: 4, 2: 4}
    assert status["controller_id"] in (0, 1, 2)
    assert not status["offline_partitions"]


def test_confluent_kafka_through_any_broker(cluster: Cluster) -> None:
    name = _topic("confluent")
    _create(cluster, name, 12, via=2)
    producer = Producer(producer_config(cluster.broker(1).bootstrap))
    delivered = produce_and_flush(
        producer, name, [{"key": str(i).encode(), "value": f"v{i}".encode()} for i in range(600)]
    )
    assert {d.partition for d in delivered} == set(range(12))
    messages = consume_exactly(cluster.broker(0).bootstrap, [(name, p) for p in range(12)], 600)
    assert sorted(m.value() for m in messages) == sorted(f"v{i}".encode() for i in range(600))


def test_kafka_python_through_any_broker(cluster: Cluster) -> None:
    name = _topic("kafka-python")
    _create(cluster, name, 6)
    producer = KafkaProducer(bootstrap_servers=cluster.broker(2).bootstrap)
    for i in range(300):
        producer.send(name, key=str(i).encode(), value=f"k{i}".encode())
    producer.flush(CLIENT_TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(
        name,
        bootstrap_servers=cluster.broker(1).bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=20_000,
    )
    values = set()
    for message in consumer:
        values.add(message.value)
        if len(values) == 300:
            break
    consumer.close()
    assert values == {f"k{i}".encode() for i in range(300)}


def test_aiokafka_through_any_broker(cluster: Cluster) -> None:
    name = _topic("aiokafka")
    _create(cluster, name, 6, via=1)

    async def scenario() -> set[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.broker(0).bootstrap)
        await producer.start()
        try:
            for i in range(300):
                await producer.send(name, key=str(i).encode(), value=f"a{i}".encode())
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            name, bootstrap_servers=cluster.broker(2).bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        values: set[bytes] = set()
        try:
            async with asyncio.timeout(CLIENT_TIMEOUT_S):
                while len(values) < 300:
                    batches = await consumer.getmany(timeout_ms=1000)
                    values.update(m.value for ms in batches.values() for m in ms if m.value)
        finally:
            await consumer.stop()
        return values

    assert asyncio.run(scenario()) == {f"a{i}".encode() for i in range(300)}


def test_kcat_through_any_broker(cluster: Cluster, tmp_path: Path) -> None:
    name = _topic("kcat")
    _create(cluster, name, 12, via=0)
    lines = "".join(f"line-{i}\n" for i in range(240))
    subprocess.run(
        ["kcat", "-P", "-b", cluster.broker(2).bootstrap, "-t", name],
        input=lines.encode(),
        check=True,
        timeout=CLIENT_TIMEOUT_S,
    )
    consumed = subprocess.run(
        [
            "kcat",
            "-C",
            "-b",
            cluster.broker(1).bootstrap,
            "-t",
            name,
            "-o",
            "beginning",
            "-e",
            "-q",
            "-c",
            "240",
        ],
        capture_output=True,
        check=True,
        timeout=CLIENT_TIMEOUT_S,
    )
    assert sorted(consumed.stdout.decode().split()) == sorted(lines.split())


def test_a_partition_led_elsewhere_gets_not_leader(cluster: Cluster) -> None:
    name = _topic("routed")
    _create(cluster, name, 3)
    status = cluster.wait_for(lambda s: name in s["topics"])
    led_by = {p["partition"]: p["leader"] for p in status["topics"][name]}
    partition, leader = next(iter(led_by.items()))
    other = cluster.broker((leader + 1) % 3)
    with KafkaConnection(other.host, other.port) as connection:
        response = connection.request(
            produce_request(name, partition, encode_batch([Record(None, b"x")]), acks=1)
        )
    code = response.responses[0].partition_responses[0].error_code
    assert code == ErrorCode.not_leader_or_follower


def test_topics_are_managed_from_any_broker(cluster: Cluster) -> None:
    name = _topic("managed")
    _create(cluster, name, 2, via=2)
    admin = cluster.admin(cluster.broker(0))
    admin.create_partitions([NewPartitions(name, 6)])[name].result(CLIENT_TIMEOUT_S)
    status = cluster.wait_for(lambda s: len(s["topics"].get(name, [])) == 6, via=cluster.broker(1))
    assert {p["leader"] for p in status["topics"][name]} == {0, 1, 2}
    too_many = NewTopic(_topic("too-many"), 1, 4)
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([too_many])[too_many.topic].result(CLIENT_TIMEOUT_S)
    assert refused.value.args[0].code() == ErrorCode.invalid_replication_factor
    other_admin = cluster.admin(cluster.broker(1))
    other_admin.delete_topics([name])[name].result(CLIENT_TIMEOUT_S)
    cluster.wait_for(lambda s: name not in s["topics"], via=cluster.broker(2))


def test_groups_have_coordinators_on_different_brokers(cluster: Cluster) -> None:
    name = _topic("groups")
    _create(cluster, name, 6)
    produce_and_flush(
        Producer(producer_config(cluster.bootstrap)),
        name,
        [{"value": f"g{i}".encode()} for i in range(60)],
    )
    coordinators = set()
    for index in range(8):
        group = f"group-{index}-{uuid.uuid4().hex[:6]}"
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.broker(index % 3).bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe([name])
        seen = 0
        while seen < 60:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                seen += 1
        consumer.commit(asynchronous=False)
        consumer.close()
        admin = cluster.admin(cluster.broker(0))
        described = admin.describe_consumer_groups([group])[group].result(CLIENT_TIMEOUT_S)
        coordinators.add(described.coordinator.id)
    assert len(coordinators) >= 2, coordinators
