"""What goes into and comes out of the group coordinator: plain, version-free requests
and responses (handlers translate to and from the wire messages).

The coordinator answers each request with a :class:`~sluice.coordinator.api.Reply`
carrying one of these responses, and asks for ``__consumer_offsets`` writes with
:class:`~sluice.coordinator.api.Append` (the effects every coordinator shares). A request
may be answered at once, after its records are committed, or much later (JoinGroup waits
for the rebalance, SyncGroup for the leader's assignment).
"""

from __future__ import annotations

from dataclasses import dataclass

from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition

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


@dataclass(frozen=True)
class OffsetCommitRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    offsets: tuple[tuple[TopicPartition, OffsetToCommit], ...]
    retention_ms: int = -1
    """OffsetCommit v2–4: keep these offsets this long; -1 means the broker's rule."""


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


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


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


@dataclass(frozen=True)
class OffsetDeleteResponse:
    error: ErrorCode
    errors: tuple[tuple[TopicPartition, ErrorCode], ...] = ()


Response = (
    JoinGroupResponse
    | SyncGroupResponse
    | HeartbeatResponse
    | LeaveGroupResponse
    | OffsetCommitResponse
    | DeleteGroupsResponse
    | OffsetDeleteResponse
)
"""Every response the group coordinator replies with (the ``response`` of its Replies)."""
