"""What goes into and comes out of the group coordinator: plain, version-free requests
and responses (handlers translate to and from the wire messages).

The coordinator answers each request with a :class:`~sluice.coordinator.api.Reply`
carrying one of these responses, and asks for ``__consumer_offsets`` writes with
:class:`~sluice.coordinator.api.Append` (the effects every coordinator shares). A request
may be answered at once, after its records are committed, or much later (JoinGroup waits
for the rebalance, SyncGroup for the leader's assignment).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.group.share_group import ShareTopic

NO_GENERATION = -1
NO_MEMBER_ID = ""
NO_OFFSET = -1
NO_LEADER_EPOCH = -1


@dataclass(frozen=True)
class JoinGroupRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    """JoinGroup v0 has none: pass the session timeout (Kafka does)."""
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    """(name, metadata) in the member's order of preference."""
    require_known_member_id: bool
    """JoinGroup v4+: a member without an id is given one with MEMBER_ID_REQUIRED and
    must join again with it."""


@dataclass(frozen=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinGroupResponse:
    error: ErrorCode
    generation_id: int = NO_GENERATION
    protocol_name: str = ""
    leader: str = ""
    member_id: str = NO_MEMBER_ID
    members: tuple[JoinedMember, ...] = ()
    """Every member with its metadata, for the leader only."""


@dataclass(frozen=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    assignments: tuple[tuple[str, bytes], ...]
    """(member id, assignment); only the leader sends any."""
    protocol_type: str | None = None
    protocol_name: str | None = None
    """What the member believes the group's protocol type and name are (SyncGroup v5+,
    KIP-559); when given, they must match the group's (INCONSISTENT_GROUP_PROTOCOL)."""


@dataclass(frozen=True)
class SyncGroupResponse:
    error: ErrorCode
    assignment: bytes = b""


@dataclass(frozen=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True)
class HeartbeatResponse:
    error: ErrorCode


@dataclass(frozen=True)
class MemberIdentity:
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True)
class LeaveGroupRequest:
    group_id: str
    members: tuple[MemberIdentity, ...]


@dataclass(frozen=True)
class LeftMember:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True)
class LeaveGroupResponse:
    error: ErrorCode
    members: tuple[LeftMember, ...] = ()


@dataclass(frozen=True)
class OffsetToCommit:
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str | None = ""


OFFSET_COMMIT_MEMBER_EPOCH_VERSION = 9
"""The first OffsetCommit version whose generation is a consumer group member's epoch
(KIP-848); Kafka refuses older ones from such members with UNSUPPORTED_VERSION."""


@dataclass(frozen=True)
class OffsetCommitRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    offsets: tuple[tuple[TopicPartition, OffsetToCommit], ...]
    retention_ms: int = -1
    """OffsetCommit v2–4: keep these offsets this long; -1 means the broker's rule."""
    api_version: int = OFFSET_COMMIT_MEMBER_EPOCH_VERSION
    """The OffsetCommit version it came in (TxnOffsetCommit: ignored). Members of a
    consumer group (KIP-848) must commit with v9+, which carries their member epoch."""


@dataclass(frozen=True)
class OffsetCommitResponse:
    errors: tuple[tuple[TopicPartition, ErrorCode], ...]
    """One entry per requested partition, in request order."""


@dataclass(frozen=True)
class FetchedOffset:
    partition: TopicPartition
    offset: int = NO_OFFSET
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True)
class OffsetFetchResponse:
    error: ErrorCode
    offsets: tuple[FetchedOffset, ...] = ()


@dataclass(frozen=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    error: ErrorCode
    state: str
    protocol_type: str = ""
    protocol: str = ""
    members: tuple[DescribedMember, ...] = ()
    not_found_message: str | None = None
    """Why a Dead description is no group here, when it is more than "not found" (a
    share group's id: "not a classic group"); DescribeGroups v6+ answers with it."""


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclass(frozen=True)
class ListGroupsResponse:
    error: ErrorCode
    """COORDINATOR_LOAD_IN_PROGRESS while some partition is still loading (its groups
    are missing from the list)."""
    groups: tuple[GroupListing, ...] = ()


@dataclass(frozen=True)
class DeleteGroupsResponse:
    errors: tuple[tuple[str, ErrorCode], ...]
    """(group id, error) in request order, each group once."""
    share_topics: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(group id, every topic it ever subscribed to) of each share group deleted: their
    share-partition state is to be deleted too."""


@dataclass(frozen=True)
class OffsetDeleteResponse:
    error: ErrorCode
    errors: tuple[tuple[TopicPartition, ErrorCode], ...] = ()


# ------------------------------------------------------------------ share groups

NO_MEMBER_EPOCH = -1
JOIN_MEMBER_EPOCH = 0
"""ShareGroupHeartbeat's member epoch 0 joins; -1 leaves."""
LEAVE_MEMBER_EPOCH = -1


@dataclass(frozen=True)
class ShareGroupHeartbeatRequest:
    group_id: str
    member_id: str
    """Chosen by the client (v1: a UUID string)."""
    member_epoch: int
    rack_id: str | None
    subscribed_topic_names: tuple[str, ...] | None
    """None: unchanged since the last heartbeat."""
    client_id: str
    client_host: str
    topics: Mapping[str, ShareTopic]
    """The broker's topics now (name → id and partition count); only the subscribed
    ones are looked at."""
    group_configs: Mapping[str, str]
    """The group's overrides (config resource GROUP): ``share.session.timeout.ms`` and
    ``share.heartbeat.interval.ms`` override the broker's settings."""


@dataclass(frozen=True)
class ShareAssignedTopic:
    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True)
class ShareGroupHeartbeatResponse:
    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = NO_MEMBER_EPOCH
    heartbeat_interval_ms: int = 0
    assignment: tuple[ShareAssignedTopic, ...] | None = None
    """None: unchanged (only sent when the member's epoch moves, or it joins or sends
    its whole state)."""


@dataclass(frozen=True)
class ShareDescribedMember:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: tuple[ShareAssignedTopic, ...]


@dataclass(frozen=True)
class ShareGroupDescription:
    group_id: str
    error: ErrorCode
    error_message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[ShareDescribedMember, ...] = ()


Response = (
    JoinGroupResponse
    | SyncGroupResponse
    | HeartbeatResponse
    | LeaveGroupResponse
    | OffsetCommitResponse
    | DeleteGroupsResponse
    | OffsetDeleteResponse
    | ShareGroupHeartbeatResponse
)
"""Every response the group coordinator replies with (the ``response`` of its Replies)."""
