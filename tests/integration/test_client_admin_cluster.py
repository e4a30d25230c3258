"""``sluice.Admin`` and ``sluice cluster`` on the cluster-wide admin APIs: DescribeCluster,
DescribeLogDirs, ElectLeaders and ListPartitionReassignments, against a real broker."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from kafka_wire import KafkaConnection, create_topics_request

import sluice
from sluice.client.admin import ElectionType
from sluice.common import errors
from sluice.common.ids import TopicPartition
from sluice.protocol.versions import ApiKey

TIMEOUT_S = 30.0
COMMAND_TIMEOUT_S = 60.0


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, TIMEOUT_S))


def create_topic(broker: Any, name: str, partitions: int = 1) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(create_topics_request(name, partitions))
    assert int(response.topics[0].error_code) == 0, response


def sluice_command(broker: Any, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SLUICE_BOOTSTRAP_SERVER=broker.bootstrap)
    return subprocess.run(
        [sys.executable, "-m", "sluice", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def test_admin_describe_cluster(broker: Any) -> None:
    async def describe() -> Any:
        async with sluice.Admin(broker.bootstrap) as admin:
            connection = await admin.cluster.any_connection()
            # Asked with DescribeCluster, not the Metadata fallback for older brokers.
            assert connection.supports(ApiKey.DESCRIBE_CLUSTER)
            return await admin.describe_cluster()

    described = run(describe())
    assert described.cluster_id
    assert described.controller_id == 0
    assert [(b.node_id, b.host, b.port) for b in described.brokers] == [
        (0, broker.host, broker.port)
    ]
    assert described.controller is not None and described.controller.port == broker.port


def test_admin_describe_log_dirs(broker: Any, topic: str) -> None:
    create_topic(broker, topic, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for _ in range(10):
        producer.produce(topic, b"z" * 500, partition=1)
    assert producer.flush(TIMEOUT_S) == 0

    async def describe() -> Any:
        async with sluice.Admin(broker.bootstrap) as admin:
            everything = await admin.describe_log_dirs()
            some = await admin.describe_log_dirs([TopicPartition(topic, 1)], brokers=[0])
            return everything, some

    everything, some = run(describe())
    (log_dir,) = everything[0]
    assert Path(log_dir.path) == broker.data_dir.resolve()
    assert log_dir.error is None
    assert log_dir.total_bytes and 0 < (log_dir.usable_bytes or 0) <= log_dir.total_bytes
    on_disk = sum(p.stat().st_size for p in (broker.data_dir / f"{topic}-1").glob("*.log"))
    assert log_dir.replicas[TopicPartition(topic, 1)].size_bytes == on_disk > 5000
    assert log_dir.replicas[TopicPartition(topic, 0)].size_bytes == 0
    assert TopicPartition("__consumer_offsets", 0) in log_dir.replicas
    (only,) = some[0]
    assert set(only.replicas) == {TopicPartition(topic, 1)}


def test_admin_elect_leaders_and_reassignments(broker: Any, topic: str) -> None:
    create_topic(broker, topic, partitions=2)
    wanted = [TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(topic, 5)]

    async def elect() -> Any:
        async with sluice.Admin(broker.bootstrap) as admin:
            return (
                await admin.elect_leaders(ElectionType.PREFERRED, wanted),
                await admin.elect_leaders(ElectionType.UNCLEAN),
                await admin.list_partition_reassignments(),
                await admin.list_partition_reassignments([TopicPartition(topic, 0)]),
            )

    named, everything, reassigning, reassigning_one = run(elect())
    election_not_needed = errors.for_code(errors.ErrorCode.election_not_needed)
    assert isinstance(named[TopicPartition(topic, 0)], election_not_needed)
    assert isinstance(named[TopicPartition(topic, 1)], election_not_needed)
    assert isinstance(named[TopicPartition(topic, 5)], errors.UnknownTopicOrPartition)
    assert everything == {}
    assert reassigning == {} and reassigning_one == {}


def test_sync_admin_elect_leaders(broker: Any, topic: str) -> None:
    create_topic(broker, topic)
    with sluice.sync.Admin(broker.bootstrap) as admin:
        outcome = admin.elect_leaders(partitions=[TopicPartition(topic, 0)])
        (described,) = admin.describe_log_dirs(brokers=[0])[0]
    assert isinstance(
        outcome[TopicPartition(topic, 0)],
        errors.for_code(errors.ErrorCode.election_not_needed),
    )
    assert TopicPartition(topic, 0) in described.replicas


def test_cli_cluster_describe(broker: Any) -> None:
    result = sluice_command(broker, "cluster", "describe")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Cluster id: ") and len(lines[0]) > len("Cluster id: ")
    assert lines[1] == f"Controller: 0 ({broker.bootstrap})"
    assert lines[2:] == ["Brokers: 1", f"  0  {broker.bootstrap}  (controller)"]


def test_cli_cluster_elect_leaders(broker: Any, topic: str) -> None:
    create_topic(broker, topic, partitions=2)
    named = sluice_command(broker, "cluster", "elect-leaders", topic)
    assert named.returncode == 0, named.stderr
    assert named.stdout.splitlines() == [
        f"{topic}-0: not needed (the right replica already leads)",
        f"{topic}-1: not needed (the right replica already leads)",
    ]
    everything = sluice_command(broker, "cluster", "elect-leaders", "--unclean")
    assert everything.returncode == 0, everything.stderr
    assert everything.stdout == "No partition needed an election.\n"
    missing = sluice_command(broker, "cluster", "elect-leaders", f"{topic}:7")
    assert missing.returncode == 1
    assert f"{topic}-7: failed: UNKNOWN_TOPIC_OR_PARTITION" in missing.stdout
    unknown_topic = sluice_command(broker, "cluster", "elect-leaders", "no-such-topic")
    assert unknown_topic.returncode == 1
    assert unknown_topic.stderr.strip().splitlines() == [
        "Error: topic 'no-such-topic' does not exist (create it with `sluice topics create "
        "no-such-topic`, or list topics with `sluice topics list`)"
    ]
    bad = sluice_command(broker, "cluster", "elect-leaders", f"{topic}:first")
    assert bad.returncode == 2 and "must be a number" in bad.stderr
