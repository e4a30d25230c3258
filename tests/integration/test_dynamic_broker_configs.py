"""Dynamic broker configs on one broker, through real clients: confluent-kafka's
incremental_alter_configs and kafka-python's legacy alter_configs on a BROKER resource,
what they change at once (produce's size check, retention of a topic without an
override), what DescribeConfigs shows, refusals, and a restart keeping them."""

from __future__ import annotations

import time

import pytest
from client_helpers import CLIENT_TIMEOUT_S, admin_client, create_topic
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kafka.admin import ConfigResource as KafkaPythonConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka_wire import KafkaConnection, Record, encode_batch, only_partition, produce_request
from test_broker_settings import (
    produce_one_batch_per_request,
    wait_for_log_start_at_least,
)

import sluice.sync
from sluice.client.admin import AlterConfigOp
from sluice.client.admin import ConfigSource as SluiceConfigSource

BROKER = 4
MESSAGE_TOO_LARGE = 10
RECORD_VALUE_BYTES = 5_000
"""A record larger than the dynamic message.max.bytes the tests set (2,000 bytes)."""


def incremental_alter(bootstrap: str, name: str, *entries: ConfigEntry) -> None:
    admin = admin_client(bootstrap)
    resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=list(entries))
    admin.incremental_alter_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)


def describe_broker(bootstrap: str, name: str) -> dict:
    admin = admin_client(bootstrap)
    resource = ConfigResource(ResourceType.BROKER, name)
    return admin.describe_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)


def describe_topic(bootstrap: str, topic: str) -> dict:
    admin = admin_client(bootstrap)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)


def produce_error(connection: KafkaConnection, topic: str, value_bytes: int) -> int:
    batch = encode_batch([Record(None, b"x" * value_bytes)])
    return int(only_partition(connection.request(produce_request(topic, 0, batch))).error_code)


def test_a_dynamic_message_max_bytes_changes_what_produce_accepts_and_survives_a_restart(
    broker_factory, topic
):
    broker = broker_factory()
    create_topic(broker.bootstrap, topic)
    with KafkaConnection(broker.host, broker.port) as connection:
        assert produce_error(connection, topic, RECORD_VALUE_BYTES) == 0

    incremental_alter(
        broker.bootstrap,
        "0",
        ConfigEntry("message.max.bytes", "2000", incremental_operation=AlterConfigOpType.SET),
    )
    with KafkaConnection(broker.host, broker.port) as connection:
        assert produce_error(connection, topic, RECORD_VALUE_BYTES) == MESSAGE_TOO_LARGE
        assert produce_error(connection, topic, 100) == 0

    described = describe_broker(broker.bootstrap, "0")["message.max.bytes"]
    assert (described.value, described.source, described.is_read_only) == (
        "2000",
        ConfigSource.DYNAMIC_BROKER_CONFIG.value,
        False,
    )
    topic_entry = describe_topic(broker.bootstrap, topic)["max.message.bytes"]
    assert (topic_entry.value, topic_entry.source) == (
        "2000",
        ConfigSource.DYNAMIC_BROKER_CONFIG.value,
    )

    broker.restart()
    with KafkaConnection(broker.host, broker.port) as connection:
        assert produce_error(connection, topic, RECORD_VALUE_BYTES) == MESSAGE_TOO_LARGE
    assert describe_broker(broker.bootstrap, "0")["message.max.bytes"].value == "2000"

    incremental_alter(
        broker.bootstrap,
        "0",
        ConfigEntry("message.max.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
    )
    with KafkaConnection(broker.host, broker.port) as connection:
        assert produce_error(connection, topic, RECORD_VALUE_BYTES) == 0
    described = describe_broker(broker.bootstrap, "0")["message.max.bytes"]
    assert described.source == ConfigSource.DEFAULT_CONFIG.value


def test_a_cluster_wide_retention_default_takes_effect_on_a_topic_without_override(
    broker_factory, topic
):
    broker = broker_factory({"log.retention.check.interval.ms": "200"})
    create_topic(
        broker.bootstrap, topic, config={"segment.bytes": "2000", "file.delete.delay.ms": "0"}
    )
    an_hour_ago_ms = int(time.time() * 1000) - 3_600_000
    with KafkaConnection(broker.host, broker.port) as connection:
        produce_one_batch_per_request(connection, topic, 40, an_hour_ago_ms, 300)

        # The cluster-wide level (resource ""; confluent-kafka and kafka-python refuse
        # an empty broker name, Sluice's admin sends it): ten minutes, so the hour-old
        # records go.
        with sluice.sync.Admin(bootstrap_servers=broker.bootstrap) as admin:
            admin.incremental_alter_configs(
                BROKER, "", [AlterConfigOp.set("log.retention.ms", "600000")]
            )
            cluster = admin.describe_configs(BROKER, "")
        assert wait_for_log_start_at_least(connection, topic) >= 1

    retention = describe_topic(broker.bootstrap, topic)["retention.ms"]
    assert (retention.value, retention.source) == (
        "600000",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
    )
    # Describing the default resource shows only the cluster-wide dynamic settings.
    assert {name: (e.value, e.source) for name, e in cluster.items()} == {
        "log.retention.ms": ("600000", SluiceConfigSource.DYNAMIC_DEFAULT_BROKER)
    }
    own = describe_broker(broker.bootstrap, "0")["log.retention.ms"]
    assert (own.value, own.source) == (
        "600000",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
    )


def test_kafka_python_legacy_alter_configs_and_synonyms(broker_factory):
    broker = broker_factory({"log.retention.ms": "5000"})
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    resource = KafkaPythonConfigResource(ConfigResourceType.BROKER, "0")
    try:
        # kafka-python checks the names against the settings described as dynamic.
        dynamic = admin.describe_configs([resource], config_filter="dynamic")["broker"]["0"]
        assert {"log.retention.ms", "message.max.bytes", "min.insync.replicas"} <= set(dynamic)
        assert "num.partitions" not in dynamic
        for configs in (
            {"log.retention.ms": "3600000", "min.insync.replicas": "2"},
            {"log.retention.ms": "7200000"},
        ):
            admin.alter_configs(
                [KafkaPythonConfigResource(ConfigResourceType.BROKER, "0", configs=configs)],
                incremental=False,
            )
        described = admin.describe_configs([resource], include_synonyms=True, config_filter="all")[
            "broker"
        ]["0"]
    finally:
        admin.close()
    retention = described["log.retention.ms"]
    assert (retention["value"], retention["config_source"]) == (
        "7200000",
        "DYNAMIC_BROKER_CONFIG",
    )
    assert [(s["value"], s["source"]) for s in retention["synonyms"]] == [
        ("7200000", "DYNAMIC_BROKER_CONFIG"),
        ("5000", "STATIC_BROKER_CONFIG"),
        ("604800000", "DEFAULT_CONFIG"),
    ]
    # kafka-python's legacy alter sends the other dynamic settings along (AlterConfigs
    # replaces the whole set, so it fills them in): min.insync.replicas stays.
    assert described["min.insync.replicas"]["value"] == "2"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET),
            "Cannot update these configs dynamically: Set(num.partitions)",
        ),
        (
            ConfigEntry("message.max.bytes", "big", incremental_operation=AlterConfigOpType.SET),
            "Invalid value big for configuration message.max.bytes",
        ),
    ],
)
def test_refused_changes_name_the_setting_and_change_nothing(broker_factory, entry, message):
    broker = broker_factory()
    with pytest.raises(KafkaException) as refused:
        incremental_alter(broker.bootstrap, "0", entry)
    error = refused.value.args[0]
    assert error.name() == "INVALID_REQUEST"
    assert message in error.str()
    described = describe_broker(broker.bootstrap, "0")
    assert described[entry.name].source in (
        ConfigSource.DEFAULT_CONFIG.value,
        ConfigSource.STATIC_BROKER_CONFIG.value,
    )
    assert broker.is_running
