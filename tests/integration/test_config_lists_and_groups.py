"""IncrementalAlterConfigs on list configs and on groups, as Kafka answers them:
``cleanup.policy`` keeps the order given, APPEND adds at the end, SUBTRACT may leave it
empty; config resource GROUP (32) holds per-group settings, checked by name and range,
stored in the metadata store (they survive a restart), described with their sources.
Driven by confluent-kafka, kafka-python and raw requests."""

from __future__ import annotations

import pytest
from client_helpers import CLIENT_TIMEOUT_S, admin_client, create_topic, unique_group_id
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka.admin import AlterConfigOp as KafkaPythonAlterConfigOp
from kafka.admin import ConfigResource as KafkaPythonConfigResource
from kafka.admin import ConfigResourceType
from kafka_wire import KafkaConnection
from kio.schema.describe_configs.v3 import request as describe_configs_v3
from kio.schema.incremental_alter_configs.v0 import request as incremental_v0

NONE = 0
INVALID_CONFIG = 40
INVALID_REQUEST = 42
GROUP_RESOURCE = 32
GROUP_CONFIG_SOURCE = 8
DEFAULT_CONFIG_SOURCE = 5


def _topic_config(bootstrap: str, topic: str, name: str) -> ConfigEntry:
    admin = admin_client(bootstrap)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)
    return configs[name]


def _alter(bootstrap: str, resource: ConfigResource) -> None:
    admin = admin_client(bootstrap)
    futures = admin.incremental_alter_configs([resource], request_timeout=15)
    futures[resource].result(timeout=CLIENT_TIMEOUT_S)


def _policy_op(topic: str, op: AlterConfigOpType, value: str) -> ConfigResource:
    return ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[ConfigEntry("cleanup.policy", value, incremental_operation=op)],
    )


# ── cleanup.policy is a list ─────────────────────────────────────────────────────────


def test_cleanup_policy_keeps_the_order_it_was_given(broker, topic):
    create_topic(broker.bootstrap, topic, config={"cleanup.policy": "delete,compact"})
    assert _topic_config(broker.bootstrap, topic, "cleanup.policy").value == "delete,compact"


def test_append_and_subtract_with_confluent(broker, topic):
    create_topic(broker.bootstrap, topic)
    _alter(broker.bootstrap, _policy_op(topic, AlterConfigOpType.APPEND, "compact"))
    entry = _topic_config(broker.bootstrap, topic, "cleanup.policy")
    assert (entry.value, entry.source) == (
        "delete,compact",
        ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
    )

    _alter(broker.bootstrap, _policy_op(topic, AlterConfigOpType.SUBTRACT, "delete"))
    assert _topic_config(broker.bootstrap, topic, "cleanup.policy").value == "compact"

    # Subtracting the last policy leaves the empty list (Kafka 4.2+: keep everything).
    _alter(broker.bootstrap, _policy_op(topic, AlterConfigOpType.SUBTRACT, "compact"))
    entry = _topic_config(broker.bootstrap, topic, "cleanup.policy")
    assert (entry.value, entry.source) == ("", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)

    _alter(broker.bootstrap, _policy_op(topic, AlterConfigOpType.APPEND, "delete"))
    assert _topic_config(broker.bootstrap, topic, "cleanup.policy").value == "delete"


def test_append_on_a_config_that_is_not_a_list_is_invalid_config(broker, topic):
    create_topic(broker.bootstrap, topic)
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND)
        ],
    )
    admin = admin_client(broker.bootstrap)
    with pytest.raises(KafkaException) as raised:
        admin.incremental_alter_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)
    assert raised.value.args[0].code() == INVALID_CONFIG


def test_append_and_subtract_with_kafka_python(broker, topic):
    create_topic(broker.bootstrap, topic)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15_000)
    try:
        resource = KafkaPythonConfigResource(
            ConfigResourceType.TOPIC,
            topic,
            configs={"cleanup.policy": (KafkaPythonAlterConfigOp.APPEND, "compact")},
        )
        admin.alter_configs([resource], incremental=True)
        assert _topic_config(broker.bootstrap, topic, "cleanup.policy").value == "delete,compact"
        resource.configs = {"cleanup.policy": (KafkaPythonAlterConfigOp.SUBTRACT, "delete")}
        admin.alter_configs([resource], incremental=True)
    finally:
        admin.close()
    assert _topic_config(broker.bootstrap, topic, "cleanup.policy").value == "compact"


# ── group configs (resource type 32) ────────────────────────────────────────────────


def _group_resource(group: str, **changes: tuple[AlterConfigOpType, str | None]) -> ConfigResource:
    return ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(name, value, incremental_operation=op)
            for name, (op, value) in changes.items()
        ],
    )


def _group_configs(bootstrap: str, group: str) -> dict[str, ConfigEntry]:
    admin = admin_client(bootstrap)
    resource = ConfigResource(ResourceType.GROUP, group)
    return admin.describe_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)


def test_group_configs_are_set_described_and_survive_a_restart(broker_factory):
    broker = broker_factory()
    group = unique_group_id()
    described = _group_configs(broker.bootstrap, group)
    session = described["consumer.session.timeout.ms"]
    assert (session.value, session.source) == ("45000", ConfigSource.DEFAULT_CONFIG.value)
    assert "share.record.lock.duration.ms" in described

    _alter(
        broker.bootstrap,
        _group_resource(
            group,
            **{
                "consumer.session.timeout.ms": (AlterConfigOpType.SET, "50000"),
                "share.auto.offset.reset": (AlterConfigOpType.SET, "earliest"),
            },
        ),
    )
    broker.stop()
    broker.start()
    described = _group_configs(broker.bootstrap, group)
    session = described["consumer.session.timeout.ms"]
    assert (session.value, session.source, session.is_read_only) == (
        "50000",
        ConfigSource.GROUP_CONFIG.value,
        False,
    )
    assert described["share.auto.offset.reset"].value == "earliest"
    assert described["share.session.timeout.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    # another group is untouched
    other = _group_configs(broker.bootstrap, unique_group_id())
    assert other["consumer.session.timeout.ms"].value == "45000"

    _alter(
        broker.bootstrap,
        _group_resource(group, **{"consumer.session.timeout.ms": (AlterConfigOpType.DELETE, None)}),
    )
    session = _group_configs(broker.bootstrap, group)["consumer.session.timeout.ms"]
    assert (session.value, session.source) == ("45000", ConfigSource.DEFAULT_CONFIG.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("consumer.session.timeout.ms", "1000"),
        ("consumer.heartbeat.interval.ms", "99999"),
        ("share.record.lock.duration.ms", "soon"),
        ("share.auto.offset.reset", "middle"),
        ("no.such.group.config", "1"),
    ],
)
def test_bad_group_configs_are_invalid_config_and_change_nothing(broker, name, value):
    group = unique_group_id()
    resource = _group_resource(group, **{name: (AlterConfigOpType.SET, value)})
    admin = admin_client(broker.bootstrap)
    with pytest.raises(KafkaException) as raised:
        admin.incremental_alter_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)
    assert raised.value.args[0].code() == INVALID_CONFIG
    assert all(
        entry.source == ConfigSource.DEFAULT_CONFIG.value
        for entry in _group_configs(broker.bootstrap, group).values()
    )


def test_group_configs_with_raw_requests(broker):
    """Resource type 32 by number, validate_only, an empty group name, and synonyms."""
    group = unique_group_id()

    def alter(resource_name: str, value: str, *, validate_only: bool) -> int:
        request = incremental_v0.IncrementalAlterConfigsRequest(
            resources=(
                incremental_v0.AlterConfigsResource(
                    resource_type=GROUP_RESOURCE,
                    resource_name=resource_name,
                    configs=(
                        incremental_v0.AlterableConfig(
                            name="share.record.lock.duration.ms", config_operation=0, value=value
                        ),
                    ),
                ),
            ),
            validate_only=validate_only,
        )
        with KafkaConnection(broker.host, broker.port) as connection:
            (result,) = connection.request(request).responses
        return int(result.error_code)

    def describe(resource_name: str):
        request = describe_configs_v3.DescribeConfigsRequest(
            resources=(
                describe_configs_v3.DescribeConfigsResource(
                    resource_type=GROUP_RESOURCE,
                    resource_name=resource_name,
                    configuration_keys=("share.record.lock.duration.ms",),
                ),
            ),
            include_synonyms=True,
            include_documentation=True,
        )
        with KafkaConnection(broker.host, broker.port) as connection:
            (result,) = connection.request(request).results
        return result

    assert alter(group, "20000", validate_only=True) == NONE
    (entry,) = describe(group).configs
    assert (entry.value, int(entry.config_source)) == ("30000", DEFAULT_CONFIG_SOURCE)

    assert alter(group, "20000", validate_only=False) == NONE
    (entry,) = describe(group).configs
    assert (entry.value, int(entry.config_source)) == ("20000", GROUP_CONFIG_SOURCE)
    assert [(s.name, s.value, int(s.source)) for s in entry.synonyms] == [
        ("share.record.lock.duration.ms", "20000", GROUP_CONFIG_SOURCE),
        ("group.share.record.lock.duration.ms", "30000", DEFAULT_CONFIG_SOURCE),
    ]
    assert entry.documentation

    assert alter("", "20000", validate_only=False) == INVALID_REQUEST
    assert int(describe("").error_code) == INVALID_REQUEST


def test_group_configs_with_kafka_python(broker):
    group = unique_group_id()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15_000)
    try:
        resource = KafkaPythonConfigResource(
            ConfigResourceType.GROUP,
            group,
            configs={"share.heartbeat.interval.ms": (KafkaPythonAlterConfigOp.SET, "6000")},
        )
        admin.alter_configs([resource], incremental=True, raise_on_unknown=False)
        described = admin.describe_configs(
            [KafkaPythonConfigResource(ConfigResourceType.GROUP, group)], config_filter="all"
        )
    finally:
        admin.close()
    assert "6000" in repr(described), described
