"""Topic and broker configs: the describe/alter logic as plain functions, then the
DescribeConfigs / AlterConfigs / IncrementalAlterConfigs handlers against a real topic
manager and embedded metadata store (no partitions are hosted), encoded in every served
version."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sluice.broker.authorization import Authorizer
from sluice.broker.context import RequestContext
from sluice.broker.dynamic_config import DynamicBrokerConfig
from sluice.broker.handlers.admin_configs import (
    AlterConfigOp,
    BrokerLevels,
    ConfigSource,
    ConfigType,
    describe_broker_configs,
    describe_group_configs,
    describe_topic_configs,
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
    incrementally_altered_broker_configs,
    incrementally_altered_group_configs,
    incrementally_altered_overrides,
    replaced_overrides,
)
from sluice.broker.network.server import ConnectionInfo
from sluice.broker.replication.metadata_applier import MetadataApplier
from sluice.broker.replication.purgatory import Purgatory
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.broker.topics import TopicManager
from sluice.cluster.embedded import EmbeddedMetadataStore
from sluice.cluster.model import BrokerInfo
from sluice.common import errors
from sluice.common.clock import SYSTEM_CLOCK
from sluice.common.config import (
    GROUP_CONFIG_KEYS,
    TOPIC_CONFIG_KEYS,
    BrokerConfig,
    BrokerConfigError,
    TopicConfig,
)
from sluice.common.dynamic_config import DYNAMIC_BROKER_CONFIGS
from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.protocol import codec
from sluice.protocol.messages import make, request_module
from sluice.protocol.versions import SUPPORTED, ApiKey

TOPIC, BROKER = 2, 4


# ── describing ─────────────────────────────────────────────────────────────────────────


def by_name(described: list[Any]) -> dict[str, Any]:
    return {entry.name: entry for entry in described}


def test_topic_configs_list_every_key_with_override_then_broker_then_built_in() -> None:
    config = BrokerConfig()
    config.apply_properties({"log.retention.ms": "5000"})
    described = by_name(describe_topic_configs({"segment.bytes": "1000"}, config))

    assert set(described) == set(TOPIC_CONFIG_KEYS)
    segment = described["segment.bytes"]
    assert (segment.value, segment.source) == ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert [(s.name, s.source) for s in segment.synonyms] == [
        ("segment.bytes", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.segment.bytes", ConfigSource.DEFAULT_CONFIG),
    ]
    retention = described["retention.ms"]
    assert (retention.value, retention.source) == ("5000", ConfigSource.STATIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("log.retention.ms", "5000", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG),
    ]
    policy = described["cleanup.policy"]
    assert (policy.value, policy.source) == ("delete", ConfigSource.DEFAULT_CONFIG)
    assert not any(entry.read_only or entry.sensitive for entry in described.values())
    assert all(entry.documentation for entry in described.values())


def test_sluice_own_topic_defaults_count_as_defaults() -> None:
    flush = by_name(describe_topic_configs({}, BrokerConfig()))["flush.ms"]
    assert flush.source == ConfigSource.DEFAULT_CONFIG
    assert flush.value == BrokerConfig().topic_defaults.get("flush.ms", "9223372036854775807")


def test_config_types_follow_the_values() -> None:
    described = by_name(describe_topic_configs({}, BrokerConfig()))
    assert described["cleanup.policy"].config_type == ConfigType.LIST
    assert described["retention.ms"].config_type == ConfigType.LONG
    assert described["segment.bytes"].config_type == ConfigType.INT
    assert described["unclean.leader.election.enable"].config_type == ConfigType.BOOLEAN
    assert described["message.timestamp.type"].config_type == ConfigType.STRING


def test_only_the_requested_keys_are_described() -> None:
    described = describe_topic_configs({}, BrokerConfig(), ["retention.ms", "no.such.key"])
    assert [entry.name for entry in described] == ["retention.ms"]


def test_broker_configs_are_read_only_unless_dynamic_and_marked_when_set() -> None:
    config = BrokerConfig()
    config.apply_properties({"num.partitions": "3", "log.retention.ms": "5000"})
    described = by_name(describe_broker_configs(config))

    writable = {name for name, entry in described.items() if not entry.read_only}
    assert writable == DYNAMIC_BROKER_CONFIGS
    for name, value, source in [
        ("num.partitions", "3", ConfigSource.STATIC_BROKER_CONFIG),
        ("default.replication.factor", "1", ConfigSource.DEFAULT_CONFIG),
        ("auto.create.topics.enable", "true", ConfigSource.DEFAULT_CONFIG),
        ("broker.id", "0", ConfigSource.DEFAULT_CONFIG),
        ("log.retention.ms", "5000", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG),
    ]:
        assert (described[name].value, described[name].source) == (value, source), name
    assert described["auto.create.topics.enable"].config_type == ConfigType.BOOLEAN


# ── altering ───────────────────────────────────────────────────────────────────────────


def test_replaced_overrides_are_exactly_the_entries_checked() -> None:
    assert replaced_overrides([("retention.ms", "10"), ("cleanup.policy", "delete,compact")]) == {
        "retention.ms": "10",
        "cleanup.policy": "delete,compact",
    }
    assert replaced_overrides([]) == {}
    with pytest.raises(errors.InvalidConfig):
        replaced_overrides([("retention.ms", "soon")])
    with pytest.raises(errors.InvalidConfig):
        replaced_overrides([("no.such.key", "1")])
    with pytest.raises(errors.InvalidRequest):
        replaced_overrides([("retention.ms", "1"), ("retention.ms", "2")])


def alter(overrides: dict[str, str], *changes: tuple[str, int, str | None]) -> dict[str, str]:
    return incrementally_altered_overrides(overrides, BrokerConfig(), list(changes))


def test_incremental_set_and_delete_touch_only_their_keys() -> None:
    current = {"retention.ms": "10", "segment.bytes": "2000"}
    assert alter(current, ("retention.ms", AlterConfigOp.SET, "20")) == {
        "retention.ms": "20",
        "segment.bytes": "2000",
    }
    assert alter(current, ("retention.ms", AlterConfigOp.DELETE, None)) == {"segment.bytes": "2000"}
    assert alter(current, ("retention.bytes", AlterConfigOp.DELETE, None)) == current


def test_incremental_append_and_subtract_work_on_list_keys_from_the_effective_value() -> None:
    appended = alter({}, ("cleanup.policy", AlterConfigOp.APPEND, "compact"))
    assert appended == {"cleanup.policy": "delete,compact"}  # appended at the end
    assert alter(appended, ("cleanup.policy", AlterConfigOp.APPEND, "delete")) == appended
    assert alter(appended, ("cleanup.policy", AlterConfigOp.SUBTRACT, "delete")) == {
        "cleanup.policy": "compact"
    }
    # Kafka 4.2+ allows an empty cleanup.policy: keep everything, compact nothing.
    assert alter({}, ("cleanup.policy", AlterConfigOp.SUBTRACT, "delete")) == {"cleanup.policy": ""}
    assert alter({"cleanup.policy": ""}, ("cleanup.policy", AlterConfigOp.APPEND, "compact")) == {
        "cleanup.policy": "compact"
    }


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (("retention.ms", AlterConfigOp.APPEND, "5"), errors.InvalidConfig),
        (("retention.ms", AlterConfigOp.SUBTRACT, "5"), errors.InvalidConfig),
        (("retention.ms", AlterConfigOp.SET, None), errors.InvalidConfig),
        (("retention.ms", AlterConfigOp.SET, "-7"), errors.InvalidConfig),
        (("no.such.key", AlterConfigOp.DELETE, None), errors.InvalidConfig),
        (("retention.ms", 9, "5"), errors.InvalidRequest),
    ],
)
def test_incremental_refusals(change: tuple[str, int, str | None], error: type[Exception]) -> None:
    with pytest.raises(error):
        alter({}, change)


# ── handlers ───────────────────────────────────────────────────────────────────────────


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Any]:
    """The parts the config handlers use, real and running on one event loop: an
    embedded metadata store with broker 0, the metadata applier, and the topic
    ``orders``."""
    config = BrokerConfig(data_dir=tmp_path)
    config.apply_properties({"log.retention.ms": "5000"})
    runner = asyncio.Runner()

    async def start() -> SimpleNamespace:
        store = EmbeddedMetadataStore(tmp_path)
        await store.register_broker(BrokerInfo(0, "127.0.0.1", 9092))
        replicas = ReplicaManager(0, tmp_path, SYSTEM_CLOCK, Purgatory(), config.topic_defaults)
        dynamic = DynamicBrokerConfig(config, [])
        applier = MetadataApplier(
            0, store.image(), replicas, lambda error: None, on_broker_configs=dynamic.apply
        )
        await applier.apply_first(store.image(), recover=False)
        store.subscribe(applier.offer)
        applying = asyncio.create_task(applier.run())
        topics = TopicManager(store, replicas, applier, config)
        creation = topics.begin_create("orders", 1, 1, {"segment.bytes": "100000"})
        assert creation is not None
        await creation
        return SimpleNamespace(
            config=config,
            topics=topics,
            store=store,
            replicas=replicas,
            applying=applying,
            authorizer=Authorizer(config, store),
            static_config=dynamic.static,
        )

    namespace = runner.run(start())
    namespace.runner = runner
    yield namespace
    namespace.applying.cancel()
    namespace.replicas.close_all()
    runner.close()


def call(handler: Any, services: Any, api_key: ApiKey, version: int, request: Any) -> Any:
    context = RequestContext(
        codec.RequestHeader(api_key, version, 7, "test"), ConnectionInfo("test")
    )
    response = services.runner.run(handler(services, context, request))
    codec.encode_response(7, response)  # every field has the right wire type
    return response


def versions(api_key: ApiKey) -> list[int]:
    served = SUPPORTED[api_key]
    return list(range(served.min_version, served.max_version + 1))


def describe_request(version: int, *resources: tuple[int, str, Any]) -> Any:
    module = request_module(ApiKey.DESCRIBE_CONFIGS, version)
    return make(
        module.DescribeConfigsRequest,
        resources=tuple(
            make(
                module.DescribeConfigsResource,
                resource_type=kind,
                resource_name=name,
                configuration_keys=keys,
            )
            for kind, name, keys in resources
        ),
        include_synonyms=True,
        include_documentation=True,
    )


@pytest.mark.parametrize("version", versions(ApiKey.DESCRIBE_CONFIGS))
def test_describe_configs_answers_each_resource(services: Any, version: int) -> None:
    request = describe_request(
        version,
        (TOPIC, "orders", None),
        (TOPIC, "missing", None),
        (BROKER, "0", ("num.partitions",)),
        (BROKER, "5", None),
        (3, "anything", None),
    )
    response = call(handle_describe_configs, services, ApiKey.DESCRIBE_CONFIGS, version, request)
    orders, missing, broker_0, broker_5, unknown_type = response.results

    assert orders.error_code == ErrorCode.none
    entries = {entry.name: entry for entry in orders.configs}
    assert set(entries) == set(TOPIC_CONFIG_KEYS)
    assert (entries["segment.bytes"].value, entries["segment.bytes"].config_source) == (
        "100000",
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
    )
    assert entries["retention.ms"].config_source == ConfigSource.STATIC_BROKER_CONFIG
    assert len(entries["retention.ms"].synonyms) == 2
    if version >= 3:
        assert entries["retention.ms"].config_type == ConfigType.LONG
        assert entries["retention.ms"].documentation

    assert missing.error_code == ErrorCode.unknown_topic_or_partition
    assert "missing" in (missing.error_message or "")
    assert [(e.name, e.value, e.read_only) for e in broker_0.configs] == [
        ("num.partitions", "1", True)
    ]
    assert broker_5.error_code == ErrorCode.invalid_request
    assert unknown_type.error_code == ErrorCode.invalid_request


def alter_request(version: int, validate_only: bool, *resources: tuple[int, str, Any]) -> Any:
    module = request_module(ApiKey.ALTER_CONFIGS, version)
    return make(
        module.AlterConfigsRequest,
        resources=tuple(
            make(
                module.AlterConfigsResource,
                resource_type=kind,
                resource_name=name,
                configs=tuple(
                    make(module.AlterableConfig, name=key, value=value)
                    for key, value in entries.items()
                ),
            )
            for kind, name, entries in resources
        ),
        validate_only=validate_only,
    )


@pytest.mark.parametrize("version", versions(ApiKey.ALTER_CONFIGS))
def test_alter_configs_replaces_the_override_set(services: Any, version: int) -> None:
    request = alter_request(
        version,
        False,
        (TOPIC, "orders", {"max.message.bytes": "5000"}),
        (TOPIC, "missing", {}),
        (BROKER, "0", {"num.partitions": "3"}),
    )
    response = call(handle_alter_configs, services, ApiKey.ALTER_CONFIGS, version, request)
    orders, missing, broker_0 = response.responses

    assert orders.error_code == ErrorCode.none
    assert services.topics.require("orders").configs == {"max.message.bytes": "5000"}
    assert missing.error_code == ErrorCode.unknown_topic_or_partition
    assert broker_0.error_code == ErrorCode.invalid_request
    assert broker_0.error_message == "Cannot update these configs dynamically: Set(num.partitions)"


def test_alter_configs_validate_only_and_bad_values_change_nothing(services: Any) -> None:
    before = services.topics.require("orders").configs
    for validate_only, entries in [(True, {"retention.ms": "1"}), (False, {"retention.ms": "x"})]:
        request = alter_request(1, validate_only, (TOPIC, "orders", entries))
        response = call(handle_alter_configs, services, ApiKey.ALTER_CONFIGS, 1, request)
        expected = ErrorCode.none if validate_only else ErrorCode.invalid_config
        assert response.responses[0].error_code == expected
        assert services.topics.require("orders").configs == before


def incremental_request(
    validate_only: bool,
    name: str,
    *changes: tuple[str, int, str | None],
    resource_type: int = TOPIC,
) -> Any:
    module = request_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0)
    return make(
        module.IncrementalAlterConfigsRequest,
        resources=(
            make(
                module.AlterConfigsResource,
                resource_type=resource_type,
                resource_name=name,
                configs=tuple(
                    make(module.AlterableConfig, name=key, config_operation=op, value=value)
                    for key, op, value in changes
                ),
            ),
        ),
        validate_only=validate_only,
    )


def test_incremental_alter_configs_changes_single_keys(services: Any) -> None:
    request = incremental_request(
        False,
        "orders",
        ("retention.ms", AlterConfigOp.SET, "777"),
        ("segment.bytes", AlterConfigOp.DELETE, None),
        ("cleanup.policy", AlterConfigOp.APPEND, "compact"),
    )
    response = call(
        handle_incremental_alter_configs, services, ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, request
    )
    assert response.responses[0].error_code == ErrorCode.none
    assert services.topics.require("orders").configs == {
        "retention.ms": "777",
        "cleanup.policy": "delete,compact",
    }

    refused = incremental_request(False, "orders", ("retention.ms", AlterConfigOp.APPEND, "1"))
    response = call(
        handle_incremental_alter_configs, services, ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, refused
    )
    assert response.responses[0].error_code == ErrorCode.invalid_config
    assert services.topics.require("orders").configs["retention.ms"] == "777"


# ── cleanup.policy as a list, group configs ─────────────────────────────────────────────


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("delete,compact", "delete,compact"),
        ("compact,delete", "compact,delete"),
        (" compact , delete ", "compact,delete"),
        ("", ""),
    ],
)
def test_cleanup_policy_keeps_the_order_given(given: str, stored: str) -> None:
    assert replaced_overrides([("cleanup.policy", given)]) == {"cleanup.policy": stored}


@pytest.mark.parametrize("bad", ["delete,delete", "delete,,compact", "Compact", "none"])
def test_cleanup_policy_refuses_what_kafka_refuses(bad: str) -> None:
    with pytest.raises(errors.InvalidConfig):
        replaced_overrides([("cleanup.policy", bad)])


@pytest.mark.parametrize(
    ("policy", "compact", "delete"),
    [("delete", False, True), ("compact,delete", True, True), ("", False, False)],
)
def test_topic_config_reads_the_policy_list(policy: str, compact: bool, delete: bool) -> None:
    config = TopicConfig.from_entries({"cleanup.policy": policy})
    assert (config.compact, config.delete) == (compact, delete)


def test_group_configs_describe_defaults_then_overrides() -> None:
    described = by_name(describe_group_configs({"consumer.session.timeout.ms": "50000"}))
    assert set(described) == set(GROUP_CONFIG_KEYS)
    session = described["consumer.session.timeout.ms"]
    assert (session.value, session.source, session.read_only) == (
        "50000",
        ConfigSource.GROUP_CONFIG,
        False,
    )
    assert [(s.name, s.source) for s in session.synonyms] == [
        ("consumer.session.timeout.ms", ConfigSource.GROUP_CONFIG),
        ("group.consumer.session.timeout.ms", ConfigSource.DEFAULT_CONFIG),
    ]
    reset = described["share.auto.offset.reset"]
    assert (reset.value, reset.source, reset.config_type) == (
        "latest",
        ConfigSource.DEFAULT_CONFIG,
        ConfigType.STRING,
    )


@pytest.mark.parametrize(
    "change",
    [
        ("consumer.session.timeout.ms", AlterConfigOp.SET, "1000"),  # below 45000
        ("share.record.lock.duration.ms", AlterConfigOp.SET, "soon"),
        ("share.auto.offset.reset", AlterConfigOp.SET, "middle"),
        ("no.such.group.config", AlterConfigOp.SET, "1"),
        ("consumer.session.timeout.ms", AlterConfigOp.APPEND, "50000"),
    ],
)
def test_bad_group_config_changes_are_invalid_config(change: tuple[str, int, str]) -> None:
    with pytest.raises(errors.InvalidConfig):
        incrementally_altered_group_configs({}, [change])


def test_group_config_changes_keep_the_other_overrides() -> None:
    current = {"share.session.timeout.ms": "50000"}
    assert incrementally_altered_group_configs(
        current, [("share.heartbeat.interval.ms", AlterConfigOp.SET, "15000")]
    ) == {"share.session.timeout.ms": "50000", "share.heartbeat.interval.ms": "15000"}
    assert (
        incrementally_altered_group_configs(
            current, [("share.session.timeout.ms", AlterConfigOp.DELETE, None)]
        )
        == {}
    )


# ── dynamic broker configs ───────────────────────────────────────────────────────────────


def test_a_dynamic_broker_value_wins_in_kafkas_order_and_lists_every_level() -> None:
    static = BrokerConfig()
    static.apply_properties({"log.retention.ms": "5000"})
    levels = BrokerLevels(
        static,
        cluster_default={"log.retention.ms": "7000", "message.max.bytes": "3000"},
        per_broker={"log.retention.ms": "9000"},
    )
    retention = by_name(describe_broker_configs(levels))["log.retention.ms"]
    assert (retention.value, retention.source, retention.read_only) == (
        "9000",
        ConfigSource.DYNAMIC_BROKER_CONFIG,
        False,
    )
    assert [(s.value, s.source) for s in retention.synonyms] == [
        ("9000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("7000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("5000", ConfigSource.STATIC_BROKER_CONFIG),
        ("604800000", ConfigSource.DEFAULT_CONFIG),
    ]
    # A topic without an override: its value and source are the broker's dynamic one,
    # listed under the broker's name.
    topic = by_name(describe_topic_configs({}, levels))
    assert (topic["max.message.bytes"].value, topic["max.message.bytes"].source) == (
        "3000",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    assert [(s.name, s.source) for s in topic["max.message.bytes"].synonyms] == [
        ("message.max.bytes", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("message.max.bytes", ConfigSource.DEFAULT_CONFIG),
    ]
    overridden = by_name(describe_topic_configs({"retention.ms": "1"}, levels))["retention.ms"]
    assert [s.source for s in overridden.synonyms] == [
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
        ConfigSource.DYNAMIC_BROKER_CONFIG,
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
        ConfigSource.STATIC_BROKER_CONFIG,
        ConfigSource.DEFAULT_CONFIG,
    ]


def test_incremental_broker_changes_apply_each_operation_then_check_the_level() -> None:
    effective = BrokerConfig()
    altered = incrementally_altered_broker_configs(
        {"log.retention.ms": "1000", "message.max.bytes": "2000"},
        effective,
        [
            ("log.retention.ms", AlterConfigOp.DELETE, None),
            ("min.insync.replicas", AlterConfigOp.SET, "2"),
            ("log.cleanup.policy", AlterConfigOp.APPEND, "compact"),
            ("unclean.leader.election.enable", AlterConfigOp.SET, "TRUE"),
        ],
    )
    assert altered == {
        "message.max.bytes": "2000",
        "min.insync.replicas": "2",
        "log.cleanup.policy": "delete,compact",
        "unclean.leader.election.enable": "true",
    }
    # DELETE of a setting the level does not hold (even a static one) changes nothing.
    assert (
        incrementally_altered_broker_configs(
            {}, effective, [("num.partitions", AlterConfigOp.DELETE, None)]
        )
        == {}
    )


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (
            ("num.partitions", AlterConfigOp.SET, "3"),
            errors.InvalidRequest,
            "Cannot update these configs dynamically: Set(num.partitions)",
        ),
        (
            ("message.max.bytes", AlterConfigOp.SET, "lots"),
            errors.InvalidRequest,
            "Invalid value lots for configuration message.max.bytes: 'lots' is not an integer",
        ),
        (
            ("log.retention.ms", AlterConfigOp.SET, None),
            errors.InvalidRequest,
            "Null value not supported for : log.retention.ms",
        ),
        (
            ("log.retention.ms", AlterConfigOp.APPEND, "1"),
            errors.InvalidConfig,
            "Config value append is not allowed for config key: log.retention.ms",
        ),
    ],
)
def test_broker_changes_kafka_refuses(
    change: tuple[str, int, str | None], error: type[errors.KafkaError], message: str
) -> None:
    with pytest.raises(error) as refused:
        incrementally_altered_broker_configs({}, BrokerConfig(), [change])
    assert refused.value.message == message


def test_broker_levels_change_through_both_alter_apis_and_apply_here(services: Any) -> None:
    # validate_only checks and stores nothing.
    checked = incremental_request(
        True, "0", ("message.max.bytes", AlterConfigOp.SET, "2000"), resource_type=BROKER
    )
    response = call(
        handle_incremental_alter_configs, services, ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, checked
    )
    assert response.responses[0].error_code == ErrorCode.none
    assert dict(services.store.image().broker_configs) == {}

    request = incremental_request(
        False, "0", ("message.max.bytes", AlterConfigOp.SET, "2000"), resource_type=BROKER
    )
    response = call(
        handle_incremental_alter_configs, services, ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, request
    )
    assert response.responses[0].error_code == ErrorCode.none
    # Answered once applied here: the live config and the hosted topic follow at once.
    assert services.config.topic_defaults["max.message.bytes"] == "2000"
    orders = services.replicas.find(TopicPartition("orders", 0))
    assert orders.log.config.max_message_bytes == 2000

    # The legacy API replaces the cluster-wide level's whole set.
    for entries in (
        {"log.retention.ms": "60000", "min.insync.replicas": "2"},
        {"log.retention.ms": "70000"},
    ):
        legacy = alter_request(1, False, (BROKER, "", entries))
        response = call(handle_alter_configs, services, ApiKey.ALTER_CONFIGS, 1, legacy)
        assert response.responses[0].error_code == ErrorCode.none
    assert {k: dict(v) for k, v in services.store.image().broker_configs.items()} == {
        "": {"log.retention.ms": "70000"},
        "0": {"message.max.bytes": "2000"},
    }
    assert orders.log.config.retention_ms == 70000
    assert orders.log.config.min_insync_replicas == 1
    # The static value is kept apart: describing shows every level.
    described = call(
        handle_describe_configs,
        services,
        ApiKey.DESCRIBE_CONFIGS,
        3,
        describe_request(3, (BROKER, "0", ("log.retention.ms",)), (BROKER, "", None)),
    )
    own, cluster = described.results
    [retention] = own.configs
    assert [(s.value, s.source) for s in retention.synonyms] == [
        ("70000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("5000", ConfigSource.STATIC_BROKER_CONFIG),
        ("604800000", ConfigSource.DEFAULT_CONFIG),
    ]
    assert [(e.name, e.value, e.config_source) for e in cluster.configs] == [
        ("log.retention.ms", "70000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    ]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("1", "Unexpected broker id, expected 0, but received 1"),
        ("zero", "Node id must be an integer, but it is: zero"),
    ],
)
def test_another_brokers_level_is_refused_here(services: Any, name: str, message: str) -> None:
    request = alter_request(1, False, (BROKER, name, {"log.retention.ms": "1"}))
    response = call(handle_alter_configs, services, ApiKey.ALTER_CONFIGS, 1, request)
    assert (response.responses[0].error_code, response.responses[0].error_message) == (
        ErrorCode.invalid_request,
        message,
    )
    assert dict(services.store.image().broker_configs) == {}


def test_share_group_configs_are_bounded_by_the_broker_settings() -> None:
    """KIP-1240: a group's lock duration, delivery count limit and record locks lie
    within the broker's group.share.min/max.* settings (Kafka 4.3's defaults without)."""
    lock = ("share.record.lock.duration.ms", AlterConfigOp.SET, "5000")
    with pytest.raises(errors.InvalidConfig, match="15000 to 60000"):
        incrementally_altered_group_configs({}, [lock])
    config = BrokerConfig()
    config.apply_properties({"group.share.min.record.lock.duration.ms": "1000"})
    assert incrementally_altered_group_configs({}, [lock], config) == {
        "share.record.lock.duration.ms": "5000"
    }
    locks = ("share.partition.max.record.locks", AlterConfigOp.SET, "4001")
    with pytest.raises(errors.InvalidConfig, match="100 to 4000"):
        incrementally_altered_group_configs({}, [locks])
    config.apply_properties({"group.share.max.partition.max.record.locks": "10000"})
    assert incrementally_altered_group_configs({}, [locks], config) == {
        "share.partition.max.record.locks": "4001"
    }
    limit = ("share.delivery.count.limit", AlterConfigOp.SET, "11")
    with pytest.raises(errors.InvalidConfig, match="2 to 10"):
        incrementally_altered_group_configs({}, [limit], config)


def test_share_group_defaults_are_kafkas_and_described_as_the_broker_has_them() -> None:
    config = BrokerConfig()
    assert (
        config.share_partition_max_record_locks,
        config.share_record_lock_duration_ms,
        config.share_delivery_count_limit,
    ) == (2_000, 30_000, 5)
    config.apply_properties({"group.share.partition.max.record.locks": "3000"})
    described = by_name(describe_group_configs({}, None, config))
    locks = described["share.partition.max.record.locks"]
    assert (locks.value, locks.source) == ("3000", ConfigSource.DEFAULT_CONFIG)
    assert [s.name for s in locks.synonyms] == ["group.share.partition.max.record.locks"]


@pytest.mark.parametrize(
    "settings",
    [
        {"group.share.record.lock.duration.ms": "5000"},  # below the minimum, 15000
        {"group.share.partition.max.record.locks": "5000"},  # above the maximum, 4000
        {"group.share.delivery.count.limit": "2", "group.share.min.delivery.count.limit": "3"},
    ],
)
def test_a_share_group_default_outside_its_broker_bounds_is_refused(
    settings: dict[str, str],
) -> None:
    config = BrokerConfig()
    config.apply_properties(settings)
    with pytest.raises(BrokerConfigError, match="outside"):
        config.check_share_group_bounds()
