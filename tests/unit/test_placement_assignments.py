"""Manual replica assignments checked by the placement functions, on a three-broker
cluster description: what one node cannot show (a replication factor unlike the other
partitions', replicas kept in the order given, the leader)."""

from __future__ import annotations

import uuid

import pytest

from sluice.cluster import placement
from sluice.cluster.model import BrokerInfo, PartitionState, TopicMetadata
from sluice.common.errors import ErrorCode, KafkaError

BROKERS = [BrokerInfo(node_id, "127.0.0.1", 9092 + node_id) for node_id in (1, 2, 3)]


def _code(error: pytest.ExceptionInfo[KafkaError]) -> ErrorCode:
    return ErrorCode(error.value.code)


def test_replicas_are_stored_in_the_order_given_and_the_first_leads() -> None:
    topic = placement.assigned_topic("t", [(0, [3, 1]), (1, [2, 3])], {}, BROKERS)
    assert topic.partitions == {
        0: PartitionState((3, 1), 3, 0, (3, 1)),
        1: PartitionState((2, 3), 2, 0, (2, 3)),
    }


def test_a_replication_factor_unlike_the_first_partition_is_refused() -> None:
    with pytest.raises(KafkaError) as raised:
        placement.assigned_topic("t", [(0, [1, 2]), (1, [3])], {}, BROKERS)
    assert _code(raised) == ErrorCode.invalid_replica_assignment
    assert "1 replica(s), but this is not consistent" in str(raised.value.message)


def test_added_partitions_must_match_the_topic_replication_factor() -> None:
    existing = TopicMetadata(
        "t", uuid.uuid4(), {0: PartitionState((1, 2), 1, 0, (1, 2))}, {}, version=3
    )
    grown = placement.with_assigned_partitions(existing, 3, [[2, 3], [3, 1]], BROKERS)
    assert [grown.partitions[i].replicas for i in range(3)] == [(1, 2), (2, 3), (3, 1)]
    assert grown.version == 3
    with pytest.raises(KafkaError) as raised:
        placement.with_assigned_partitions(existing, 2, [[2, 3, 1]], BROKERS)
    assert _code(raised) == ErrorCode.invalid_replica_assignment
    with pytest.raises(KafkaError) as raised:
        placement.with_assigned_partitions(existing, 1, [], BROKERS)
    assert _code(raised) == ErrorCode.invalid_partitions
