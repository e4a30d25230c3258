"""The settings of the input limits (and of the failed-authentication delay), and how
requests are counted against sluice.request.max.partitions."""

from __future__ import annotations

import pytest
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v8.request import MetadataRequest, MetadataRequestTopic
from kio.static.primitive import i32, i64

from sluice.broker.request_limits import check_named_partitions, named_partitions
from sluice.common.config import BrokerConfig, BrokerConfigError
from sluice.common.errors import ProtocolError


def _list_offsets(topics: int, partitions: int) -> ListOffsetsRequest:
    return ListOffsetsRequest(
        replica_id=i32(-1),
        isolation_level=0,
        topics=tuple(
            ListOffsetsTopic(
                name=f"t{t}",
                partitions=tuple(
                    ListOffsetsPartition(
                        partition_index=i32(p), current_leader_epoch=i32(-1), timestamp=i64(-1)
                    )
                    for p in range(partitions)
                ),
            )
            for t in range(topics)
        ),
    )


def test_topics_and_partitions_are_counted_at_every_depth() -> None:
    assert named_partitions(_list_offsets(3, 4), 1000) == 3 + 12
    metadata = MetadataRequest(
        topics=tuple(MetadataRequestTopic(name=f"t{i}") for i in range(7)),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    assert named_partitions(metadata, 1000) == 7
    # Counting stops soon after the limit: a huge request is not walked whole.
    assert named_partitions(_list_offsets(50, 100), 10) <= 10 + 100 + 50
    check_named_partitions(_list_offsets(2, 4), 10)
    with pytest.raises(ProtocolError, match=r"sluice.request.max.partitions=10"):
        check_named_partitions(_list_offsets(2, 5), 10)


def test_limit_settings_parse_with_kafkas_names() -> None:
    config = BrokerConfig()
    config.apply_properties(
        {
            "socket.request.max.bytes": "1048576",
            "sluice.request.max.partitions": "5000",
            "max.connections.per.ip.overrides": "10.0.0.1:5, ::1:0",
            "listener.name.internal.max.connections": "20",
        }
    )
    assert config.socket_request_max_bytes == 1_048_576
    assert config.request_max_partitions == 5000
    assert config.max_connections_per_ip_overrides == {"10.0.0.1": 5, "::1": 0}
    assert config.listener_max_connections == {"INTERNAL": 20}
    for name, value in (
        ("max.connections.per.ip.overrides", "10.0.0.1"),
        ("max.connections.per.ip.overrides", "10.0.0.1:-1"),
        ("socket.request.max.bytes", "10"),
        ("listener.name.internal.max.connections", "many"),
    ):
        with pytest.raises(BrokerConfigError):
            BrokerConfig().apply_properties({name: value})


def test_failed_authentication_delay_has_kafkas_default_bounds_and_rule() -> None:
    assert BrokerConfig().connection_failed_authentication_delay_ms == 100
    config = BrokerConfig()
    config.apply_properties({"connection.failed.authentication.delay.ms": "0"})
    assert config.connection_failed_authentication_delay_ms == 0
    with pytest.raises(BrokerConfigError, match="outside"):
        BrokerConfig().apply_properties({"connection.failed.authentication.delay.ms": "-1"})
    # Kafka refuses a delay that is not below connections.max.idle.ms.
    for properties in (
        {"connections.max.idle.ms": "100"},
        {"connection.failed.authentication.delay.ms": "600000"},
    ):
        with pytest.raises(BrokerConfigError, match=r"must be less than connections\.max\.idle"):
            BrokerConfig().apply_properties(properties)
    config = BrokerConfig()
    config.apply_properties(
        {"connections.max.idle.ms": "100", "connection.failed.authentication.delay.ms": "99"}
    )
    assert config.connection_failed_authentication_delay_ms == 99
