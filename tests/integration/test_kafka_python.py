"""kafka-python 3 against a real broker: producer (idempotent by default), consumer with
manual assignment, every codec it supports, and the admin client."""

from __future__ import annotations

import time

import kafka.codec
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
from kafka.errors import TopicAlreadyExistsError
from kafka_wire import KafkaConnection, decode_batches, fetch_request, only_partition

TIMEOUT_S = 30.0

CODECS = {
    None: (0, kafka.codec.has_gzip),  # no compression
    "gzip": (1, kafka.codec.has_gzip),
    "snappy": (2, kafka.codec.has_snappy),
    "lz4": (3, kafka.codec.has_lz4),
    "zstd": (4, kafka.codec.has_zstd),
}


def make_producer(bootstrap: str, **config) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=15_000, **config)


def make_admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15_000)


def send_all(producer: KafkaProducer, topic: str, messages: list[dict]) -> list:
    futures = [producer.send(topic, **message) for message in messages]
    producer.flush(timeout=TIMEOUT_S)
    return [future.get(timeout=TIMEOUT_S) for future in futures]


def read_exactly(bootstrap: str, partitions: list[TopicPartition], count: int, **seek) -> list:
    """Assign partitions (no group), seek, and poll until ``count`` records arrived."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=15_000,
        fetch_max_wait_ms=100,
    )
    try:
        consumer.assign(partitions)
        if "offset" in seek:
            for partition in partitions:
                consumer.seek(partition, seek["offset"])
        else:
            consumer.seek_to_beginning()
        records: list = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(records) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
        assert len(records) >= count, f"read {len(records)} of {count} records"
        return records
    finally:
        consumer.close()


def stored_batches(broker, topic: str, partition: int = 0):
    with KafkaConnection(broker.host, broker.port) as connection:
        result = only_partition(connection.request(fetch_request(topic, partition, 0)))
    assert result.error_code == 0
    return decode_batches(result.records)


def create_topic(bootstrap: str, name: str, partitions: int = 1, configs: dict | None = None):
    admin = make_admin(bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])
    finally:
        admin.close()


def test_default_producer_is_idempotent_and_round_trips_keys_and_headers(broker, topic):
    create_topic(broker.bootstrap, topic)
    producer = make_producer(broker.bootstrap)
    messages = [
        {
            "partition": 0,
            "key": f"key-{i}".encode(),
            "value": f"value-{i}".encode(),
            "headers": [("index", str(i).encode()), ("kind", b"test")],
        }
        for i in range(200)
    ]
    metadata = send_all(producer, topic, messages)
    producer.close()
    assert [m.offset for m in metadata] == list(range(200))

    records = read_exactly(broker.bootstrap, [TopicPartition(topic, 0)], 200)
    assert [(r.key, r.value, list(r.headers)) for r in records] == [
        (m["key"], m["value"], m["headers"]) for m in messages
    ]
    assert [r.offset for r in records] == list(range(200))

    batches = stored_batches(broker, topic)
    assert all(b.producer_id >= 0 for b in batches), "kafka-python 3 produces idempotently"
    assert batches[0].base_sequence == 0


@pytest.mark.parametrize("codec", list(CODECS), ids=lambda c: c or "none")
def test_every_supported_codec_round_trips(broker, topic, codec):
    codec_id, available = CODECS[codec]
    if not available():
        pytest.skip(f"kafka-python has no {codec} library installed")
    create_topic(broker.bootstrap, topic)
    producer = make_producer(broker.bootstrap, compression_type=codec, linger_ms=20)
    values = [(f"payload {i} " * 30).encode() for i in range(300)]
    send_all(producer, topic, [{"partition": 0, "value": v} for v in values])
    producer.close()

    records = read_exactly(broker.bootstrap, [TopicPartition(topic, 0)], 300)
    assert [r.value for r in records] == values
    assert {b.compression for b in stored_batches(broker, topic)} == {codec_id}


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_non_idempotent_producer_with_each_acks_level(broker, topic, acks):
    create_topic(broker.bootstrap, topic)
    producer = make_producer(broker.bootstrap, acks=acks, enable_idempotence=False)
    send_all(producer, topic, [{"partition": 0, "value": str(i).encode()} for i in range(40)])
    producer.close()
    records = read_exactly(broker.bootstrap, [TopicPartition(topic, 0)], 40)
    assert [r.value for r in records] == [str(i).encode() for i in range(40)]
    assert all(b.producer_id == -1 for b in stored_batches(broker, topic))


def test_consumer_seeks_to_an_explicit_offset(broker, topic):
    create_topic(broker.bootstrap, topic)
    producer = make_producer(broker.bootstrap)
    send_all(producer, topic, [{"partition": 0, "value": str(i).encode()} for i in range(50)])
    producer.close()
    records = read_exactly(broker.bootstrap, [TopicPartition(topic, 0)], 8, offset=42)
    assert [r.offset for r in records] == list(range(42, 50))


def test_offset_lookups_by_time_and_ends(broker, topic):
    create_topic(broker.bootstrap, topic)
    producer = make_producer(broker.bootstrap)
    timestamps = [5_000_000 + 100 * i for i in range(10)]
    send_all(
        producer,
        topic,
        [{"partition": 0, "value": b"v", "timestamp_ms": ts} for ts in timestamps],
    )
    producer.close()
    partition = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    try:
        assert consumer.beginning_offsets([partition]) == {partition: 0}
        assert consumer.end_offsets([partition]) == {partition: 10}
        found = consumer.offsets_for_times({partition: timestamps[4] - 50})[partition]
        assert (found.offset, found.timestamp) == (4, timestamps[4])
        assert consumer.offsets_for_times({partition: timestamps[-1] + 1})[partition] is None
    finally:
        consumer.close()


def test_auto_creates_a_topic_on_first_send(broker, topic):
    producer = make_producer(broker.bootstrap)
    (metadata,) = send_all(producer, topic, [{"value": b"hello"}])
    producer.close()
    assert metadata.offset == 0
    records = read_exactly(broker.bootstrap, [TopicPartition(topic, metadata.partition)], 1)
    assert records[0].value == b"hello"


def test_admin_client_topic_lifecycle(broker, topic):
    admin = make_admin(broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "86400000"})])
        assert topic in admin.list_topics()
        (description,) = admin.describe_topics([topic])
        assert description["error_code"] == 0
        assert len(description["partitions"]) == 2

        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic, 1, 1)])

        admin.create_partitions({topic: NewPartitions(4)})
        (description,) = admin.describe_topics([topic])
        assert len(description["partitions"]) == 4

        admin.delete_topics([topic])
        assert topic not in admin.list_topics()
    finally:
        admin.close()


def test_admin_client_describes_and_alters_configs(broker, topic):
    create_topic(broker.bootstrap, topic, configs={"retention.ms": "86400000"})
    admin = make_admin(broker.bootstrap)
    try:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        described = admin.describe_configs([resource], config_filter="all")
        configs = described["topic"][topic]
        assert configs["retention.ms"]["value"] == "86400000"
        assert "cleanup.policy" in configs

        admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "3600000"})]
        )
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        assert described["topic"][topic]["retention.ms"]["value"] == "3600000"
    finally:
        admin.close()


def test_admin_client_deletes_records(broker, topic):
    create_topic(broker.bootstrap, topic)
    producer = make_producer(broker.bootstrap)
    send_all(producer, topic, [{"partition": 0, "value": str(i).encode()} for i in range(10)])
    producer.close()
    partition = TopicPartition(topic, 0)
    admin = make_admin(broker.bootstrap)
    try:
        result = admin.delete_records({partition: 7})
        assert result[partition]["low_watermark"] == 7
    finally:
        admin.close()
    records = read_exactly(broker.bootstrap, [partition], 3)
    assert [r.offset for r in records] == [7, 8, 9]
