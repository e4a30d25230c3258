"""``group.coordinator.rebalance.protocols``: what it takes, what it refuses and what a
broker with it advertises."""

from __future__ import annotations

import pytest

from sluice.common.config import BrokerConfig, BrokerConfigError
from sluice.group.config import GroupConfig
from sluice.protocol.versions import ADVERTISED, ApiKey, advertised

KIP_848 = {ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE}


def configured(value: str) -> tuple[str, ...]:
    config = BrokerConfig()
    config.apply_properties({"group.coordinator.rebalance.protocols": value})
    return config.group_coordinator_rebalance_protocols


def test_values_are_read_as_kafka_lists_them() -> None:
    assert configured("classic, Consumer") == ("classic", "consumer")
    assert configured("classic,share") == ("classic", "share")


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("consumer", "classic cannot be disabled"),
        ("", "classic cannot be disabled"),
        ("classic,consumer,streams", "streams groups (KIP-1071) are not served"),
        ("classic,eager", "eager: the protocols are classic, consumer, share"),
    ],
)
def test_values_sluice_cannot_serve_are_refused_saying_why(value: str, said: str) -> None:
    with pytest.raises(BrokerConfigError, match=r"group\.coordinator\.rebalance\.protocols") as e:
        configured(value)
    assert said in str(e.value)


def test_the_consumer_protocol_apis_are_advertised_only_when_enabled() -> None:
    assert set(advertised(("classic", "consumer"))) >= KIP_848
    assert not KIP_848 & set(advertised(("classic",)))
    assert set(advertised(("classic", "consumer"))) == set(ADVERTISED)


def test_the_consumer_protocol_is_enabled_by_default_as_in_kafka() -> None:
    assert BrokerConfig().group_coordinator_rebalance_protocols == ("classic", "consumer")


def test_consumer_group_members_heartbeat_at_kafkas_default_interval() -> None:
    """Kafka's defaults: members heartbeat every 5 s, sessions last 45 s (the integration
    tests' brokers shorten the interval)."""
    config = GroupConfig.from_properties({})
    assert (config.consumer_heartbeat_interval_ms, config.consumer_session_timeout_ms) == (
        5_000,
        45_000,
    )
