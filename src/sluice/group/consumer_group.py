"""A consumer group of the new protocol (KIP-848): its members, epochs and assignments.

The coordinator, not a member, computes the assignment (a server-side assignor,
:mod:`~sluice.group.consumer_assignors`), and each member moves towards its share of
it one heartbeat at a time (:mod:`~sluice.group.consumer_reconciliation`). Three epochs::

    group epoch       + 1 whenever what the assignment depends on changes: a member
                      joins or leaves, a subscription (names, regex), rack or server
                      assignor changes, a subscribed topic appears, disappears or
                      changes its partition count
    assignment epoch  the group epoch the target assignment was computed for
    member epoch      the assignment epoch a member has caught up with; it must send it
                      in every heartbeat (FENCED_MEMBER_EPOCH otherwise)

The group's state follows from them::

    EMPTY         no members
    ASSIGNING     group epoch > assignment epoch (a new target is due)
    RECONCILING   some member is not STABLE at the assignment epoch
    STABLE        every member holds exactly its target at the assignment epoch

A member's state (Kafka's ``MemberState``, persisted as its byte)::

                 target has partitions this member still owns
    ┌────────┐ ─────────────────────────────────────────────▶ ┌──────────────────────┐
    │ STABLE │                                                 │ UNREVOKED_PARTITIONS │
    └────────┘ ◀──────┐                                        └──────────────────────┘
        ▲              │ all released         revoked (its heartbeat no     │
        │              │                      longer owns them): epoch      │
        │      ┌───────────────────────┐      moves to the assignment epoch │
        └──────│ UNRELEASED_PARTITIONS │ ◀─────────────────────────────────┘
               └───────────────────────┘  (some new partitions are still owned
                                           by members that have not revoked them)

A partition is owned by at most one member at any instant: the partitions a member is
assigned or must still revoke are its own (``partition_owners``), and a member is only
given a partition nobody else owns.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

Assignment = Mapping[uuid.UUID, frozenset[int]]
"""Topic id → partitions (of one member)."""

JOIN_MEMBER_EPOCH = 0
"""A heartbeat with member epoch 0 joins (or rejoins) the group."""
LEAVE_MEMBER_EPOCH = -1
"""A heartbeat with member epoch -1 leaves the group."""
LEAVE_STATIC_MEMBER_EPOCH = -2
"""A static member (one with an instance id) leaving for a while: it keeps its
partitions until its session times out, so a restart takes them back without a
rebalance."""

CONSUMER_GROUP_TYPE = "consumer"
"""The group type ListGroups v5+ reports for these groups."""


class MemberState(enum.IntEnum):
    """Kafka's ``MemberState``; the value is the byte the current assignment record holds."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def from_byte(cls, value: int) -> MemberState:
        """A state a newer version wrote and this one does not know is UNKNOWN."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass(frozen=True)
class TopicImage:
    """What the coordinator needs of a topic in the metadata image."""

    topic_id: uuid.UUID
    name: str
    partition_count: int
    partition_racks: tuple[frozenset[str], ...] = ()
    """Per partition, the racks of its replicas; empty when brokers have no rack."""
    is_internal: bool = False
    """``__consumer_offsets`` and the like: subscribed to by name only, never by a
    regular expression (Kafka's rule)."""

    def racks_of(self, partition: int) -> frozenset[str]:
        if partition < len(self.partition_racks):
            return self.partition_racks[partition]
        return frozenset()


MetadataView = Mapping[str, TopicImage]
"""Topic name → topic: the broker's metadata image as the coordinator sees it."""


@dataclass(frozen=True)
class ClassicMemberMetadata:
    """What a member that speaks the classic protocol (JoinGroup, SyncGroup, Heartbeat)
    inside a consumer group keeps of it: Kafka's ``ClassicMemberMetadata`` of the member
    metadata record (:mod:`~sluice.group.consumer_classic`)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    """(protocol name, ConsumerProtocol subscription) in the member's order of preference."""

    @property
    def protocol_name(self) -> str:
        """The protocol its JoinGroup answer names: its first (Kafka's choice)."""
        return self.protocols[0][0]


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = -1
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned_partitions: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    partitions_pending_revocation: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    resolved_regex: tuple[str, frozenset[str]] | None = field(default=None, compare=False)
    """The member's regular expression and the topics it matched that the member may
    DESCRIBE, as resolved at its last heartbeat on behalf of its principal (Kafka's
    rule). Not in the records: a coordinator that loaded the group knows it from the
    member's next heartbeat, and meanwhile takes the pattern's matches among the
    topics the member owns or is assigned."""
    classic: ClassicMemberMetadata | None = None
    """Set for a member of the classic protocol (joined through JoinGroup, or converted
    with its classic group); None for a member sending ConsumerGroupHeartbeat."""

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def owned(self) -> Iterable[tuple[uuid.UUID, int]]:
        """Every partition this member owns: assigned or still to be revoked."""
        for assignment in (self.assigned_partitions, self.partitions_pending_revocation):
            for topic_id, partitions in assignment.items():
                for partition in partitions:
                    yield topic_id, partition


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    """Instance id → member id."""
    subscribed_topics: dict[str, TopicImage] = field(default_factory=dict)
    """The subscribed topics that existed when the group epoch last moved (name →
    topic); persisted as the partition metadata record."""
    target_assignment: dict[str, dict[uuid.UUID, frozenset[int]]] = field(default_factory=dict)
    """Member id → its target, at ``assignment_epoch``."""
    partition_owners: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)
    """(topic id, partition) → the member that owns it (assigned or revoking)."""

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            if member.member_epoch != self.assignment_epoch or member.state != MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def owner_of(self, topic_id: uuid.UUID, partition: int) -> str | None:
        return self.partition_owners.get((topic_id, partition))

    def set_current_assignment(
        self,
        member: ConsumerMember,
        assigned: Mapping[uuid.UUID, frozenset[int]],
        pending_revocation: Mapping[uuid.UUID, frozenset[int]],
    ) -> None:
        """Change what ``member`` owns, keeping ``partition_owners`` in step."""
        for key in member.owned():
            if self.partition_owners.get(key) == member.member_id:
                del self.partition_owners[key]
        member.assigned_partitions = _without_empty(assigned)
        member.partitions_pending_revocation = _without_empty(pending_revocation)
        for key in member.owned():
            owner = self.partition_owners.setdefault(key, member.member_id)
            assert owner == member.member_id, f"partition {key} owned by {owner} too"

    def remove_member(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is None:
            return
        for key in member.owned():
            if self.partition_owners.get(key) == member_id:
                del self.partition_owners[key]
        if member.instance_id is not None and self.static_members.get(member.instance_id) == (
            member_id
        ):
            del self.static_members[member.instance_id]


def _without_empty(
    assignment: Mapping[uuid.UUID, frozenset[int]],
) -> dict[uuid.UUID, frozenset[int]]:
    return {topic_id: partitions for topic_id, partitions in assignment.items() if partitions}
