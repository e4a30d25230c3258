"""aiokafka (asyncio, no flexible versions) against a real broker."""

from __future__ import annotations

import asyncio
import time

import aiokafka.codec
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from kafka_wire import KafkaConnection, decode_batches, fetch_request, only_partition

TIMEOUT_S = 30.0

CODECS = {
    None: (0, aiokafka.codec.has_gzip),
    "gzip": (1, aiokafka.codec.has_gzip),
    "snappy": (2, aiokafka.codec.has_snappy),
    "lz4": (3, aiokafka.codec.has_lz4),
    "zstd": (4, aiokafka.codec.has_zstd),
}


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, TIMEOUT_S * 2))


async def create_topic(bootstrap: str, name: str, partitions: int = 1, configs=None) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(name, partitions, 1, topic_configs=configs or {})]
        )
        assert [error for _name, error, *_ in response.topic_errors] == [0]
    finally:
        await admin.close()


async def read_exactly(bootstrap: str, partitions: list[TopicPartition], count: int) -> list:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    await consumer.start()
    try:
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        records: list = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(records) < count and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                records.extend(batch)
        assert len(records) >= count, f"read {len(records)} of {count} records"
        return records
    finally:
        await consumer.stop()


def stored_codecs(broker, topic: str) -> set[int]:
    with KafkaConnection(broker.host, broker.port) as connection:
        result = only_partition(connection.request(fetch_request(topic, 0, 0)))
    assert result.error_code == 0
    return {batch.compression for batch in decode_batches(result.records)}


def test_send_and_wait_then_consume_with_keys_and_headers(broker, topic):
    async def scenario():
        await create_topic(broker.bootstrap, topic)
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        await producer.start()
        try:
            offsets = []
            for i in range(50):
                metadata = await producer.send_and_wait(
                    topic,
                    value=f"v{i}".encode(),
                    key=f"k{i}".encode(),
                    partition=0,
                    headers=[("i", str(i).encode())],
                )
                offsets.append(metadata.offset)
        finally:
            await producer.stop()
        assert offsets == list(range(50))
        records = await read_exactly(broker.bootstrap, [TopicPartition(topic, 0)], 50)
        assert [(r.key, r.value, list(r.headers)) for r in records] == [
            (f"k{i}".encode(), f"v{i}".encode(), [("i", str(i).encode())]) for i in range(50)
        ]

    run(scenario())


def test_idempotent_producer_batches_are_delivered_once(broker, topic):
    async def scenario():
        await create_topic(broker.bootstrap, topic, partitions=2)
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, enable_idempotence=True, linger_ms=10
        )
        await producer.start()
        try:
            futures = [
                await producer.send(topic, value=str(i).encode(), partition=i % 2)
                for i in range(400)
            ]
            results = await asyncio.gather(*futures)
        finally:
            await producer.stop()
        for partition in (0, 1):
            assert sorted(r.offset for r in results if r.partition == partition) == list(range(200))
        records = await read_exactly(
            broker.bootstrap, [TopicPartition(topic, 0), TopicPartition(topic, 1)], 400
        )
        assert sorted(int(r.value) for r in records) == list(range(400))

    run(scenario())


@pytest.mark.parametrize("codec", list(CODECS), ids=lambda c: c or "none")
def test_every_codec_round_trips(broker, topic, codec):
    codec_id, available = CODECS[codec]
    if not available():
        pytest.skip(f"aiokafka has no {codec} library installed")

    async def scenario():
        await create_topic(broker.bootstrap, topic)
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=20
        )
        await producer.start()
        values = [(f"aio {i} " * 25).encode() for i in range(200)]
        try:
            futures = [await producer.send(topic, value=v, partition=0) for v in values]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()
        records = await read_exactly(broker.bootstrap, [TopicPartition(topic, 0)], 200)
        assert [r.value for r in records] == values

    run(scenario())
    assert stored_codecs(broker, topic) == {codec_id}


def test_admin_creates_grows_describes_and_deletes(broker, topic):
    async def scenario():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics(
                [NewTopic(topic, 1, 1, topic_configs={"retention.ms": "60000"})]
            )
            assert topic in await admin.list_topics()

            await admin.create_partitions({topic: NewPartitions(3)})
            (description,) = await admin.describe_topics([topic])
            assert len(description["partitions"]) == 3

            (response,) = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic)]
            )
            (resource,) = response.resources
            error_code, _message, _type, name, entries = resource[:5]
            assert (error_code, name) == (0, topic)
            values = {entry[0]: entry[1] for entry in entries}
            assert values["retention.ms"] == "60000"

            producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
            await producer.start()
            try:
                for i in range(5):
                    await producer.send_and_wait(topic, value=str(i).encode(), partition=0)
            finally:
                await producer.stop()
            partition = TopicPartition(topic, 0)
            low_watermarks = await admin.delete_records({partition: RecordsToDelete(3)})
            assert low_watermarks[partition] == 3

            await admin.delete_topics([topic])
            assert topic not in await admin.list_topics()
        finally:
            await admin.close()

    run(scenario())
