"""Consumer groups with the pure-Python clients: kafka-python and aiokafka groups, and a
group that mixes librdkafka and kafka-python members (both speak the "range" assignor).

Members are OS processes (``group_workers.py``) that commit after processing; the test
process reads committed offsets back with each client's own ``committed()``.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from broker_process import BrokerProcess
from client_helpers import (
    CLIENT_TIMEOUT_S,
    create_topic,
    unique_group_id,
)
from group_workers import (
    GroupWorker,
    WorkerPool,
    all_processed,
    assert_each_member_processed_only_its_partitions,
    assert_processed_exactly_once,
    produce_round_robin,
    split_evenly,
)
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

GROUP_FORM_TIMEOUT_S = 45.0
SESSION_TIMEOUT_MS = 10_000
HEARTBEAT_INTERVAL_MS = 1_000


@pytest.fixture(scope="module")
def broker(fast_groups_broker: BrokerProcess) -> BrokerProcess:
    return fast_groups_broker


def spawn_group(
    pool: WorkerPool, clients: list[str], bootstrap: str, topic: str, group: str
) -> list[GroupWorker]:
    return [
        pool.spawn(
            f"{client}-{index}",
            client=client,
            bootstrap=bootstrap,
            topic=topic,
            group=group,
            assignor="range",
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        )
        for index, client in enumerate(clients)
    ]


def run_group_and_check_exactly_once(
    pool: WorkerPool, broker: BrokerProcess, topic: str, clients: list[str], partitions: int
) -> tuple[str, list[frozenset[int]]]:
    """Form a group of ``clients``, process 100 messages per partition, check each was
    processed once by its partition's owner and committed; close the members. Returns the
    group id and the members' assignments before they closed."""
    create_topic(broker.bootstrap, topic, num_partitions=partitions)
    group = unique_group_id()
    members = spawn_group(pool, clients, broker.bootstrap, topic, group)
    pool.wait_until(
        split_evenly(members, partitions),
        GROUP_FORM_TIMEOUT_S,
        f"{len(members)} members to split {partitions} partitions evenly",
    )
    expected = produce_round_robin(broker.bootstrap, topic, partitions, 100 * partitions, "m")
    pool.wait_until(all_processed(pool, expected), CLIENT_TIMEOUT_S, "every message processed")
    assert_processed_exactly_once(pool, expected, members)
    assert_each_member_processed_only_its_partitions(members)
    pool.wait_until(
        lambda: all(m.committed().get(p) == 100 for m in members for p in m.assignment()),
        CLIENT_TIMEOUT_S,
        "every member to commit offset 100 on each of its partitions",
    )
    assignments = [member.assignment() for member in members]
    for member in members:
        member.close()
    return group, assignments


# ── kafka-python ───────────────────────────────────────────────────────────────────────


def kafka_python_committed(bootstrap: str, group: str, topic: str, partitions: int) -> list:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        request_timeout_ms=15_000,
    )
    try:
        return [consumer.committed(TopicPartition(topic, p)) for p in range(partitions)]
    finally:
        consumer.close()


def test_kafka_python_group_of_two_processes_each_message_once_and_commits(broker, topic, pool):
    group, _assignments = run_group_and_check_exactly_once(
        pool, broker, topic, ["kafka-python", "kafka-python"], partitions=4
    )
    assert kafka_python_committed(broker.bootstrap, group, topic, 4) == [100] * 4


def test_kafka_python_member_commits_offsets_with_metadata_and_reads_them_back(broker, topic):
    create_topic(broker.bootstrap, topic, num_partitions=2)
    group = unique_group_id()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        request_timeout_ms=15_000,
    )
    try:
        deadline = time.monotonic() + GROUP_FORM_TIMEOUT_S
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(timeout_ms=200)
        assert consumer.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
        consumer.commit(
            {
                TopicPartition(topic, 0): OffsetAndMetadata(12, "twelve", -1),
                TopicPartition(topic, 1): OffsetAndMetadata(3, "", -1),
            }
        )
        own_view = [consumer.committed(TopicPartition(topic, p), metadata=True) for p in (0, 1)]
    finally:
        consumer.close()
    assert [(o.offset, o.metadata) for o in own_view] == [(12, "twelve"), (3, "")]
    assert kafka_python_committed(broker.bootstrap, group, topic, 2) == [12, 3]


# ── aiokafka ───────────────────────────────────────────────────────────────────────────


def aiokafka_committed(bootstrap: str, group: str, topic: str, partitions: int) -> list:
    async def fetch() -> list:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
        )
        await consumer.start()
        try:
            return [
                await consumer.committed(AioTopicPartition(topic, p)) for p in range(partitions)
            ]
        finally:
            await consumer.stop()

    return asyncio.run(asyncio.wait_for(fetch(), CLIENT_TIMEOUT_S))


def test_aiokafka_group_of_two_processes_each_message_once_and_commits(broker, topic, pool):
    group, _assignments = run_group_and_check_exactly_once(
        pool, broker, topic, ["aiokafka", "aiokafka"], partitions=4
    )
    assert aiokafka_committed(broker.bootstrap, group, topic, 4) == [100] * 4


# ── librdkafka and kafka-python in one group ───────────────────────────────────────────


def test_librdkafka_and_kafka_python_members_share_a_topic_with_the_range_assignor(
    broker, topic, pool
):
    group, assignments = run_group_and_check_exactly_once(
        pool, broker, topic, ["confluent", "kafka-python"], partitions=6
    )
    assert set(assignments) == {
        frozenset({0, 1, 2}),
        frozenset({3, 4, 5}),
    }, "the range assignor gives each member a contiguous run of partitions"
    assert kafka_python_committed(broker.bootstrap, group, topic, 6) == [100] * 6


# ── static membership ──────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_a_static_python_member_restarting_within_the_session_timeout_causes_no_rebalance(
    broker, topic, pool, client
):
    create_topic(broker.bootstrap, topic, num_partitions=4)
    group = unique_group_id()

    def spawn_static(index: int, name: str) -> GroupWorker:
        return pool.spawn(
            name,
            client=client,
            bootstrap=broker.bootstrap,
            topic=topic,
            group=group,
            instance_id=f"static-{index}",
            session_timeout_ms=20_000,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        )

    members = [spawn_static(i, f"{client}-{i}") for i in range(2)]
    pool.wait_until(split_evenly(members, 4), GROUP_FORM_TIMEOUT_S, "a 2/2 split")
    restarting, other = members
    owned_before = restarting.assignment()
    mark = len(other.events)
    restarting.close()  # a static member sends no LeaveGroup
    replacement = spawn_static(0, f"{client}-0-restarted")
    pool.wait_until(
        lambda: bool(replacement.assignment()), 20.0, "the restarted member's assignment"
    )
    assert replacement.assignment() == owned_before

    expected = produce_round_robin(broker.bootstrap, topic, 4, 80, "after")
    pool.wait_until(all_processed(pool, expected), CLIENT_TIMEOUT_S, "messages after restart")
    quiet = pool.quiet_for(
        lambda: bool(other.of_kind("assigned", "revoked", since=mark)),
        3 * HEARTBEAT_INTERVAL_MS / 1000,
    )
    assert quiet, f"the other member was rebalanced:\n{other.describe()}"
    assert_processed_exactly_once(pool, expected, [other, replacement])
    assert_each_member_processed_only_its_partitions([other, replacement])
