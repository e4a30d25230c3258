"""Broker settings given on the command line (``-o``, ``--config``) and what they change:
topic defaults, broker configs as DescribeConfigs reports them, and retention."""

from __future__ import annotations

import time

import pytest
from broker_process import BrokerStartError
from client_helpers import CLIENT_TIMEOUT_S, admin_client, create_topic, unique_topic_name
from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType
from kafka_wire import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    KafkaConnection,
    Record,
    decode_batches,
    encode_batch,
    fetch_request,
    list_offsets_request,
    metadata_request,
    only_partition,
    produce_request,
)

RETENTION_DEADLINE_S = 30.0


def describe(bootstrap: str, resource_type: ResourceType, name: str) -> dict:
    admin = admin_client(bootstrap)
    resource = ConfigResource(resource_type, name)
    return admin.describe_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)


def list_offset(connection: KafkaConnection, topic: str, timestamp: int) -> int:
    result = only_partition(connection.request(list_offsets_request(topic, 0, timestamp)))
    assert result.error_code == 0, result
    return int(result.offset)


def test_override_sets_a_topic_default_that_new_topics_report(broker_factory, topic):
    broker = broker_factory({"log.retention.ms": "3600000", "message.max.bytes": "500000"})
    create_topic(broker.bootstrap, topic)
    configs = describe(broker.bootstrap, ResourceType.TOPIC, topic)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["max.message.bytes"].value == "500000"


def test_broker_configs_are_described_with_their_overridden_values(broker_factory):
    broker = broker_factory({"num.partitions": "3", "auto.create.topics.enable": "true"})
    configs = describe(broker.bootstrap, ResourceType.BROKER, "0")
    assert configs["num.partitions"].value == "3"
    assert configs["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["auto.create.topics.enable"].value == "true"


def test_config_file_settings_apply(broker_factory, tmp_path):
    config_file = tmp_path / "broker.properties"
    config_file.write_text("# partitions for auto-created topics\nnum.partitions=2\n\n")
    broker = broker_factory(extra_arguments=["--config", str(config_file)])
    name = unique_topic_name("from-config-file")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    metadata = producer.list_topics(name, timeout=CLIENT_TIMEOUT_S)
    assert sorted(metadata.topics[name].partitions) == [0, 1]


def test_an_unknown_setting_stops_the_broker_with_a_message_naming_it(broker_factory):
    broker = broker_factory({"no.such.setting": "1"}, start=False)
    with pytest.raises(BrokerStartError, match=r"no\.such\.setting"):
        broker.start(timeout_s=30)
    assert broker.last_exit_code not in (None, 0)


def produce_one_batch_per_request(
    connection: KafkaConnection, topic: str, count: int, timestamp_ms: int, value_bytes: int
) -> None:
    for i in range(count):
        batch = encode_batch(
            [Record(None, b"%05d" % i + b"x" * value_bytes, timestamp_ms=timestamp_ms)]
        )
        result = only_partition(connection.request(produce_request(topic, 0, batch)))
        assert (result.error_code, result.base_offset) == (0, i)


def wait_for_log_start_at_least(connection: KafkaConnection, topic: str, offset: int = 1) -> int:
    """Poll the log start offset until retention has moved it to ``offset`` or beyond.
    Retention runs every 200 ms and may run while a test is still producing, so a test
    that needs retention to have caught up with everything waits for its bound."""
    deadline = time.monotonic() + RETENTION_DEADLINE_S
    earliest = 0
    while time.monotonic() < deadline:
        earliest = list_offset(connection, topic, EARLIEST_TIMESTAMP)
        if earliest >= offset:
            return earliest
        time.sleep(0.1)
    raise AssertionError(
        f"retention left the log start of {topic} at {earliest}, below {offset}, "
        f"after {RETENTION_DEADLINE_S}s"
    )


def test_time_retention_deletes_old_segments_but_keeps_recent_data(broker_factory):
    broker = broker_factory({"log.retention.check.interval.ms": "200"})
    small_segments = {
        "segment.bytes": "2000",
        "retention.ms": "600000",
        "file.delete.delay.ms": "0",
    }
    old_topic, recent_topic = unique_topic_name("old"), unique_topic_name("recent")
    create_topic(broker.bootstrap, old_topic, config=small_segments)
    create_topic(broker.bootstrap, recent_topic, config=small_segments)
    now_ms = int(time.time() * 1000)
    with KafkaConnection(broker.host, broker.port) as connection:
        produce_one_batch_per_request(connection, old_topic, 40, now_ms - 3_600_000, 300)
        produce_one_batch_per_request(connection, recent_topic, 40, now_ms, 300)

        # Every batch is an hour old: retention takes every segment but the active one
        # (~370 bytes a batch, segments of 2000 bytes: at most 5 batches in it), perhaps
        # over several passes; wait for all of them, so the log start stays put below.
        earliest = wait_for_log_start_at_least(connection, old_topic, 40 - 2000 // 370)

        assert list_offset(connection, old_topic, LATEST_TIMESTAMP) == 40, "the log end stays"
        fetched = only_partition(connection.request(fetch_request(old_topic, 0, earliest)))
        assert fetched.error_code == 0
        assert decode_batches(fetched.records)[0].base_offset == earliest
        assert list_offset(connection, recent_topic, EARLIEST_TIMESTAMP) == 0, (
            "retention deleted data younger than retention.ms"
        )
        stale = only_partition(connection.request(fetch_request(old_topic, 0, 0)))
        assert stale.error_code == 1, "fetching below the log start is OFFSET_OUT_OF_RANGE"


def test_size_retention_keeps_the_partition_under_retention_bytes(broker_factory, topic):
    broker = broker_factory({"log.retention.check.interval.ms": "200"})
    create_topic(
        broker.bootstrap,
        topic,
        config={"segment.bytes": "2000", "retention.bytes": "6000", "file.delete.delay.ms": "0"},
    )
    with KafkaConnection(broker.host, broker.port) as connection:
        produce_one_batch_per_request(connection, topic, 60, int(time.time() * 1000), 300)
        # ~370 bytes a batch: what is left must come within a segment of retention.bytes.
        earliest = wait_for_log_start_at_least(connection, topic, 60 - (6000 + 2000) // 300)
        assert list_offset(connection, topic, LATEST_TIMESTAMP) == 60
        assert earliest < 60  # retention never deletes the active segment


def test_auto_create_disabled_answers_unknown_topic_to_metadata(broker_factory, topic):
    broker = broker_factory({"auto.create.topics.enable": "false"})
    with KafkaConnection(broker.host, broker.port) as connection:
        (described,) = connection.request(metadata_request([topic])).topics
        assert described.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
        assert topic not in {t.name for t in connection.request(metadata_request(None)).topics}
