"""The Sluice client and other Kafka clients read each other's records, and agree on
where a key goes.

- ``sluice.Producer`` → kafka-python ``KafkaConsumer`` and confluent-kafka ``Consumer``,
  for every codec: keys (and a null key), values (and a null and an empty one),
  headers, timestamps, partitions and offsets arrive intact;
- kafka-python ``KafkaProducer`` and confluent-kafka ``Producer`` → ``sluice.Consumer``,
  for every codec each of them supports;
- on a 12-partition topic, ``sluice.Producer``, kafka-python's default partitioner and
  confluent-kafka with ``partitioner=murmur2_random`` put each of 200 keys on the same
  partition (as the broker reports it, not as a local function computes it).

Every wait is bounded and driven by the clients' own answers; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

import kafka
import kafka.codec
import pytest
from client_helpers import (
    consume_exactly,
    create_topic,
    produce_and_flush,
    producer_config,
)
from confluent_kafka import Producer as ConfluentProducer

import sluice
from sluice.common.ids import TopicPartition

TIMEOUT_S = 30.0
PARTITIONS = 3
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TIMESTAMP_MS = 1_700_000_000_000

# (partition, offset) → (key, value, headers, timestamp in ms)
Landed = dict[tuple[int, int], tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]]


def _records(count: int = 40) -> list[dict[str, Any]]:
    """Records with keys, compressible values of varied length, and headers; one with a
    null key, one with a null value (a tombstone), one with an empty value."""
    records: list[dict[str, Any]] = []
    for i in range(count):
        records.append(
            {
                "key": f"key-{i}".encode(),
                "value": (f"value {i} ".encode() * (1 + 7 * i))[: 50 + 97 * i],
                "headers": [("index", str(i).encode()), ("ключ", "значение".encode()), ("e", b"")],
                "timestamp_ms": BASE_TIMESTAMP_MS + i,
            }
        )
    records[1]["key"] = None
    records[2]["value"] = None
    records[3]["value"] = b""
    records[4]["headers"] = []
    return records


def _run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, TIMEOUT_S * 2))


# ── the Sluice client's side ───────────────────────────────────────────────────────────


async def _sluice_produce(bootstrap: str, topic: str, codec: str, records: list[dict]) -> Landed:
    async with sluice.Producer(bootstrap, compression_type=codec, linger_ms=5) as producer:
        futures = [
            await producer.send(
                topic,
                record["value"],
                key=record["key"],
                headers=record["headers"],
                timestamp_ms=record["timestamp_ms"],
            )
            for record in records
        ]
        landed = await asyncio.gather(*futures)
    return {
        (meta.partition, meta.offset): (
            record["key"],
            record["value"],
            record["headers"],
            record["timestamp_ms"],
        )
        for meta, record in zip(landed, records, strict=True)
    }


async def _sluice_consume(bootstrap: str, topic: str, partitions: int, count: int) -> Landed:
    consumed: Landed = {}
    async with sluice.Consumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=100) as consumer:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        deadline = time.monotonic() + TIMEOUT_S
        while len(consumed) < count and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for r in records:
                    assert r.timestamp_type == 0
                    consumed[(r.partition, r.offset)] = (
                        r.key,
                        r.value,
                        [(name, value) for name, value in r.headers],
                        r.timestamp,
                    )
    assert len(consumed) == count, f"sluice.Consumer read {len(consumed)} of {count} records"
    return consumed


# ── kafka-python's side ────────────────────────────────────────────────────────────────


def _kafka_python_consume(bootstrap: str, topic: str, partitions: int, count: int) -> Landed:
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        request_timeout_ms=15_000,
        fetch_max_wait_ms=100,
    )
    try:
        consumer.assign([kafka.TopicPartition(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        consumed: Landed = {}
        deadline = time.monotonic() + TIMEOUT_S
        while len(consumed) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                for r in records:
                    consumed[(r.partition, r.offset)] = (
                        r.key,
                        r.value,
                        list(r.headers),
                        r.timestamp,
                    )
    finally:
        consumer.close()
    assert len(consumed) == count, f"KafkaConsumer read {len(consumed)} of {count} records"
    return consumed


def _kafka_python_produce(bootstrap: str, topic: str, codec: str, records: list[dict]) -> Landed:
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        linger_ms=5,
        request_timeout_ms=15_000,
    )
    try:
        futures = [
            producer.send(
                topic,
                value=record["value"],
                key=record["key"],
                headers=record["headers"],
                timestamp_ms=record["timestamp_ms"],
            )
            for record in records
        ]
        producer.flush(timeout=TIMEOUT_S)
        landed = [future.get(timeout=TIMEOUT_S) for future in futures]
    finally:
        producer.close(timeout=TIMEOUT_S)
    return {
        (meta.partition, meta.offset): (
            record["key"],
            record["value"],
            record["headers"],
            record["timestamp_ms"],
        )
        for meta, record in zip(landed, records, strict=True)
    }


def _kafka_python_has(codec: str) -> bool:
    checks = {
        "none": lambda: True,
        "gzip": kafka.codec.has_gzip,
        "snappy": kafka.codec.has_snappy,
        "lz4": kafka.codec.has_lz4,
        "zstd": kafka.codec.has_zstd,
    }
    return bool(checks[codec]())


# ── tests ──────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("codec", CODECS)
def test_sluice_producer_to_kafka_python_consumer(broker, topic, codec):
    if not _kafka_python_has(codec):
        pytest.skip(f"kafka-python cannot decode {codec} here")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    records = _records()
    sent = _run(_sluice_produce(broker.bootstrap, topic, codec, records))
    assert len(sent) == len(records)
    assert len({partition for partition, _offset in sent}) > 1, "keys spread over partitions"

    assert _kafka_python_consume(broker.bootstrap, topic, PARTITIONS, len(records)) == sent


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_producer_to_sluice_consumer(broker, topic, codec):
    if not _kafka_python_has(codec):
        pytest.skip(f"kafka-python cannot encode {codec} here")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    records = _records()
    sent = _kafka_python_produce(broker.bootstrap, topic, codec, records)
    assert len(sent) == len(records)

    assert _run(_sluice_consume(broker.bootstrap, topic, PARTITIONS, len(records))) == sent


@pytest.mark.parametrize("codec", CODECS)
def test_sluice_producer_to_confluent_consumer(broker, topic, codec):
    create_topic(broker.bootstrap, topic, PARTITIONS)
    records = _records()
    sent = _run(_sluice_produce(broker.bootstrap, topic, codec, records))

    messages = consume_exactly(
        broker.bootstrap, [(topic, p) for p in range(PARTITIONS)], len(records)
    )
    consumed: Landed = {}
    for message in messages:
        timestamp_type, timestamp = message.timestamp()
        assert timestamp_type == 1  # librdkafka's TIMESTAMP_CREATE_TIME
        consumed[(message.partition(), message.offset())] = (
            message.key(),
            message.value(),
            list(message.headers() or []),
            timestamp,
        )
    assert consumed == sent


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_producer_to_sluice_consumer(broker, topic, codec):
    create_topic(broker.bootstrap, topic, PARTITIONS)
    records = _records()
    producer = ConfluentProducer(
        producer_config(broker.bootstrap, **{"compression.type": codec, "acks": "all"})
    )
    delivered = produce_and_flush(
        producer,
        topic,
        [
            {
                "key": record["key"],
                "value": record["value"],
                "headers": record["headers"],
                "timestamp": record["timestamp_ms"],
            }
            for record in records
        ],
    )
    sent: Landed = {
        (d.partition, d.offset): (r["key"], r["value"], r["headers"], r["timestamp_ms"])
        for d, r in zip(delivered, records, strict=True)
    }

    assert _run(_sluice_consume(broker.bootstrap, topic, PARTITIONS, len(records))) == sent


def _partition_keys() -> list[bytes]:
    """200 keys of every length from 1 to 40 bytes (all four murmur2 tail cases), text
    and binary."""
    keys = [f"user-{i}".encode() for i in range(100)]
    keys += [bytes((i * 37 + j * 11) % 256 for j in range(1 + i % 40)) for i in range(100)]
    assert len(set(keys)) == 200
    return keys


def test_the_three_producers_put_each_key_on_the_same_partition(broker, topic):
    partitions = 12
    create_topic(broker.bootstrap, topic, partitions)
    keys = _partition_keys()

    async def with_sluice() -> list[int]:
        async with sluice.Producer(broker.bootstrap, linger_ms=5) as producer:
            futures = [await producer.send(topic, b"sluice", key=key) for key in keys]
            return [meta.partition for meta in await asyncio.gather(*futures)]

    by_sluice = _run(with_sluice())

    producer = kafka.KafkaProducer(
        bootstrap_servers=broker.bootstrap, linger_ms=5, request_timeout_ms=15_000
    )
    try:
        futures = [producer.send(topic, value=b"kafka-python", key=key) for key in keys]
        producer.flush(timeout=TIMEOUT_S)
        by_kafka_python = [future.get(timeout=TIMEOUT_S).partition for future in futures]
    finally:
        producer.close(timeout=TIMEOUT_S)

    confluent = ConfluentProducer(producer_config(broker.bootstrap, partitioner="murmur2_random"))
    delivered = produce_and_flush(
        confluent, topic, [{"key": key, "value": b"confluent"} for key in keys]
    )
    by_confluent = [d.partition for d in delivered]

    assert len(set(by_sluice)) == partitions, "200 keys reach every one of 12 partitions"
    disagreements = [
        (key, s, k, c)
        for key, s, k, c in zip(keys, by_sluice, by_kafka_python, by_confluent, strict=True)
        if not s == k == c
    ]
    assert disagreements == []
