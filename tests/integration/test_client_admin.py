"""sluice.Admin (async and sync) against a real broker, checked with confluent-kafka.

The broker runs with ``group.initial.rebalance.delay.ms=0`` so a confluent-kafka
consumer's group forms as soon as it joins. Every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from broker_process import BrokerProcess, free_port
from client_helpers import (
    CLIENT_TIMEOUT_S,
    consumer_config,
    create_topic,
    produce_and_flush,
    producer_config,
    unique_group_id,
    unique_topic_name,
)
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition

import sluice
from sluice.client.admin import (
    DELETE_RECORDS_TO_HIGH_WATERMARK,
    AlterConfigOp,
    ConfigSource,
    NewTopic,
    OffsetSpec,
)
from sluice.client.errors import BrokerUnreachableError
from sluice.client.groups import GroupState
from sluice.common import errors
from sluice.common.ids import TopicPartition

TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("client-admin") / "data",
        overrides={"group.initial.rebalance.delay.ms": "0"},
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, TIMEOUT_S * 2))


def produce(bootstrap: str, topic: str, count: int, partition: int = 0) -> None:
    producer = Producer(producer_config(bootstrap, acks="all"))
    produce_and_flush(
        producer,
        topic,
        ({"value": f"v{i}".encode(), "partition": partition} for i in range(count)),
    )


def first_offset_read(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The offset of the first record a confluent-kafka consumer reads from the start."""
    consumer = Consumer(consumer_config(bootstrap, **{"auto.offset.reset": "earliest"}))
    try:
        consumer.assign([ConfluentTopicPartition(topic, partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            return int(message.offset())
        raise AssertionError(f"no record of {topic}-{partition} within {CLIENT_TIMEOUT_S}s")
    finally:
        consumer.close()


def test_create_describe_alter_and_delete_topics(broker: BrokerProcess, topic: str) -> None:
    async def scenario() -> None:
        async with sluice.Admin(bootstrap_servers=broker.bootstrap) as admin:
            await admin.create_topics(
                [NewTopic(topic, partitions=3, configs={"retention.ms": "3600000"})]
            )
            described = await admin.describe_topic(topic)
            assert [p.partition for p in described.partitions] == [0, 1, 2]
            assert topic in [t.name for t in await admin.list_topics()]

            configs = await admin.describe_topic_configs(topic)
            assert configs["retention.ms"].value == "3600000"
            assert configs["retention.ms"].source == ConfigSource.TOPIC
            assert configs["cleanup.policy"].is_default

            await admin.alter_topic_configs(
                topic,
                [
                    AlterConfigOp.set("cleanup.policy", "compact"),
                    AlterConfigOp.delete("retention.ms"),
                ],
            )
            configs = await admin.describe_topic_configs(topic)
            assert configs["cleanup.policy"].value == "compact"
            assert configs["cleanup.policy"].source == ConfigSource.TOPIC
            assert configs["retention.ms"].source != ConfigSource.TOPIC

            with pytest.raises(errors.TopicAlreadyExists, match=topic):
                await admin.create_topics([NewTopic(topic)])

            await admin.delete_topics([topic])
            with pytest.raises(errors.UnknownTopicOrPartition, match=topic):
                await admin.describe_topic(topic)
            with pytest.raises(errors.UnknownTopicOrPartition, match="does not exist"):
                await admin.delete_topics([topic])

    run(scenario())


def test_create_partitions(broker: BrokerProcess, topic: str) -> None:
    async def scenario() -> None:
        async with sluice.Admin(bootstrap_servers=broker.bootstrap) as admin:
            await admin.create_topics([NewTopic(topic, partitions=1)])

            await admin.create_partitions({topic: 4}, validate_only=True)
            assert len((await admin.describe_topic(topic)).partitions) == 1

            await admin.create_partitions({topic: 3})
            assert len((await admin.describe_topic(topic)).partitions) == 3

            with pytest.raises(errors.InvalidPartitions, match=topic):
                await admin.create_partitions({topic: 2})
            missing = unique_topic_name("missing")
            with pytest.raises(errors.UnknownTopicOrPartition, match=missing):
                await admin.create_partitions({missing: 2})

            # The new partitions are usable: their offsets can be listed at once.
            partitions = [TopicPartition(topic, index) for index in range(3)]
            latest = await admin.list_offsets(partitions, OffsetSpec.LATEST)
            assert {tp: offset.offset for tp, offset in latest.items()} == dict.fromkeys(
                partitions, 0
            )

    run(scenario())
    produce(broker.bootstrap, topic, 2, partition=2)


def test_delete_records_moves_the_low_watermark(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, num_partitions=2)
    produce(broker.bootstrap, topic, 10, partition=0)
    produce(broker.bootstrap, topic, 5, partition=1)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)

    async def delete_some() -> None:
        async with sluice.Admin(bootstrap_servers=broker.bootstrap) as admin:
            assert await admin.delete_records({tp0: 4, tp1: DELETE_RECORDS_TO_HIGH_WATERMARK}) == {
                tp0: 4,
                tp1: 5,
            }
            earliest = await admin.list_offsets([tp0, tp1], OffsetSpec.EARLIEST)
            latest = await admin.list_offsets([tp0, tp1], OffsetSpec.LATEST)
            assert (earliest[tp0].offset, earliest[tp1].offset) == (4, 5)
            assert (latest[tp0].offset, latest[tp1].offset) == (10, 5)

            # Below the low watermark deletes nothing; beyond the high watermark fails.
            assert await admin.delete_records({tp0: 2}) == {tp0: 4}
            with pytest.raises(errors.OffsetOutOfRange, match=f"{topic}-0"):
                await admin.delete_records({tp0: 11})

    run(delete_some())
    assert first_offset_read(broker.bootstrap, topic, 0) == 4


def test_describe_cluster(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        async with sluice.Admin(bootstrap_servers=broker.bootstrap) as admin:
            cluster = await admin.describe_cluster()
            assert cluster.cluster_id
            assert [b.address for b in cluster.brokers] == [broker.bootstrap]
            assert cluster.controller is not None
            assert cluster.controller.node_id == cluster.controller_id

    run(scenario())


def _wait_for_stable_group(
    consumer: Consumer, admin: sluice.sync.Admin, group_id: str, topic: str
) -> None:
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while time.monotonic() < deadline:
        consumer.poll(0.2)
        (description,) = admin.describe_groups([group_id])
        if (
            description.state == GroupState.STABLE
            and description.members
            and description.members[0].assignment.get(topic)
        ):
            return
    raise AssertionError(f"group {group_id} did not become Stable within {CLIENT_TIMEOUT_S}s")


def test_groups_of_a_confluent_consumer(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, num_partitions=2)
    produce(broker.bootstrap, topic, 3, partition=0)
    group_id = unique_group_id()
    consumer = Consumer(
        consumer_config(
            broker.bootstrap,
            **{
                "group.id": group_id,
                "client.id": "admin-test-consumer",
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
            },
        )
    )
    with sluice.sync.Admin(bootstrap_servers=broker.bootstrap) as admin:
        try:
            consumer.subscribe([topic])
            _wait_for_stable_group(consumer, admin, group_id, topic)
            consumer.commit(
                offsets=[
                    ConfluentTopicPartition(topic, 0, 3),
                    ConfluentTopicPartition(topic, 1, 0),
                ],
                asynchronous=False,
            )

            (description,) = admin.describe_groups([group_id])
            assert description.protocol_type == "consumer"
            (member,) = description.members
            assert member.client_id == "admin-test-consumer"
            assert member.assignment == {topic: [0, 1]}
            listed = {listing.group_id: listing for listing in admin.list_groups()}
            assert listed[group_id].state == GroupState.STABLE
            assert admin.find_coordinator(group_id).address == broker.bootstrap
        finally:
            consumer.close()

        offsets = admin.list_group_offsets(group_id)
        assert {tp: o.offset for tp, o in offsets.items()} == {
            TopicPartition(topic, 0): 3,
            TopicPartition(topic, 1): 0,
        }
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while admin.describe_groups([group_id])[0].state != GroupState.EMPTY:
            assert time.monotonic() < deadline, "the group did not become Empty"
            time.sleep(0.1)

    async def async_view() -> None:
        async with sluice.Admin(bootstrap_servers=broker.bootstrap) as admin:
            listed = {listing.group_id: listing for listing in await admin.list_groups()}
            assert listed[group_id].state == GroupState.EMPTY
            offsets = await admin.list_group_offsets(group_id, [TopicPartition(topic, 0)])
            assert offsets[TopicPartition(topic, 0)].offset == 3
            assert await admin.delete_groups([group_id]) == {group_id: None}
            (description,) = await admin.describe_groups([group_id])
            assert description.state == GroupState.DEAD

    run(async_view())


def test_sync_admin(broker: BrokerProcess, topic: str) -> None:
    with sluice.sync.Admin(broker.bootstrap, client_id="sync-admin-test") as admin:
        admin.create_topics([NewTopic(topic, partitions=1, configs={"retention.ms": "60000"})])
        assert admin.describe_topic_configs(topic)["retention.ms"].value == "60000"
        admin.create_partitions({topic: 2})
        assert len(admin.describe_topic(topic).partitions) == 2
        produce(broker.bootstrap, topic, 6, partition=1)
        tp = TopicPartition(topic, 1)
        assert admin.delete_records({tp: 2}) == {tp: 2}
        assert admin.list_offsets([tp], OffsetSpec.EARLIEST)[tp].offset == 2
        assert admin.describe_cluster().brokers[0].address == broker.bootstrap
        admin.delete_topics([topic])
        assert topic not in [t.name for t in admin.list_topics()]
    admin.close()  # idempotent


def test_unreachable_broker_fails_clearly() -> None:
    address = f"127.0.0.1:{free_port()}"

    async def scenario() -> None:
        admin = sluice.Admin(bootstrap_servers=address, request_timeout_ms=2000)
        with pytest.raises(BrokerUnreachableError, match=f"cannot reach broker at {address}"):
            await admin.start()

    run(scenario())
    with pytest.raises(BrokerUnreachableError, match=f"cannot reach broker at {address}"):
        sluice.sync.Admin(address, request_timeout_ms=2000)


def test_bad_options_are_named() -> None:
    with pytest.raises(ValueError, match="request_timeout_ms"):
        sluice.Admin(request_timeout_ms=0)
    with pytest.raises(ValueError, match="bootstrap server"):
        sluice.Admin(bootstrap_servers="no-port")
