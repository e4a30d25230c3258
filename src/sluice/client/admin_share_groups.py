"""Share groups (KIP-932) as an administrator sees them: listing them (ListGroups with
type filter ``share`` on every broker), describing members (ShareGroupDescribe) and
start offsets with lag (DescribeShareGroupOffsets), moving start offsets
(AlterShareGroupOffsets, empty groups only), deleting them (DeleteShareGroupOffsets)
and deleting groups (DeleteGroups, as for any group). What ``sluice share-groups``
prints, and Kafka's ``kafka-share-groups.sh`` asks.

A share group's *start offset* of a partition is the first offset not yet delivered and
acknowledged for good: records before it are done, records from it on are waiting or
in flight. Its lag is how many records from there on are still to be acknowledged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sluice.client.admin import RESOURCE_TYPE_GROUP, Admin, AlterConfigOp
from sluice.client.cluster import run_all
from sluice.client.connection import BrokerConnection
from sluice.client.errors import UnsupportedApiError
from sluice.client.groups import raise_for_group
from sluice.client.messages import Request
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import NodeId, TopicPartition
from sluice.protocol.versions import ApiKey

SHARE_GROUP_TYPE = "share"
"""ListGroups' group type of share groups."""

LIST_GROUPS_TYPES_VERSION = 5
"""The first ListGroups version that filters by group type."""

NO_START_OFFSET = -1
"""DescribeShareGroupOffsets' start offset of a partition the group has not read yet."""


class ShareGroupState:
    """Names of share group states as ShareGroupDescribe and ListGroups spell them."""

    EMPTY = "Empty"
    """No members: only now may its offsets be altered or the group deleted."""
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ShareGroupListing:
    group_id: str
    state: str


@dataclass(frozen=True, slots=True)
class ShareMemberDescription:
    member_id: str
    client_id: str
    client_host: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topics: tuple[str, ...] = ()
    assignment: dict[str, list[int]] = field(default_factory=dict)
    """Topic → sorted partitions the coordinator asks this member to fetch."""


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ShareMemberDescription, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.members


@dataclass(frozen=True, slots=True)
class SharePartitionOffset:
    """A share group's position in one partition."""

    start_offset: int
    """First offset not yet done with (-1: the group has not read the partition)."""
    leader_epoch: int = -1
    lag: int = -1
    """Records from the start offset on still to acknowledge (-1: unknown)."""
    error: KafkaError | None = None


async def list_share_groups(admin: Admin) -> list[ShareGroupListing]:
    """Every share group of every broker, sorted by id, with its state."""
    metadata = await admin.cluster.metadata([])
    found: list[ShareGroupListing] = []

    async def on(node_id: NodeId) -> None:
        connection = await admin.cluster.connection(node_id)
        version = connection.versions.get(ApiKey.LIST_GROUPS, -1)
        if version < LIST_GROUPS_TYPES_VERSION:
            raise UnsupportedApiError(
                f"broker at {connection.address} cannot list groups by type (ListGroups "
                f"v{LIST_GROUPS_TYPES_VERSION}+): it has no share groups to list"
            )
        response = await connection.request(
            Request(ApiKey.LIST_GROUPS, {"states_filter": [], "types_filter": [SHARE_GROUP_TYPE]})
        )
        if response.error_code != ErrorCode.none:
            raise errors.for_code(response.error_code)(f"listing the groups of broker {node_id}")
        found.extend(
            ShareGroupListing(group.group_id, group.group_state)
            for group in response.groups
            if getattr(group, "group_type", SHARE_GROUP_TYPE) == SHARE_GROUP_TYPE
        )

    await run_all(on(node_id) for node_id in metadata.brokers)
    return sorted(found, key=lambda listing: listing.group_id)


async def describe_share_group(admin: Admin, group_id: str) -> ShareGroupDescription:
    """The group's state and members. Raises GroupIdNotFound for a group no coordinator
    knows (and for a group of another type)."""

    async def attempt(connection: BrokerConnection) -> ShareGroupDescription:
        response = await connection.request(
            Request(
                ApiKey.SHARE_GROUP_DESCRIBE,
                {"group_ids": [group_id], "include_authorized_operations": False},
            )
        )
        for group in response.groups:
            if group.group_id != group_id:
                continue
            _raise(group, group_id, "describe")
            return _description(group)
        raise errors.UnknownServerError(
            f"ShareGroupDescribe answer from broker at {connection.address} does not "
            f"mention group {group_id!r}"
        )

    return await admin.coordinators.call(group_id, attempt)


def _description(group: Any) -> ShareGroupDescription:
    members = []
    for member in group.members:
        assignment: dict[str, list[int]] = {}
        for topic in member.assignment.topic_partitions:
            assignment.setdefault(topic.topic_name, []).extend(int(p) for p in topic.partitions)
        members.append(
            ShareMemberDescription(
                member.member_id,
                member.client_id,
                member.client_host,
                int(member.member_epoch),
                member.rack_id,
                tuple(member.subscribed_topic_names),
                {topic: sorted(partitions) for topic, partitions in sorted(assignment.items())},
            )
        )
    return ShareGroupDescription(
        group.group_id,
        group.group_state,
        int(group.group_epoch),
        int(group.assignment_epoch),
        group.assignor_name,
        tuple(sorted(members, key=lambda m: m.member_id)),
    )


async def share_group_offsets(
    admin: Admin, group_id: str, partitions: Iterable[TopicPartition] | None = None
) -> dict[TopicPartition, SharePartitionOffset]:
    """The group's start offset (and, from brokers with DescribeShareGroupOffsets v1,
    lag) of ``partitions``, or of every partition it has read (None)."""
    topics: list[dict[str, Any]] | None = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(set(partitions)):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topics = [{"topic_name": t, "partitions": p} for t, p in by_topic.items()]

    async def attempt(connection: BrokerConnection) -> dict[TopicPartition, SharePartitionOffset]:
        response = await connection.request(
            Request(
                ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
                {"groups": [{"group_id": group_id, "topics": topics}]},
            )
        )
        found: dict[TopicPartition, SharePartitionOffset] = {}
        for group in response.groups:
            if group.group_id != group_id:
                continue
            _raise(group, group_id, "describe offsets")
            for topic in group.topics:
                for partition in topic.partitions:
                    tp = TopicPartition(topic.topic_name, int(partition.partition_index))
                    code = int(partition.error_code)
                    found[tp] = SharePartitionOffset(
                        int(partition.start_offset),
                        int(partition.leader_epoch),
                        int(getattr(partition, "lag", -1)),
                        None
                        if code == ErrorCode.none
                        else errors.for_code(code)(partition.error_message or f"{tp}"),
                    )
        return found

    return await admin.coordinators.call(group_id, attempt)


async def alter_share_group_offsets(
    admin: Admin, group_id: str, offsets: Mapping[TopicPartition, int]
) -> dict[TopicPartition, KafkaError | None]:
    """Set the group's start offset of each partition (the group must be empty).
    Raises the group's refusal (NonEmptyGroup, GroupIdNotFound, …); returns each
    partition's outcome (None: set)."""
    by_topic: dict[str, list[dict[str, int]]] = {}
    for tp, offset in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "start_offset": offset}
        )

    async def attempt(connection: BrokerConnection) -> dict[TopicPartition, KafkaError | None]:
        response = await connection.request(
            Request(
                ApiKey.ALTER_SHARE_GROUP_OFFSETS,
                {
                    "group_id": group_id,
                    "topics": [{"topic_name": t, "partitions": p} for t, p in by_topic.items()],
                },
            )
        )
        _raise(response, group_id, "alter offsets")
        return {
            TopicPartition(topic.topic_name, int(partition.partition_index)): _error_or_none(
                int(partition.error_code),
                partition.error_message,
                f"{topic.topic_name}-{partition.partition_index}",
            )
            for topic in response.responses
            for partition in topic.partitions
        }

    return await admin.coordinators.call(group_id, attempt)


async def delete_share_group_offsets(
    admin: Admin, group_id: str, topics: Iterable[str]
) -> dict[str, KafkaError | None]:
    """Forget the group's state of every partition of ``topics`` (the group must be
    empty); each topic's outcome (None: deleted)."""
    names = sorted(set(topics))

    async def attempt(connection: BrokerConnection) -> dict[str, KafkaError | None]:
        response = await connection.request(
            Request(
                ApiKey.DELETE_SHARE_GROUP_OFFSETS,
                {"group_id": group_id, "topics": [{"topic_name": t} for t in names]},
            )
        )
        _raise(response, group_id, "delete offsets")
        return {
            topic.topic_name: _error_or_none(
                int(topic.error_code), topic.error_message, f"topic {topic.topic_name!r}"
            )
            for topic in response.responses
        }

    return await admin.coordinators.call(group_id, attempt)


async def alter_share_group_configs(
    admin: Admin,
    group_id: str,
    *,
    set_configs: Mapping[str, str] | None = None,
    delete_configs: Iterable[str] = (),
) -> None:
    """Set or remove the group's own settings (``share.auto.offset.reset``,
    ``share.record.lock.duration.ms``, …; IncrementalAlterConfigs on the group). A group
    may be configured before it has members, so it starts where it should."""
    operations = [AlterConfigOp.set(k, v) for k, v in (set_configs or {}).items()]
    operations += [AlterConfigOp.delete(k) for k in delete_configs]
    if operations:
        await admin.incremental_alter_configs(RESOURCE_TYPE_GROUP, group_id, operations)


async def delete_share_groups(
    admin: Admin, group_ids: Iterable[str]
) -> dict[str, KafkaError | None]:
    """Delete groups (DeleteGroups serves every type); each group's outcome."""
    return await admin.delete_groups(list(group_ids))


def _raise(answer: Any, group_id: str, what: str) -> None:
    code = int(answer.error_code)
    if code == ErrorCode.none:
        return
    message = getattr(answer, "error_message", None)
    raise_for_group(code, group_id, f"{what}: {message}" if message else what)


def _error_or_none(code: int, message: str | None, what: str) -> KafkaError | None:
    if code == ErrorCode.none:
        return None
    return errors.for_code(code)(f"{what}: {message}" if message else what)
