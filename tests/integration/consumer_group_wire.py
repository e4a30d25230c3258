"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69) in raw kio requests, for the
tests of the KIP-848 protocol that need to say exactly what a member sends, and the
broker setting that enables the protocol."""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

from kafka_wire import KafkaConnection
from kio.schema.consumer_group_describe.v1 import request as describe_v1
from kio.schema.consumer_group_heartbeat.v1 import request as heartbeat_v1
from kio.schema.offset_commit.v9 import request as offset_commit_v9

from sluice.common.errors import ErrorCode

CONSUMER_PROTOCOL = {"group.coordinator.rebalance.protocols": "classic,consumer"}
"""The broker settings that enable the consumer group protocol (KIP-848)."""

RETRIED = (
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
)
REBALANCE_TIMEOUT = datetime.timedelta(seconds=30)
KEEP = datetime.timedelta(milliseconds=-1)
"""RebalanceTimeoutMs -1: unchanged."""
RETRY_DEADLINE_S = 30.0


def heartbeat_request(
    group: str,
    member_id: str,
    epoch: int,
    topics: tuple[str, ...] | None = None,
    owned: dict[uuid.UUID, tuple[int, ...]] | None = None,
    *,
    regex: str | None = None,
) -> Any:
    """Epoch 0 joins (with the subscription, topic names or ``regex``, and an empty owned
    list), -1 leaves; other heartbeats send ``owned`` when given, else nothing but the
    epoch."""
    joining = epoch == 0
    return heartbeat_v1.ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=member_id,
        member_epoch=heartbeat_v1.i32(epoch),
        instance_id=None,
        rack_id=None,
        rebalance_timeout=REBALANCE_TIMEOUT if joining else KEEP,
        subscribed_topic_names=topics,
        subscribed_topic_regex=regex,
        server_assignor=None,
        topic_partitions=(
            ()
            if joining
            else None
            if owned is None
            else tuple(
                heartbeat_v1.TopicPartitions(
                    topic_id=topic_id, partitions=tuple(heartbeat_v1.i32(p) for p in parts)
                )
                for topic_id, parts in owned.items()
            )
        ),
    )


def heartbeat(host: str, port: int, request: Any) -> Any:
    """One heartbeat to the broker at host:port, retried while its coordinator loads."""
    deadline = time.monotonic() + RETRY_DEADLINE_S
    while True:
        with KafkaConnection(host, port) as connection:
            response = connection.request(request)
        if response.error_code not in RETRIED or time.monotonic() > deadline:
            return response


def describe(host: str, port: int, *groups: str, operations: bool = False) -> tuple[Any, ...]:
    with KafkaConnection(host, port) as connection:
        response = connection.request(
            describe_v1.ConsumerGroupDescribeRequest(
                group_ids=groups, include_authorized_operations=operations
            )
        )
    return tuple(response.groups)


def assigned(response: Any) -> dict[uuid.UUID, tuple[int, ...]]:
    """The assignment an answer carries, by topic id."""
    assert response.assignment is not None, response
    return {
        t.topic_id: tuple(sorted(int(p) for p in t.partitions))
        for t in response.assignment.topic_partitions
    }


def commit_offsets(
    host: str,
    port: int,
    group: str,
    member_id: str,
    epoch: int,
    topic: str,
    offsets: dict[int, int],
) -> dict[int, int]:
    """OffsetCommit v9 of ``offsets`` (partition → offset) as the member at ``epoch``;
    each partition's error code."""
    with KafkaConnection(host, port) as connection:
        response = connection.request(
            offset_commit_v9.OffsetCommitRequest(
                group_id=group,
                generation_id_or_member_epoch=offset_commit_v9.i32(epoch),
                member_id=member_id,
                group_instance_id=None,
                topics=(
                    offset_commit_v9.OffsetCommitRequestTopic(
                        name=topic,
                        partitions=tuple(
                            offset_commit_v9.OffsetCommitRequestPartition(
                                partition_index=offset_commit_v9.i32(partition),
                                committed_offset=offset_commit_v9.i64(offset),
                                committed_leader_epoch=offset_commit_v9.i32(-1),
                                committed_metadata=None,
                            )
                            for partition, offset in offsets.items()
                        ),
                    ),
                ),
            )
        )
    return {
        int(partition.partition_index): int(partition.error_code)
        for partition in response.topics[0].partitions
    }
