"""A classic consumer group: its states, members, generation and committed offsets.

The states and what moves a group between them (Kafka's classic group protocol)::

               first JoinGroup                        all joined again,
    ┌───────┐ ───────────────▶ ┌────────────────────┐ or the rebalance   ┌─────────────────────┐
    │ Empty │                  │ PreparingRebalance │ timeout passed ──▶ │ CompletingRebalance │
    └───────┘ ◀─────────────── └────────────────────┘                    └─────────────────────┘
        │     nobody left at        ▲          ▲                                    │
        │     the end               │          └─ a member joins with new ──────────┤
        │                           │             metadata, leaves or expires       │ the leader's
        │                           │                                               │ SyncGroup is
        │                           │                                               │ committed
        │                           │ the leader joins again, a member              ▼
        │                           │ joins, leaves, expires or never          ┌────────┐
        │                           └─ syncs ───────────────────────────────── │ Stable │
        │                                                                      └────────┘
        │ DeleteGroups, or its offsets expired
        ▼ (while the tombstones are written)
    ┌──────┐  removed once its tombstones are committed
    │ Dead │  (Empty again if writing them failed)
    └──────┘

- **Empty**: no members. The group may still have committed offsets and the generation
  it reached; a group that only ever committed offsets (a "simple" consumer assigning
  partitions itself) has no protocol type.
- **PreparingRebalance**: waiting for every member to send JoinGroup again. Requests
  are parked; the rebalance ends when all have joined, or at the rebalance timeout
  (dynamic members that did not join are removed). The first rebalance of an Empty
  group instead waits ``group.initial.rebalance.delay.ms`` (again for every new
  member, up to the rebalance timeout) so members starting together arrive together.
- **CompletingRebalance**: the new generation exists; every member got its JoinGroup
  answer, the leader (with everyone's metadata) computes the assignment and sends it in
  SyncGroup; the others' SyncGroups are parked until it is committed to the log.
- **Stable**: members heartbeat; SyncGroup answers at once with the member's assignment.
- **Dead**: being deleted. Requests get COORDINATOR_NOT_AVAILABLE (clients retry).

Static members (``group.instance.id``) survive a restart of their client: when one joins
again without its member id it gets a new one and the old id is fenced
(FENCED_INSTANCE_ID); in Stable it does so without a rebalance when the group's protocol
would not change.
"""

from __future__ import annotations

import copy
import enum
import struct
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.group.api import DescribedMember, GroupDescription, JoinedMember
from sluice.group.member import Member
from sluice.group.records import OffsetCommitValue

CONSUMER_PROTOCOL_TYPE = "consumer"
"""Kafka consumers' protocol type; their subscriptions can be read (for OffsetDelete and
offset expiry of topics no member subscribes to)."""


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, set[GroupState]] = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE, GroupState.DEAD},
    GroupState.PREPARING_REBALANCE: {
        GroupState.EMPTY,
        GroupState.STABLE,
        GroupState.COMPLETING_REBALANCE,
    },
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE, GroupState.EMPTY},
    GroupState.DEAD: {
        GroupState.EMPTY,
        GroupState.PREPARING_REBALANCE,
        GroupState.COMPLETING_REBALANCE,
        GroupState.STABLE,
    },
}
"""Dead → Empty is the undo of a deletion whose tombstones could not be written;
Empty → Stable happens only when a group is loaded from the log with members."""


class JoinWait(enum.Enum):
    """What the PreparingRebalance deadline is."""

    INITIAL_DELAY = enum.auto()
    """group.initial.rebalance.delay.ms: the join ends only at the deadline."""
    REBALANCE_TIMEOUT = enum.auto()
    """The join ends when every member has joined, or at the deadline."""


_MEMBERSHIP_FIELDS = (
    "state",
    "state_timestamp_ms",
    "protocol_type",
    "protocol_name",
    "generation_id",
    "leader_id",
    "join_wait",
    "join_deadline_ms",
    "initial_delay_remaining_ms",
    "new_member_added",
    "sync_deadline_ms",
    "subscribed_topics",
    "has_metadata_record",
)
_MEMBERSHIP_COLLECTIONS = ("members", "static_members", "pending_members", "pending_sync_members")


@dataclass(frozen=True)
class GroupMembership:
    """A classic group's state but its offsets (:meth:`Group.membership`)."""

    values: Mapping[str, object]


class Group:
    """One group's state. The coordinator drives it; this class keeps its bookkeeping
    consistent (members, static ids, leader) and answers questions about it."""

    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.state_timestamp_ms = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        """By member id, in the order they joined."""
        self.static_members: dict[str, str] = {}
        """group instance id → current member id."""
        self.pending_members: dict[str, int] = {}
        """Member ids handed out with MEMBER_ID_REQUIRED → when they lapse (ms)."""
        self.pending_sync_members: set[str] = set()
        """Members of the new generation that have not sent SyncGroup yet."""
        self.join_wait = JoinWait.REBALANCE_TIMEOUT
        self.join_deadline_ms: int | None = None
        self.initial_delay_remaining_ms = 0
        self.new_member_added = False
        self.sync_deadline_ms: int | None = None
        self.subscribed_topics: frozenset[str] | None = None
        """Topics the consumer members subscribe to; None when unknown."""
        self.offsets: dict[TopicPartition, OffsetCommitValue] = {}
        """Committed offsets: only those whose records are in the log."""
        self.offset_positions: dict[TopicPartition, int] = {}
        """Where each committed offset's record sits in the log, as a count of offset
        records (see ``Offsets._log_position`` in :mod:`~sluice.group.offsets`): a
        transaction's offset committed by its marker must not replace one written
        after it."""
        self.pending_offset_commits: Counter[TopicPartition] = Counter()
        """Partitions with commits appended and not yet committed to the log."""
        self.has_metadata_record = False
        """Used while loading: the log holds a group metadata record for this group."""
        self.rebalances = 0
        """Rebalances begun since this coordinator loaded the group (a metric)."""

    def __repr__(self) -> str:
        return (
            f"Group({self.group_id!r}, {self.state.value}, generation {self.generation_id}, "
            f"{len(self.members)} member(s))"
        )

    # ------------------------------------------------------------------ state

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        assert self.state in _VALID_PREVIOUS[state], (
            f"group {self.group_id}: {self.state.value} → {state.value} is not a transition"
        )
        self.state = state
        self.state_timestamp_ms = now_ms
        if state is GroupState.PREPARING_REBALANCE:
            self.rebalances += 1

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def membership(self) -> GroupMembership:
        """Everything of the group but its offsets, to put back with
        :meth:`restore_membership` (a conversion to or from a consumer group whose write
        failed)."""
        values: dict[str, object] = {name: getattr(self, name) for name in _MEMBERSHIP_FIELDS}
        for name in _MEMBERSHIP_COLLECTIONS:
            values[name] = copy.copy(getattr(self, name))
        return GroupMembership(values)

    def restore_membership(self, saved: GroupMembership) -> None:
        for name, value in saved.values.items():
            setattr(self, name, copy.copy(value) if name in _MEMBERSHIP_COLLECTIONS else value)

    def hand_over(self, now_ms: int) -> None:
        """The group became a consumer group (the online upgrade): it keeps only the
        committed offsets of the id, as loading the partition would leave it once its
        metadata record is deleted. Not a transition of the classic protocol: the
        members now belong to the consumer group."""
        assert not any(m.awaiting_join or m.awaiting_sync for m in self.members.values()), (
            f"group {self.group_id}: handed over with parked requests"
        )
        self.members.clear()
        self.static_members.clear()
        self.pending_members.clear()
        self.pending_sync_members.clear()
        self.leader_id = None
        self.generation_id = 0
        self.protocol_type = self.protocol_name = None
        self.subscribed_topics = None
        self.join_deadline_ms = self.sync_deadline_ms = None
        self.has_metadata_record = False
        self.state = GroupState.EMPTY
        self.state_timestamp_ms = now_ms

    # ---------------------------------------------------------------- members

    def add_member(self, member: Member, protocol_type: str) -> None:
        """Add a member; the first member of an empty group sets the protocol type."""
        assert member.member_id not in self.members, f"{member.member_id} is already a member"
        if not self.members:
            self.protocol_type = protocol_type
        self.members[member.member_id] = member
        self.pending_members.pop(member.member_id, None)
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove_member(self, member_id: str) -> Member:
        member = self.members.pop(member_id)
        if (
            member.group_instance_id is not None
            and self.static_members.get(member.group_instance_id) == member_id
        ):
            del self.static_members[member.group_instance_id]
        self.pending_sync_members.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, group_instance_id: str, new_member_id: str) -> Member:
        """Give a static member a new member id; the old one is fenced from now on."""
        old_member_id = self.static_members[group_instance_id]
        member = self.members[old_member_id]
        member.member_id = new_member_id
        self.members = {
            (new_member_id if member_id == old_member_id else member_id): m
            for member_id, m in self.members.items()
        }
        self.static_members[group_instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        return member

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
        """None if ``member_id`` (with its instance id, if given) is a current member;
        FENCED_INSTANCE_ID if the instance id now belongs to another member id;
        UNKNOWN_MEMBER_ID otherwise."""
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        return None

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def awaiting_join_count(self) -> int:
        """Members that will be in the next generation so far (joined, or given an id)."""
        return sum(m.awaiting_join for m in self.members.values()) + len(self.pending_members)

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def elect_joined_leader(self) -> bool:
        """Keep the leader if it joined this rebalance, else make a joined member leader.
        False when no member joined."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.awaiting_join:
                self.leader_id = member_id
                return True
        return False

    # -------------------------------------------------------------- protocols

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        """Whether a member with these protocols may join: an empty group takes any
        non-empty set; otherwise the type must match and one protocol must be supported
        by every current member."""
        if not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        candidates = self.candidate_protocols()
        return any(name in candidates for name in names)

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        members = iter(self.members.values())
        first = next(members, None)
        if first is None:
            return set()
        candidates = set(first.protocol_names())
        for member in members:
            candidates.intersection_update(member.protocol_names())
        return candidates

    def select_protocol(self) -> str:
        """The protocol every member supports that most members prefer (each votes for
        its first choice among those). Ties go to the protocol voted for first, in join
        order, so the choice is deterministic."""
        candidates = self.candidate_protocols()
        assert candidates, f"group {self.group_id} has members with no protocol in common"
        votes: Counter[str] = Counter(m.vote(candidates) for m in self.members.values())
        first_vote = {name: i for i, name in reversed(list(enumerate(votes)))}
        return max(votes, key=lambda name: (votes[name], -first_vote[name]))

    def current_member_metadata(self) -> tuple[JoinedMember, ...]:
        assert self.protocol_name is not None
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            subscribed = consumer_subscription_topics(member.metadata(self.protocol_name))
            if subscribed is None:
                return None
            topics.update(subscribed)
        return frozenset(topics)

    def assigned_partitions(self) -> frozenset[TopicPartition]:
        """The partitions the leader assigned to this generation's consumer members
        (those whose assignment parses; none outside a consumer protocol)."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return frozenset()
        assigned: set[TopicPartition] = set()
        for member in self.members.values():
            assigned |= consumer_assignment_partitions(member.assignment) or frozenset()
        return frozenset(assigned)

    def is_subscribed_to(self, topic: str) -> bool:
        """Unknown subscriptions count as subscribed to everything (the safe answer)."""
        return self.subscribed_topics is None or topic in self.subscribed_topics

    # ---------------------------------------------------------------- offsets

    def has_offsets(self) -> bool:
        return bool(self.offsets) or bool(+self.pending_offset_commits)

    def expired_offsets(self, now_ms: int, retention_ms: int) -> list[TopicPartition]:
        """Offsets past retention (Kafka's KIP-211 rules): for a consumer group that is
        Empty, counted from when it became Empty; for a simple group, from each commit;
        for a Stable consumer group, only topics it no longer subscribes to, from each
        commit. Offsets with a commit in flight never expire."""
        use_state_timestamp = False
        unsubscribed_only = False
        if self.protocol_type and self.state is GroupState.EMPTY:
            use_state_timestamp = self.state_timestamp_ms >= 0
        elif (
            self.protocol_type == CONSUMER_PROTOCOL_TYPE
            and self.state is GroupState.STABLE
            and self.subscribed_topics is not None
        ):
            unsubscribed_only = True
        elif self.protocol_type:
            return []
        expired = []
        for partition, value in self.offsets.items():
            if self.pending_offset_commits[partition]:
                continue
            if unsubscribed_only and self.is_subscribed_to(partition.topic):
                continue
            if value.expire_timestamp_ms >= 0:
                if now_ms >= value.expire_timestamp_ms:
                    expired.append(partition)
                continue
            base_ms = self.state_timestamp_ms if use_state_timestamp else value.commit_timestamp_ms
            if now_ms - base_ms >= retention_ms:
                expired.append(partition)
        return expired

    # ---------------------------------------------------------------- describe

    def describe(self) -> GroupDescription:
        """Kafka's summary: members with metadata and assignment only when Stable."""
        stable = self.state is GroupState.STABLE
        protocol = self.protocol_name if stable and self.protocol_name is not None else ""
        return GroupDescription(
            group_id=self.group_id,
            error=ErrorCode.none,
            state=self.state.value,
            protocol_type=self.protocol_type or "",
            protocol=protocol,
            members=tuple(
                DescribedMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    metadata=m.metadata(protocol) if protocol else b"",
                    assignment=m.assignment if protocol else b"",
                )
                for m in self.members.values()
            ),
        )


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def consumer_subscription_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics in a Kafka consumer's subscription (ConsumerProtocolSubscription: int16
    version, then an int32-counted array of int16-length topic names, then fields this
    does not need). None if the bytes do not parse: then nothing is known."""
    try:
        (version,) = _I16.unpack_from(metadata, 0)
        (count,) = _I32.unpack_from(metadata, 2)
        if version < 0 or count < 0 or count * 2 > len(metadata) - 6:
            return None
        position = 6
        topics = []
        for _ in range(count):
            (length,) = _I16.unpack_from(metadata, position)
            position += 2
            if length < 0 or position + length > len(metadata):
                return None
            topics.append(metadata[position : position + length].decode())
            position += length
    except (struct.error, UnicodeDecodeError):
        return None
    return frozenset(topics)


def consumer_assignment_partitions(assignment: bytes) -> frozenset[TopicPartition] | None:
    """The partitions in a Kafka consumer's assignment (ConsumerProtocolAssignment: int16
    version, then an int32-counted array of (int16-length topic name, int32-counted array
    of int32 partitions), then fields this does not need). None if the bytes do not
    parse: then nothing is known."""
    try:
        (version,) = _I16.unpack_from(assignment, 0)
        (topic_count,) = _I32.unpack_from(assignment, 2)
        if version < 0 or topic_count < 0 or topic_count * 6 > len(assignment) - 6:
            return None
        position = 6
        partitions: set[TopicPartition] = set()
        for _ in range(topic_count):
            (length,) = _I16.unpack_from(assignment, position)
            position += 2
            if length < 0 or position + length > len(assignment):
                return None
            topic = assignment[position : position + length].decode()
            position += length
            (count,) = _I32.unpack_from(assignment, position)
            position += 4
            if count < 0 or position + 4 * count > len(assignment):
                return None
            for _ in range(count):
                (partition,) = _I32.unpack_from(assignment, position)
                position += 4
                partitions.add(TopicPartition(topic, partition))
    except (struct.error, UnicodeDecodeError):
        return None
    return frozenset(partitions)
