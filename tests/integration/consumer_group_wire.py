"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69) in raw kio requests, for the
tests of the KIP-848 protocol that need to say exactly what a member sends, and the
broker setting that enables the protocol."""

from __future__ import annotations

import datetime
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from broker_process import BrokerProcess
from client_helpers import create_topic, produce_and_flush, producer_config, unique_group_id
from confluent_kafka import Producer
from kafka_wire import KafkaConnection
from kio.schema.consumer_group_describe.v1 import request as describe_v1
from kio.schema.consumer_group_heartbeat.v1 import request as heartbeat_v1
from kio.schema.offset_commit.v9 import request as offset_commit_v9

from sluice.common.errors import ErrorCode

CONSUMER_PROTOCOL = {"group.coordinator.rebalance.protocols": "classic,consumer"}
"""The broker settings that enable the consumer group protocol (KIP-848): the default,
given explicitly so the tests that need it say so."""
CLASSIC_ONLY = {"group.coordinator.rebalance.protocols": "classic"}
"""The broker settings that disable the consumer group protocol."""
FAST_HEARTBEATS = {
    **CONSUMER_PROTOCOL,
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "500",
}
"""The protocol enabled, members told to heartbeat every 500 ms (Kafka's 5 s makes each
hand-over of a partition wait up to 5 s): for tests whose groups change often."""

SESSION_TIMEOUT_MS_LONG = 600_000
CONSUMER_PROTOCOL_LONG_SESSIONS = {
    **CONSUMER_PROTOCOL,
    "group.consumer.max.session.timeout.ms": str(SESSION_TIMEOUT_MS_LONG),
    "group.consumer.session.timeout.ms": str(SESSION_TIMEOUT_MS_LONG),
}
"""The protocol enabled, with sessions long enough that a member a test heartbeats only
when it says so is not removed while a loaded machine runs the test."""

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


RECORDS_PER_PARTITION = 5
PARTITIONS = 4


@dataclass(frozen=True)
class Rebalancing:
    """A group caught mid-rebalance on a topic of 4 partitions with 5 records each:
    ``first`` (epoch 1, subscribed by name) still holds all four partitions, ``second``
    (epoch 2, subscribed by ``regex``) awaits the two ``first`` must give up. ``first``
    committed offset 2 of partition 0 and 5 (the end) of partition 1."""

    group: str
    topic: str
    first: str
    second: str
    regex: str
    first_target: tuple[int, ...]
    second_target: tuple[int, ...]


def rebalancing_group(broker: BrokerProcess, topic: str) -> Rebalancing:
    """Create ``topic`` and bring a new group to :class:`Rebalancing`'s state (the
    broker's sessions must outlast the test: CONSUMER_PROTOCOL_LONG_SESSIONS)."""
    create_topic(broker.bootstrap, topic, num_partitions=PARTITIONS)
    produce_and_flush(
        Producer(producer_config(broker.bootstrap)),
        topic,
        [
            {"value": b"v", "partition": partition}
            for partition in range(PARTITIONS)
            for _ in range(RECORDS_PER_PARTITION)
        ],
    )
    group = unique_group_id()
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    joined = heartbeat(broker.host, broker.port, heartbeat_request(group, first, 0, (topic,)))
    assert (joined.error_code, joined.member_epoch) == (0, 1), joined
    committed = commit_offsets(broker.host, broker.port, group, first, 1, topic, {0: 2, 1: 5})
    assert committed == {0: 0, 1: 0}, committed
    regex = f"^{re.escape(topic)}$"
    joined = heartbeat(broker.host, broker.port, heartbeat_request(group, second, 0, regex=regex))
    assert (joined.error_code, joined.member_epoch) == (0, 2), joined
    (described,) = describe(broker.host, broker.port, group)
    targets = {
        member.member_id: tuple(
            sorted(int(p) for t in member.target_assignment.topic_partitions for p in t.partitions)
        )
        for member in described.members
    }
    assert sorted(targets[first] + targets[second]) == list(range(PARTITIONS)), targets
    return Rebalancing(group, topic, first, second, regex, targets[first], targets[second])
