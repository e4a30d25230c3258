"""The settings of consumer groups (KIP-848) as Kafka reads them: the broker's
``group.consumer.assignors`` (built-in names, or Kafka's class names of them; the first
is the default; an unknown one refused at start-up), and a group's
``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms`` overrides, bounded
by the broker's settings, replacing the broker's for its members."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from consumer_helpers import beat, join, topic
from group_helpers import Harness

from sluice.common import errors
from sluice.common.config import BrokerConfig, parse_group_configs
from sluice.common.errors import ErrorCode
from sluice.group.config import GroupConfig
from sluice.group.consumer_heartbeat_api import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from sluice.group.migration import MigrationPolicy

TOPICS = {"a": topic("a", 2)}
OVERRIDES = {"consumer.session.timeout.ms": "50000", "consumer.heartbeat.interval.ms": "7000"}


def test_assignors_are_read_from_the_broker_properties() -> None:
    assert GroupConfig().consumer_assignors == ("uniform", "range"), "Kafka's default"
    config = GroupConfig.from_properties({"group.consumer.assignors": " range ,uniform"})
    assert config.consumer_assignors == ("range", "uniform")
    kafka_classes = GroupConfig.from_properties(
        {"group.consumer.assignors": "org.apache.kafka.coordinator.group.assignor.RangeAssignor"}
    )
    assert kafka_classes.consumer_assignors == ("range",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sticky", r"group\.consumer\.assignors: unknown assignor 'sticky'.*uniform, range"),
        ("com.example.MyAssignor", r"unknown assignor 'com\.example\.MyAssignor'"),
        ("", r"at least one assignor"),
        ("range,range", r"twice"),
    ],
)
def test_a_bad_assignor_list_is_refused_naming_the_setting(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GroupConfig.from_properties({"group.consumer.assignors": text})


def test_a_broker_property_file_accepts_the_assignor_list() -> None:
    config = BrokerConfig()
    config.apply_properties({"group.consumer.assignors": "range,uniform"})
    assert config.group_properties["group.consumer.assignors"] == "range,uniform"


def test_a_broker_property_file_accepts_the_migration_policy_by_name() -> None:
    config = BrokerConfig()
    config.apply_properties({"group.consumer.migration.policy": "upgrade"})
    assert config.group_properties["group.consumer.migration.policy"] == "upgrade"
    group = GroupConfig.from_properties(config.group_properties)
    assert group.consumer_migration_policy is MigrationPolicy.UPGRADE


def heartbeat(harness: Harness, request: ConsumerGroupHeartbeatRequest) -> Any:
    token = harness.token()
    harness.apply(
        harness.coordinator.consumer_group_heartbeat(harness.now_ms, token, request, TOPICS)
    )
    answer = harness.reply(token)
    assert isinstance(answer, ConsumerGroupHeartbeatResponse), answer
    return answer


def test_the_first_configured_assignor_is_the_default_and_the_others_are_refused() -> None:
    harness = Harness(GroupConfig(initial_rebalance_delay_ms=0, consumer_assignors=("range",)))
    refused = heartbeat(harness, join("m1", assignor="uniform"))
    assert refused.error is ErrorCode.unsupported_assignor
    assert heartbeat(harness, join("m1")).error is ErrorCode.none
    (description,) = harness.coordinator.describe_consumer_groups(["g"])
    assert description.assignor_name == "range"


def test_a_groups_overrides_set_its_members_interval_and_session() -> None:
    harness = Harness()
    joined = heartbeat(harness, dataclasses.replace(join("m1"), group_configs=OVERRIDES))
    assert joined.heartbeat_interval_ms == 7_000
    harness.advance(45_000 + 1)
    group = harness.coordinator.consumer_group("g")
    assert group is not None and "m1" in group.members, "the group's 50 s session, not 45 s"
    harness.advance(5_000)
    group = harness.coordinator.consumer_group("g")
    assert group is not None and not group.members, "removed when its session ended"


def test_without_overrides_the_broker_settings_apply() -> None:
    harness = Harness()
    assert heartbeat(harness, join("m1")).heartbeat_interval_ms == 5_000
    answer = heartbeat(harness, dataclasses.replace(beat("m1", 1), group_configs=OVERRIDES))
    assert answer.heartbeat_interval_ms == 7_000, "an override set later applies at once"


def test_group_overrides_are_bounded_by_the_brokers_settings() -> None:
    with pytest.raises(errors.InvalidConfig, match="45000 to 60000"):
        parse_group_configs({"consumer.session.timeout.ms": "1000"})
    broker = BrokerConfig()
    broker.apply_properties(
        {
            "group.consumer.min.session.timeout.ms": "500",
            "group.consumer.min.heartbeat.interval.ms": "50",
        }
    )
    checked = {"consumer.session.timeout.ms": "1000", "consumer.heartbeat.interval.ms": "100"}
    assert parse_group_configs(checked, broker) == checked
    broker.apply_properties({"group.consumer.session.timeout.ms": "1000"})
    with pytest.raises(errors.InvalidConfig, match="greater than"):
        # the broker's session timeout, as the group does not set one
        parse_group_configs({"consumer.heartbeat.interval.ms": "1000"}, broker)
