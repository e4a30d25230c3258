"""The Schema Registry's broker settings: defaults, what they take, what they refuse
(one message naming the setting), and how DescribeConfigs shows them."""

from __future__ import annotations

import pytest

from sluice.broker.registry.access import need_of, topic_of_subject
from sluice.common.authorizer import Operation, ResourceType
from sluice.common.config import BrokerConfig, BrokerConfigError, HttpEndpoint


def configured(settings: dict[str, str]) -> BrokerConfig:
    config = BrokerConfig()
    config.apply_properties(settings)
    return config


def test_defaults_are_confluent_s() -> None:
    config = BrokerConfig()
    assert config.schema_registry_listeners == (HttpEndpoint("127.0.0.1", 8081),)
    assert config.schema_registry_topic == "_schemas"
    assert config.schema_registry_topic_replication_factor == 3
    assert config.schema_compatibility_level == "BACKWARD"
    assert config.schema_registry_schema_max_bytes == 1_048_576


def test_values_taken() -> None:
    config = configured(
        {
            "schema.registry.listeners": "http://0.0.0.0:8081, http://[::1]:0,http://:8082",
            "schema.registry.topic": "schemas-of-prod",
            "schema.registry.topic.replication.factor": "1",
            "schema.compatibility.level": "full_transitive",
            "schema.registry.schema.max.bytes": "1048576",
        }
    )
    assert config.schema_registry_listeners == (
        HttpEndpoint("0.0.0.0", 8081),
        HttpEndpoint("::1", 0),
        HttpEndpoint("", 8082),
    )
    assert [str(e) for e in config.schema_registry_listeners][1] == "http://[::1]:0"
    assert config.schema_registry_topic == "schemas-of-prod"
    assert config.schema_compatibility_level == "FULL_TRANSITIVE"
    assert configured({"schema.registry.listeners": ""}).schema_registry_listeners == ()


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("schema.registry.listeners", "https://127.0.0.1:8081", "HTTPS is not served"),
        ("schema.registry.listeners", "127.0.0.1:8081", "is not http://host:port"),
        ("schema.registry.listeners", "http://127.0.0.1:70000", "outside [0, 65535]"),
        ("schema.registry.listeners", "http://a:8081,http://b:8081", "a port of its own"),
        ("schema.registry.topic", "", "topic name is empty"),
        ("schema.registry.topic.replication.factor", "0", "outside [1, 32]"),
        ("schema.compatibility.level", "SIDEWAYS", "is not one of NONE, BACKWARD"),
        ("schema.registry.schema.max.bytes", "2000000", "outside [1024, 1048576]"),
    ],
)
def test_bad_values_are_refused_naming_the_setting(name: str, value: str, said: str) -> None:
    with pytest.raises(BrokerConfigError) as refused:
        configured({name: value})
    assert str(refused.value).startswith(f"{name}: ")
    assert said in str(refused.value)


def test_subjects_map_to_kafka_resources() -> None:
    assert topic_of_subject("orders-value") == "orders"
    assert topic_of_subject("orders-key") == "orders"
    assert topic_of_subject("a-b-value") == "a-b"
    assert topic_of_subject("-value") is None
    assert topic_of_subject("com.acme.Order") is None
    read = need_of("orders-value", write=False)
    assert read is not None
    assert (read.operation, read.resource_type, read.name) == (
        Operation.READ,
        ResourceType.TOPIC,
        "orders",
    )
    write = need_of("orders-key", write=True)
    assert write is not None and write.operation is Operation.WRITE
    other = need_of("com.acme.Order", write=False)
    assert other is not None and other.resource_type is ResourceType.CLUSTER
    assert other.operation is Operation.DESCRIBE
    assert need_of(None, write=False) is None
    global_change = need_of(None, write=True)
    assert global_change is not None
    assert (global_change.operation, global_change.resource_type) == (
        Operation.ALTER,
        ResourceType.CLUSTER,
    )
