"""confluent-kafka (librdkafka 2.x) against a real broker: produce, consume, admin."""

from __future__ import annotations

import threading
import time

import pytest
from client_helpers import (
    CLIENT_TIMEOUT_S,
    DeliveryFailedError,
    admin_client,
    consume_exactly,
    consumer_config,
    create_topic,
    produce_and_flush,
    producer_config,
)
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from kafka_wire import (
    KafkaConnection,
    decode_batches,
    fetch_request,
    librdkafka_enables_lz4,
    only_partition,
)

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def fetch_stored_batches(broker, topic: str, partition: int = 0, offset: int = 0):
    """The record batches exactly as the broker stores and serves them."""
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(
            fetch_request(topic, partition, offset, partition_max_bytes=16 * 1024 * 1024)
        )
    result = only_partition(response)
    assert result.error_code == 0, result
    return decode_batches(result.records)


def metadata_partition_count(bootstrap: str, topic: str) -> int:
    metadata = admin_client(bootstrap).list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    topic_metadata = metadata.topics[topic]
    assert topic_metadata.error is None, topic_metadata.error
    return len(topic_metadata.partitions)


def error_code_of(future) -> int:
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=CLIENT_TIMEOUT_S)
    return raised.value.args[0].code()


# ── produce and consume ────────────────────────────────────────────────────────────────


def test_keys_values_headers_timestamps_and_order_survive_the_round_trip(broker, topic):
    create_topic(broker.bootstrap, topic)
    base_timestamp_ms = int(time.time() * 1000) - 60_000
    sent = []
    for i in range(100):
        sent.append(
            {
                "partition": 0,
                "key": None if i % 10 == 0 else f"key-{i}".encode(),
                "value": None if i == 7 else b"v" * (i * 13),
                "headers": [("index", str(i).encode()), ("dup", b"a"), ("dup", b"b")]
                + ([("null-header", None)] if i % 3 == 0 else []),
                "timestamp": base_timestamp_ms + i,
            }
        )
    producer = Producer(producer_config(broker.bootstrap, acks="all"))
    delivered = produce_and_flush(producer, topic, sent)
    assert [d.offset for d in delivered] == list(range(100))

    consumed = consume_exactly(broker.bootstrap, [(topic, 0)], 100, extra_wait_s=0.5)

    assert len(consumed) == 100, "no message may be delivered twice"
    for i, message in enumerate(consumed):
        assert message.offset() == i
        assert message.key() == sent[i]["key"]
        assert message.value() == sent[i]["value"]
        assert message.headers() == sent[i]["headers"]
        assert message.timestamp() == (TIMESTAMP_CREATE_TIME, base_timestamp_ms + i)


def test_messages_spread_over_partitions_keep_per_partition_order(broker, topic):
    create_topic(broker.bootstrap, topic, num_partitions=4)
    producer = Producer(producer_config(broker.bootstrap))
    delivered = produce_and_flush(
        producer,
        topic,
        [{"key": f"k{i % 17}".encode(), "value": str(i).encode()} for i in range(400)],
    )
    by_partition: dict[int, list[bytes]] = {}
    for report in delivered:
        by_partition.setdefault(report.partition, []).append(report.value)
    assert len(by_partition) > 1, "keys should hash onto several partitions"

    consumed = consume_exactly(broker.bootstrap, [(topic, p) for p in range(4)], 400)

    consumed_by_partition: dict[int, list[bytes]] = {}
    for message in consumed:
        consumed_by_partition.setdefault(message.partition(), []).append(message.value())
    assert consumed_by_partition == by_partition


@pytest.mark.parametrize("codec", list(CODEC_IDS))
def test_every_codec_round_trips_and_is_stored_without_recompression(broker, topic, codec):
    create_topic(broker.bootstrap, topic)
    values = [(f"record {i} " * (1 + i % 20)).encode() for i in range(500)]
    # A long linger gathers the records into few large batches (a batch that compression
    # would not shrink, such as one lone short record, is sent uncompressed by librdkafka).
    producer = Producer(
        producer_config(broker.bootstrap, **{"compression.type": codec, "linger.ms": 1000})
    )
    delivered = produce_and_flush(
        producer,
        topic,
        [{"partition": 0, "key": str(i).encode(), "value": v} for i, v in enumerate(values)],
    )
    assert [d.offset for d in delivered] == list(range(500))

    consumed = consume_exactly(broker.bootstrap, [(topic, 0)], 500)
    assert [m.value() for m in consumed] == values
    assert [m.key() for m in consumed] == [str(i).encode() for i in range(500)]

    batches = fetch_stored_batches(broker, topic)
    assert batches, "the fetch returned no batch"
    if codec == "lz4" and not librdkafka_enables_lz4(broker.host, broker.port):
        pytest.xfail("librdkafka sends lz4 uncompressed until FindCoordinator v0 is advertised")
    compressed = [b for b in batches if b.compression == CODEC_IDS[codec]]
    assert sum(b.records_count for b in compressed) >= 490, [
        (b.compression, b.records_count) for b in batches
    ]
    # Whatever librdkafka sent uncompressed (only what compression would not shrink) is
    # stored as sent, uncompressed: the broker never recompresses.
    assert all(b.compression in (0, CODEC_IDS[codec]) for b in batches)
    assert all(b.crc_ok for b in batches)
    assert sum(b.records_count for b in batches) == 500


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_every_acks_level_delivers_all_messages(broker, topic, acks):
    create_topic(broker.bootstrap, topic)
    producer = Producer(producer_config(broker.bootstrap, acks=acks))
    delivered = produce_and_flush(
        producer, topic, [{"partition": 0, "value": f"m{i}".encode()} for i in range(50)]
    )
    if acks != "0":  # acks=0 gets no response, so the client learns no offsets
        assert [d.offset for d in delivered] == list(range(50))

    consumed = consume_exactly(broker.bootstrap, [(topic, 0)], 50, extra_wait_s=0.3)
    assert [m.value() for m in consumed] == [f"m{i}".encode() for i in range(50)]


def test_acks_zero_followed_by_acks_all_on_the_same_connection_is_answered(broker, topic):
    """acks=0 requests get no response; the next acknowledged request must not be answered
    with a stray response meant for them (correlation ids must line up)."""
    create_topic(broker.bootstrap, topic)
    fire_and_forget = Producer(producer_config(broker.bootstrap, acks="0"))
    produce_and_flush(fire_and_forget, topic, [{"partition": 0, "value": b"a"}] * 20)
    acknowledged = Producer(producer_config(broker.bootstrap, acks="all"))
    (report,) = produce_and_flush(acknowledged, topic, [{"partition": 0, "value": b"b"}])
    assert report.offset == 20


def test_idempotent_producer_writes_each_message_once_in_order(broker, topic):
    create_topic(broker.bootstrap, topic, num_partitions=3)
    producer = Producer(
        producer_config(
            broker.bootstrap,
            **{
                "enable.idempotence": True,
                "max.in.flight.requests.per.connection": 5,
                "linger.ms": 2,
                "batch.num.messages": 50,
            },
        )
    )
    sent = [{"partition": i % 3, "value": f"{i}".encode()} for i in range(1500)]
    delivered = produce_and_flush(producer, topic, sent)
    for partition in range(3):
        offsets = [d.offset for d in delivered if d.partition == partition]
        assert offsets == list(range(500))

    consumed = consume_exactly(
        broker.bootstrap, [(topic, p) for p in range(3)], 1500, extra_wait_s=0.5
    )
    assert len(consumed) == 1500
    for partition in range(3):
        values = [m.value() for m in consumed if m.partition() == partition]
        assert values == [f"{i}".encode() for i in range(partition, 1500, 3)]

    for partition in range(3):
        batches = fetch_stored_batches(broker, topic, partition)
        assert {b.producer_id for b in batches} != {-1}
        assert len({b.producer_id for b in batches}) == 1, "one producer id per session"
        assert all(b.producer_epoch >= 0 for b in batches)
        expected_sequence = 0
        for batch in batches:
            assert batch.base_sequence == expected_sequence
            expected_sequence += batch.records_count


def test_a_message_just_under_one_mebibyte_round_trips(broker, topic):
    create_topic(broker.bootstrap, topic)
    value = bytes(range(256)) * (900 * 1024 // 256)
    producer = Producer(producer_config(broker.bootstrap, acks="all"))
    (report,) = produce_and_flush(producer, topic, [{"partition": 0, "value": value}])
    (message,) = consume_exactly(broker.bootstrap, [(topic, 0)], 1)
    assert (message.offset(), message.value()) == (report.offset, value)


def test_concurrent_producers_get_distinct_contiguous_offsets(broker, topic):
    create_topic(broker.bootstrap, topic)
    reports: list[list] = [[] for _ in range(4)]

    def produce_share(worker: int) -> None:
        producer = Producer(producer_config(broker.bootstrap, acks="all"))
        messages = [{"partition": 0, "value": f"{worker}-{i}".encode()} for i in range(500)]
        reports[worker] = produce_and_flush(producer, topic, messages)

    threads = [threading.Thread(target=produce_share, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    offsets = sorted(r.offset for share in reports for r in share)
    assert offsets == list(range(2000))
    for share in reports:  # each producer's own messages keep their order
        assert [r.offset for r in share] == sorted(r.offset for r in share)

    consumed = consume_exactly(broker.bootstrap, [(topic, 0)], 2000)
    by_offset = {r.offset: r.value for share in reports for r in share}
    assert all(by_offset[m.offset()] == m.value() for m in consumed)


# ── topic auto-creation ────────────────────────────────────────────────────────────────


def test_producing_to_a_missing_topic_creates_it(broker, topic):
    producer = Producer(producer_config(broker.bootstrap))
    (report,) = produce_and_flush(producer, topic, [{"value": b"first"}])
    assert report.offset == 0
    assert metadata_partition_count(broker.bootstrap, topic) >= 1
    (message,) = consume_exactly(broker.bootstrap, [(topic, report.partition)], 1)
    assert message.value() == b"first"


def test_metadata_request_for_a_missing_topic_creates_it_with_num_partitions(broker_factory):
    broker = broker_factory({"num.partitions": "3"})
    name = "auto-created-by-metadata"
    producer = Producer(producer_config(broker.bootstrap))  # producers allow auto-creation
    metadata = producer.list_topics(name, timeout=CLIENT_TIMEOUT_S)
    assert metadata.topics[name].error is None
    assert sorted(metadata.topics[name].partitions) == [0, 1, 2]
    assert {p.leader for p in metadata.topics[name].partitions.values()} == {0}
    assert metadata_partition_count(broker.bootstrap, name) == 3


def test_auto_creation_can_be_disabled(broker_factory):
    broker = broker_factory({"auto.create.topics.enable": "false"})
    producer = Producer(producer_config(broker.bootstrap, **{"message.timeout.ms": 3000}))
    with pytest.raises(DeliveryFailedError):
        produce_and_flush(producer, "not-there", [{"value": b"x"}], timeout_s=10)
    topics = admin_client(broker.bootstrap).list_topics(timeout=CLIENT_TIMEOUT_S).topics
    assert "not-there" not in topics


# ── admin ──────────────────────────────────────────────────────────────────────────────


def test_create_topic_with_partitions_and_config_then_describe_it(broker, topic):
    create_topic(broker.bootstrap, topic, num_partitions=3, config={"retention.ms": "12345"})
    assert metadata_partition_count(broker.bootstrap, topic) == 3

    configs = _describe_topic(admin_client(broker.bootstrap), topic)
    assert configs["retention.ms"].value == "12345"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not configs["retention.ms"].is_default
    assert "segment.bytes" in configs
    assert "cleanup.policy" in configs
    assert configs["cleanup.policy"].value == "delete"


def test_creating_an_existing_topic_fails_with_topic_already_exists(broker, topic):
    create_topic(broker.bootstrap, topic)
    admin = admin_client(broker.bootstrap)
    futures = admin.create_topics([NewTopic(topic, 1, 1)])
    assert error_code_of(futures[topic]) == KafkaError.TOPIC_ALREADY_EXISTS


def test_validate_only_create_does_not_create_the_topic(broker, topic):
    admin = admin_client(broker.bootstrap)
    futures = admin.create_topics([NewTopic(topic, 2, 1)], validate_only=True)
    futures[topic].result(timeout=CLIENT_TIMEOUT_S)
    assert topic not in admin.list_topics(timeout=CLIENT_TIMEOUT_S).topics


def test_delete_topic_removes_it_and_its_data(broker, topic):
    create_topic(broker.bootstrap, topic)
    produce_and_flush(Producer(producer_config(broker.bootstrap)), topic, [{"value": b"gone"}])
    admin = admin_client(broker.bootstrap)
    admin.delete_topics([topic], operation_timeout=10)[topic].result(timeout=CLIENT_TIMEOUT_S)
    assert topic not in admin.list_topics(timeout=CLIENT_TIMEOUT_S).topics

    # Re-creating the name starts an empty log.
    create_topic(broker.bootstrap, topic)
    low, high = _watermarks(broker.bootstrap, topic, 0)
    assert (low, high) == (0, 0)


def test_deleting_a_missing_topic_fails_with_unknown_topic(broker, topic):
    admin = admin_client(broker.bootstrap)
    futures = admin.delete_topics([topic], operation_timeout=10)
    assert error_code_of(futures[topic]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_partitions_grows_a_topic_and_new_partitions_accept_writes(broker, topic):
    create_topic(broker.bootstrap, topic, num_partitions=2)
    admin = admin_client(broker.bootstrap)
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(timeout=CLIENT_TIMEOUT_S)
    assert metadata_partition_count(broker.bootstrap, topic) == 5

    producer = Producer(producer_config(broker.bootstrap))
    (report,) = produce_and_flush(producer, topic, [{"partition": 4, "value": b"new"}])
    assert (report.partition, report.offset) == (4, 0)


def test_create_partitions_cannot_shrink_a_topic(broker, topic):
    create_topic(broker.bootstrap, topic, num_partitions=3)
    admin = admin_client(broker.bootstrap)
    futures = admin.create_partitions([NewPartitions(topic, 2)])
    assert error_code_of(futures[topic]) == KafkaError.INVALID_PARTITIONS
    assert metadata_partition_count(broker.bootstrap, topic) == 3


def test_alter_configs_replaces_the_whole_topic_config(broker, topic):
    """The legacy AlterConfigs sets exactly the given configs: the others go back to their
    defaults (Kafka's semantics, which is why IncrementalAlterConfigs exists)."""
    create_topic(broker.bootstrap, topic, config={"retention.ms": "12345"})
    admin = admin_client(broker.bootstrap)
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"max.message.bytes": "5000"})
    admin.alter_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)

    configs = _describe_topic(admin, topic)
    assert configs["max.message.bytes"].value == "5000"
    assert configs["retention.ms"].value != "12345"
    assert configs["retention.ms"].is_default


def test_incremental_alter_configs_sets_and_deletes_one_key(broker, topic):
    create_topic(broker.bootstrap, topic, config={"max.message.bytes": "6000"})
    admin = admin_client(broker.bootstrap)
    default_retention_ms = _describe_topic(admin, topic)["retention.ms"].value

    set_retention = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "777", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([set_retention])[set_retention].result(timeout=CLIENT_TIMEOUT_S)
    configs = _describe_topic(admin, topic)
    assert configs["retention.ms"].value == "777"
    assert configs["max.message.bytes"].value == "6000", "other keys are left alone"

    delete_retention = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)
        ],
    )
    admin.incremental_alter_configs([delete_retention])[delete_retention].result(
        timeout=CLIENT_TIMEOUT_S
    )
    configs = _describe_topic(admin, topic)
    assert configs["retention.ms"].value == default_retention_ms
    assert configs["retention.ms"].is_default
    assert configs["max.message.bytes"].value == "6000"


def test_altered_max_message_bytes_is_enforced_on_produce(broker, topic):
    create_topic(broker.bootstrap, topic, config={"max.message.bytes": "2000"})
    producer = Producer(producer_config(broker.bootstrap, **{"message.timeout.ms": 10_000}))
    produce_and_flush(producer, topic, [{"partition": 0, "value": b"x" * 100}])
    with pytest.raises(DeliveryFailedError, match="MSG_SIZE_TOO_LARGE"):
        produce_and_flush(producer, topic, [{"partition": 0, "value": b"x" * 10_000}])


def test_unknown_topic_config_is_rejected(broker, topic):
    admin = admin_client(broker.bootstrap)
    futures = admin.create_topics([NewTopic(topic, 1, 1, config={"no.such.config": "1"})])
    assert error_code_of(futures[topic]) == KafkaError.INVALID_CONFIG


def test_delete_records_moves_the_log_start_offset(broker, topic):
    create_topic(broker.bootstrap, topic)
    produce_and_flush(
        Producer(producer_config(broker.bootstrap)),
        topic,
        [{"partition": 0, "value": str(i).encode()} for i in range(10)],
    )
    admin = admin_client(broker.bootstrap)
    futures = admin.delete_records([TopicPartition(topic, 0, 4)])
    deleted = next(iter(futures.values())).result(timeout=CLIENT_TIMEOUT_S)
    assert deleted.low_watermark == 4

    assert _watermarks(broker.bootstrap, topic, 0) == (4, 10)
    consumed = consume_exactly(broker.bootstrap, [(topic, 0)], 6, extra_wait_s=0.3)
    assert [m.offset() for m in consumed] == list(range(4, 10))
    assert [m.value() for m in consumed] == [str(i).encode() for i in range(4, 10)]


def test_delete_records_beyond_the_high_watermark_fails(broker, topic):
    create_topic(broker.bootstrap, topic)
    produce_and_flush(
        Producer(producer_config(broker.bootstrap)), topic, [{"partition": 0, "value": b"x"}]
    )
    admin = admin_client(broker.bootstrap)
    futures = admin.delete_records([TopicPartition(topic, 0, 50)])
    assert error_code_of(next(iter(futures.values()))) == KafkaError.OFFSET_OUT_OF_RANGE


def test_list_offsets_earliest_latest_and_by_timestamp(broker, topic):
    create_topic(broker.bootstrap, topic)
    timestamps = [1_000_000 + 1000 * i for i in range(10)]  # offsets 0..9
    produce_and_flush(
        Producer(producer_config(broker.bootstrap)),
        topic,
        [{"partition": 0, "value": b"v", "timestamp": ts} for ts in timestamps],
    )
    admin = admin_client(broker.bootstrap)
    partition = TopicPartition(topic, 0)

    def list_offset(spec):
        return admin.list_offsets({partition: spec})[partition].result(timeout=CLIENT_TIMEOUT_S)

    assert list_offset(OffsetSpec.earliest()).offset == 0
    assert list_offset(OffsetSpec.latest()).offset == 10
    exact = list_offset(OffsetSpec.for_timestamp(timestamps[3]))
    assert (exact.offset, exact.timestamp) == (3, timestamps[3])
    between = list_offset(OffsetSpec.for_timestamp(timestamps[6] - 1))
    assert (between.offset, between.timestamp) == (6, timestamps[6])
    assert list_offset(OffsetSpec.for_timestamp(timestamps[-1] + 1)).offset == -1


def test_consumer_offsets_for_times_and_watermarks(broker, topic):
    create_topic(broker.bootstrap, topic)
    timestamps = [2_000_000 + 10 * i for i in range(20)]
    produce_and_flush(
        Producer(producer_config(broker.bootstrap)),
        topic,
        [{"partition": 0, "value": b"v", "timestamp": ts} for ts in timestamps],
    )
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    try:
        (found,) = consumer.offsets_for_times(
            [TopicPartition(topic, 0, timestamps[12])], timeout=CLIENT_TIMEOUT_S
        )
        assert found.offset == 12
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 20)
    finally:
        consumer.close()


def test_consumer_reads_from_an_explicit_offset(broker, topic):
    create_topic(broker.bootstrap, topic)
    produce_and_flush(
        Producer(producer_config(broker.bootstrap)),
        topic,
        [{"partition": 0, "value": str(i).encode()} for i in range(30)],
    )
    consumed = consume_exactly(broker.bootstrap, [(topic, 0)], 5, start_offset=25)
    assert [m.offset() for m in consumed] == [25, 26, 27, 28, 29]


def test_consumer_waiting_at_the_end_receives_new_messages(broker, topic):
    """A consumer at the log end long-polls; a message produced later reaches it."""
    create_topic(broker.bootstrap, topic)
    producer = Producer(producer_config(broker.bootstrap))
    consumer = Consumer(consumer_config(broker.bootstrap))
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        assert consumer.consume(10, 0.5) == []
        produce_and_flush(producer, topic, [{"partition": 0, "value": b"late"}])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        received = []
        while not received and time.monotonic() < deadline:
            received = [m for m in consumer.consume(10, 0.5) if m.error() is None]
        assert [m.value() for m in received] == [b"late"]
    finally:
        consumer.close()


def _describe_topic(admin, topic: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)


def _watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()
