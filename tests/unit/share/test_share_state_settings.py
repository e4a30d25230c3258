"""The broker settings of ``__share_group_state``: Kafka's share.coordinator.state.topic.*
names and defaults, checked as the transaction.state.log.* ones are."""

from __future__ import annotations

import pytest

from sluice.common.config import BrokerConfig, BrokerConfigError


def test_defaults_are_kafkas_and_the_settings_apply() -> None:
    config = BrokerConfig()
    assert (
        config.share_coordinator_state_topic_num_partitions,
        config.share_coordinator_state_topic_replication_factor,
        config.share_coordinator_state_topic_min_isr,
        config.share_coordinator_state_topic_segment_bytes,
    ) == (50, 3, 2, 104_857_600)
    config.apply_properties(
        {
            "share.coordinator.state.topic.num.partitions": "7",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "share.coordinator.state.topic.segment.bytes": "1048576",
        }
    )
    assert (
        config.share_coordinator_state_topic_num_partitions,
        config.share_coordinator_state_topic_replication_factor,
        config.share_coordinator_state_topic_min_isr,
        config.share_coordinator_state_topic_segment_bytes,
    ) == (7, 1, 1, 1_048_576)


@pytest.mark.parametrize(
    "setting",
    [
        {"share.coordinator.state.topic.num.partitions": "0"},
        {"share.coordinator.state.topic.replication.factor": "33"},
        {"share.coordinator.state.topic.min.isr": "none"},
    ],
)
def test_values_out_of_range_are_refused(setting: dict[str, str]) -> None:
    with pytest.raises(BrokerConfigError):
        BrokerConfig().apply_properties(setting)
