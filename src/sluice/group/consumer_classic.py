"""Members of the classic protocol inside a consumer group (KIP-848's online migration),
and the upgrade of a classic group into a consumer group, as a deterministic state
machine on top of :class:`~sluice.group.consumer_heartbeat.ConsumerGroups`.

A consumer group may hold members that still speak JoinGroup, SyncGroup, Heartbeat and
LeaveGroup: those of the classic group it was converted from, and classic consumers that
join it later. The coordinator serves them from the consumer group, as Kafka does; the
server-side assignor chooses their partitions and their generation is their member
epoch::

    JoinGroup  ─▶ member created or updated from its ConsumerProtocol subscription
                  (topics, rack, owned partitions), the group epoch moved if the
                  assignment's inputs changed, the target computed, the member moved one
                  step towards it; answered with its member epoch as the generation,
                  its first protocol, no leader (it assigns nothing)
    SyncGroup  ─▶ its assigned partitions, as a ConsumerProtocol assignment; or
                  REBALANCE_IN_PROGRESS when the group moved past its epoch
    Heartbeat  ─▶ REBALANCE_IN_PROGRESS when it must join again: the group epoch moved,
                  it must revoke partitions, or partitions it waits for were released
    LeaveGroup ─▶ its records deleted, the group epoch moved

Every operation keeps the member's session alive (its own session timeout, from its
JoinGroup); a member told to join again must do so, and one answered JoinGroup must
send SyncGroup, within its rebalance timeout, or it is removed (Kafka's join and sync
timeouts). Records change the state only through ``ConsumerGroups.replay``, so a
coordinator that loads the partition finds the same members, classic metadata included
(tag 0 of the member metadata record). Bad subscription bytes are answered
INCONSISTENT_GROUP_PROTOCOL and change nothing.

The upgrade (:meth:`ClassicMembers.convert`) writes, for a classic group given as a
:class:`~sluice.group.migration.ClassicGroupImage`, the records of a consumer group at
the classic generation: every member at that epoch, STABLE, owning and targeted with
the partitions it was last assigned (a partition two members claim goes to the first).

Each operation that writes records notes how to undo them
(``ConsumerGroups.operation``), so a write that fails is reverted like a heartbeat's.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sluice.common.errors import ErrorCode
from sluice.group.api import (
    NO_MEMBER_ID,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeftMember,
    MemberIdentity,
    SyncGroupRequest,
    SyncGroupResponse,
)
from sluice.group.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    MetadataView,
)
from sluice.group.consumer_heartbeat import ConsumerGroups, _member_tombstones, _metadata_value
from sluice.group.consumer_heartbeat_api import (
    Change,
    ConsumerGroupsConfig,
    TimerChange,
    TimerKind,
    to_topic_partitions,
)
from sluice.group.consumer_reconciliation import MemberFenced
from sluice.group.consumer_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRecord,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from sluice.group.migration import (
    ClassicGroupImage,
    MalformedConsumerProtocol,
    decode_subscription,
    encode_assignment,
    subscription_version,
)
from sluice.group.state import CONSUMER_PROTOCOL_TYPE

log = logging.getLogger(__name__)


@dataclass
class ClassicJoinResult:
    response: JoinGroupResponse
    records: list[ConsumerGroupRecord] = field(default_factory=list)
    timers: list[TimerChange] = field(default_factory=list)
    change: Change | None = None
    """Undoes the records (``ConsumerGroups.revert``) if they are not written."""
    downgrade: ClassicGroupImage | None = None
    """The classic group that replaces the consumer group (deleted by ``records``): a
    static member took the place of the last member of the new protocol."""


@dataclass
class ClassicSyncResult:
    response: SyncGroupResponse
    timers: list[TimerChange] = field(default_factory=list)


@dataclass
class ClassicHeartbeatResult:
    error: ErrorCode
    timers: list[TimerChange] = field(default_factory=list)


@dataclass
class ClassicLeaveResult:
    members: list[LeftMember]
    records: list[ConsumerGroupRecord] = field(default_factory=list)
    timers: list[TimerChange] = field(default_factory=list)
    change: Change | None = None
    """Undoes the records (``ConsumerGroups.revert``) if they are not written."""


@dataclass
class ConversionResult:
    """The records of a consumer group converted from a classic group, its members'
    session timers, and how to undo it (the group is deleted again)."""

    records: list[ConsumerGroupRecord]
    timers: list[TimerChange]
    change: Change


class _Refused(Exception):
    def __init__(self, error: ErrorCode) -> None:
        super().__init__(error.name)
        self.error = error


def _partitions_by_id(
    assignment: Mapping[str, frozenset[int]], topics: MetadataView
) -> dict[uuid.UUID, frozenset[int]]:
    """Topic names → ids; topics that do not exist and partitions beyond a topic's
    count are left out (they cannot be assigned)."""
    result: dict[uuid.UUID, frozenset[int]] = {}
    for name, partitions in assignment.items():
        topic = topics.get(name)
        if topic is None:
            continue
        valid = frozenset(p for p in partitions if 0 <= p < topic.partition_count)
        if valid:
            result[topic.topic_id] = valid
    return result


class ClassicMembers:
    """The classic protocol's requests for the consumer groups of ``groups``. See the
    module docstring."""

    def __init__(
        self,
        groups: ConsumerGroups,
        config: ConsumerGroupsConfig,
        new_member_id: Callable[[], str],
    ) -> None:
        self._groups = groups
        self._config = config
        self._new_member_id = new_member_id

    # ================================================================ upgrade

    def convert(
        self, image: ClassicGroupImage, topics: MetadataView, now_ms: int
    ) -> ConversionResult:
        """The records of the consumer group that replaces the classic group of
        ``image`` (replayed here already), its members' session timers, and how to undo
        it should the records not be written (or the heartbeat be refused)."""
        assert self._groups.group(image.group_id) is None, (
            f"{image.group_id} is already a consumer group"
        )
        with self._groups.operation(image.group_id) as change:
            records, timers = self._convert(image, topics, now_ms)
        return ConversionResult(records, timers, change)

    def _convert(
        self, image: ClassicGroupImage, topics: MetadataView, now_ms: int
    ) -> tuple[list[ConsumerGroupRecord], list[TimerChange]]:
        groups = self._groups
        gid, epoch = image.group_id, image.generation
        records: list[ConsumerGroupRecord] = []
        taken: set[tuple[uuid.UUID, int]] = set()
        assignments: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
        for member in image.members:
            mine: dict[uuid.UUID, frozenset[int]] = {}
            for topic_id, partitions in _partitions_by_id(member.assignment, topics).items():
                free = frozenset(p for p in partitions if (topic_id, p) not in taken)
                taken.update((topic_id, p) for p in free)
                if free:
                    mine[topic_id] = free
            assignments[member.member_id] = mine
            metadata = _metadata_value(
                ConsumerMember(
                    member.member_id,
                    instance_id=member.instance_id,
                    rack_id=member.rack_id,
                    client_id=member.client_id,
                    client_host=member.client_host,
                    subscribed_topic_names=frozenset(member.subscribed_topic_names),
                    rebalance_timeout_ms=member.rebalance_timeout_ms,
                    classic=ClassicMemberMetadata(member.session_timeout_ms, member.protocols),
                )
            )
            key = ConsumerGroupMemberMetadataKey(gid, member.member_id)
            groups._write(records, ConsumerGroupRecord(key, metadata))
        groups._write(
            records,
            ConsumerGroupRecord(ConsumerGroupMetadataKey(gid), ConsumerGroupMetadataValue(epoch)),
        )
        for member_id, assigned in assignments.items():
            groups._write(
                records,
                ConsumerGroupRecord(
                    ConsumerGroupTargetAssignmentMemberKey(gid, member_id),
                    ConsumerGroupTargetAssignmentMemberValue(to_topic_partitions(assigned)),
                ),
            )
        groups._write(
            records,
            ConsumerGroupRecord(
                ConsumerGroupTargetAssignmentMetadataKey(gid),
                ConsumerGroupTargetAssignmentMetadataValue(epoch),
            ),
        )
        timers: list[TimerChange] = []
        for member in image.members:
            groups._write(
                records,
                ConsumerGroupRecord(
                    ConsumerGroupCurrentMemberAssignmentKey(gid, member.member_id),
                    ConsumerGroupCurrentMemberAssignmentValue(
                        epoch,
                        epoch,
                        MemberState.STABLE,
                        to_topic_partitions(assignments[member.member_id]),
                        (),
                    ),
                ),
            )
            deadline = now_ms + member.session_timeout_ms
            timers.append(groups._arm(TimerKind.SESSION, gid, member.member_id, deadline))
        log.info("classic group %s: upgraded to a consumer group at epoch %d", gid, epoch)
        return records, timers

    # ============================================================== JoinGroup

    def join(
        self, request: JoinGroupRequest, topics: MetadataView, now_ms: int
    ) -> ClassicJoinResult:
        """JoinGroup to a consumer group with members."""
        group = self._groups.group(request.group_id)
        assert group is not None and group.members, "only for a consumer group with members"
        records: list[ConsumerGroupRecord] = []
        with self._groups.operation(request.group_id) as change:
            try:
                result = self._join(group, request, topics, now_ms, records)
            except _Refused as refused:
                assert not records, "a refused JoinGroup writes nothing"
                response = JoinGroupResponse(refused.error, member_id=request.member_id)
                return ClassicJoinResult(response)
        result.change = change
        return result

    def _join(
        self,
        group: ConsumerGroup,
        request: JoinGroupRequest,
        topics: MetadataView,
        now_ms: int,
        records: list[ConsumerGroupRecord],
    ) -> ClassicJoinResult:
        groups = self._groups
        instance_id = request.group_instance_id
        unknown = request.member_id == NO_MEMBER_ID
        member_id = self._new_member_id() if unknown else request.member_id
        holder_id = None if instance_id is None else group.static_members.get(instance_id)
        if instance_id is not None and not unknown:
            if holder_id is None:
                raise _Refused(ErrorCode.unknown_member_id)
            if holder_id != member_id:
                raise _Refused(ErrorCode.fenced_instance_id)
        takes_seat = member_id not in group.members and holder_id is None
        if takes_seat and len(group.members) >= self._config.group_size_max:
            raise _Refused(ErrorCode.group_max_size_reached)
        if not self._supports(group, request):
            raise _Refused(ErrorCode.inconsistent_group_protocol)
        if request.require_known_member_id and unknown and instance_id is None:
            response = JoinGroupResponse(ErrorCode.member_id_required, member_id=member_id)
            return ClassicJoinResult(response)
        try:
            subscription = decode_subscription(request.protocols[0][1])
        except MalformedConsumerProtocol as error:
            log.info("consumer group %s: JoinGroup refused: %s", group.group_id, error)
            raise _Refused(ErrorCode.inconsistent_group_protocol) from None
        # Nothing is refused from here on.
        timers: list[TimerChange] = []
        downgrade = False
        if holder_id is not None and holder_id != member_id:
            replaced = group.members[holder_id]
            downgrade = groups.downgrades_with_replacement(group, replaced)
            timers += self._replace_static_member(group, replaced, member_id, records)
        member = group.members.get(member_id)
        is_new = member is None
        if member is None:
            member = ConsumerMember(member_id)
        updated = ConsumerMember(
            member_id,
            instance_id=instance_id if instance_id is not None else member.instance_id,
            rack_id=subscription.rack_id if subscription.rack_id is not None else member.rack_id,
            client_id=request.client_id,
            client_host=request.client_host,
            subscribed_topic_names=frozenset(subscription.topics),
            subscribed_topic_regex=member.subscribed_topic_regex,
            server_assignor=member.server_assignor,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            classic=ClassicMemberMetadata(request.session_timeout_ms, request.protocols),
        )
        # Compared before the member's record is replayed (it updates the member).
        bump = (
            is_new
            or updated.subscribed_topic_names != member.subscribed_topic_names
            or updated.rack_id != member.rack_id
        )
        new_value = _metadata_value(updated)
        if is_new or new_value != _metadata_value(member):
            key = ConsumerGroupMemberMetadataKey(group.group_id, member_id)
            groups._write(records, ConsumerGroupRecord(key, new_value))
        if is_new:
            groups._write(
                records,
                ConsumerGroupRecord(
                    ConsumerGroupCurrentMemberAssignmentKey(group.group_id, member_id),
                    ConsumerGroupCurrentMemberAssignmentValue(0, 0, MemberState.STABLE, (), ()),
                ),
            )
        groups._refresh_subscribed_topics(group, topics, bump, records)
        if group.group_epoch > group.assignment_epoch and not downgrade:
            groups._compute_target(group, topics, records)
        member = group.members[member_id]
        owned = _partitions_by_id(subscription.owned_partitions, topics)
        # A downgrade with a new subscription skips reconciling: the classic group
        # rebalances at once (Kafka's order).
        if not (downgrade and bump):
            try:
                timers += groups._reconcile(group, member, owned, now_ms, records)
            except MemberFenced:
                timers += groups._remove_member(group, member, records)
                response = JoinGroupResponse(ErrorCode.unknown_member_id, member_id=member_id)
                return ClassicJoinResult(response, records, timers)
        if downgrade:
            downgraded = self._downgrade(group, member_id, bump, records)
            if downgraded is not None:
                return downgraded
        timers.append(self._arm_session(group, member, now_ms))
        timers += groups._cancel(TimerKind.CLASSIC_JOIN, group.group_id, member_id)
        sync_deadline = now_ms + max(member.rebalance_timeout_ms, 0)
        timers.append(groups._arm(TimerKind.CLASSIC_SYNC, group.group_id, member_id, sync_deadline))
        assert member.classic is not None
        response = JoinGroupResponse(
            ErrorCode.none,
            generation_id=member.member_epoch,
            protocol_name=member.classic.protocol_name,
            leader="",  # nobody assigns: the coordinator does
            member_id=member_id,
        )
        return ClassicJoinResult(response, records, timers)

    def _downgrade(
        self,
        group: ConsumerGroup,
        member_id: str,
        rebalance: bool,
        records: list[ConsumerGroupRecord],
    ) -> ClassicJoinResult | None:
        """The static member ``member_id`` took the place of the last member of the new
        protocol: the group becomes a classic group of its members (their targets, at
        the group epoch), rebalancing if the member's subscription changed; the member
        is answered as a member of that group (Kafka's classicGroupJoinToConsumerGroup)."""
        member = group.members[member_id]
        assert member.classic is not None
        image = self._groups.classic_image(group, list(group.members.values()), rebalance=rebalance)
        if image is None:
            return None
        response = JoinGroupResponse(
            ErrorCode.none,
            generation_id=member.member_epoch,
            protocol_name=member.classic.protocol_name,
            leader="",
            member_id=member_id,
        )
        # Read before the tombstones are replayed (they reset the member in place).
        timers = self._groups._delete_for_downgrade(group, records)
        return ClassicJoinResult(response, records, timers, downgrade=image)

    @staticmethod
    def _supports(group: ConsumerGroup, request: JoinGroupRequest) -> bool:
        """Kafka's rule: protocol type ``consumer`` and a protocol every classic member
        of the group supports (any, when none is classic)."""
        if request.protocol_type != CONSUMER_PROTOCOL_TYPE or not request.protocols:
            return False
        names = {name for name, _ in request.protocols}
        for member in group.members.values():
            if member.classic is not None and member.member_id != request.member_id:
                names &= {name for name, _ in member.classic.protocols}
        return bool(names)

    def _replace_static_member(
        self,
        group: ConsumerGroup,
        old: ConsumerMember,
        new_id: str,
        records: list[ConsumerGroupRecord],
    ) -> list[TimerChange]:
        """A static member joins again under a new member id (its client restarted):
        the old id is fenced and the new one takes its partitions and target, at epoch
        0, as in Kafka."""
        groups = self._groups
        gid = group.group_id
        metadata = _metadata_value(old)
        target = group.target_assignment.get(old.member_id, {})
        assigned = dict(old.assigned_partitions)
        pending = dict(old.partitions_pending_revocation)
        timers: list[TimerChange] = []
        for kind in TimerKind:
            timers += groups._cancel(kind, gid, old.member_id)
        for record in _member_tombstones(gid, old.member_id):
            groups._write(records, record)
        groups._write(
            records, ConsumerGroupRecord(ConsumerGroupMemberMetadataKey(gid, new_id), metadata)
        )
        groups._write(
            records,
            ConsumerGroupRecord(
                ConsumerGroupTargetAssignmentMemberKey(gid, new_id),
                ConsumerGroupTargetAssignmentMemberValue(to_topic_partitions(target)),
            ),
        )
        groups._write(
            records,
            ConsumerGroupRecord(
                ConsumerGroupCurrentMemberAssignmentKey(gid, new_id),
                ConsumerGroupCurrentMemberAssignmentValue(
                    0, 0, old.state, to_topic_partitions(assigned), to_topic_partitions(pending)
                ),
            ),
        )
        return timers

    # ============================================================== SyncGroup

    def sync(self, request: SyncGroupRequest, now_ms: int) -> ClassicSyncResult:
        group = self._groups.group(request.group_id)
        assert group is not None, "only for a consumer group"
        try:
            member = self._classic_member(group, request.member_id, request.group_instance_id)
            if request.generation_id != member.member_epoch:
                raise _Refused(ErrorCode.illegal_generation)
            assert member.classic is not None
            if (
                request.protocol_type is not None
                and request.protocol_type != CONSUMER_PROTOCOL_TYPE
            ) or (
                request.protocol_name is not None
                and request.protocol_name != member.classic.protocol_name
            ):
                raise _Refused(ErrorCode.inconsistent_group_protocol)
        except _Refused as refused:
            return ClassicSyncResult(SyncGroupResponse(refused.error))
        if (
            group.group_epoch > member.member_epoch
            and member.state is not MemberState.UNREVOKED_PARTITIONS
        ):
            timers = self._arm_join_deadline(group, member, now_ms)
            return ClassicSyncResult(SyncGroupResponse(ErrorCode.rebalance_in_progress), timers)
        timers = [self._arm_session(group, member, now_ms)]
        timers += self._groups._cancel(TimerKind.CLASSIC_SYNC, group.group_id, member.member_id)
        names = {t.topic_id: t.name for t in group.subscribed_topics.values()}
        assignment = {
            names[topic_id]: partitions
            for topic_id, partitions in member.assigned_partitions.items()
            if topic_id in names
        }
        version = subscription_version(member.classic.protocols[0][1])
        return ClassicSyncResult(
            SyncGroupResponse(ErrorCode.none, encode_assignment(assignment, version)), timers
        )

    # ============================================================== Heartbeat

    def heartbeat(self, request: HeartbeatRequest, now_ms: int) -> ClassicHeartbeatResult:
        group = self._groups.group(request.group_id)
        assert group is not None, "only for a consumer group"
        try:
            member = self._classic_member(group, request.member_id, request.group_instance_id)
        except _Refused as refused:
            return ClassicHeartbeatResult(refused.error)
        if request.generation_id != member.member_epoch:
            return ClassicHeartbeatResult(ErrorCode.illegal_generation)
        timers = [self._arm_session(group, member, now_ms)]
        rejoin = (
            member.member_epoch < group.group_epoch
            or member.state is MemberState.UNREVOKED_PARTITIONS
            or (
                member.state is MemberState.UNRELEASED_PARTITIONS
                and not _waits_on_unreleased_partition(group, member)
            )
        )
        if not rejoin:
            return ClassicHeartbeatResult(ErrorCode.none, timers)
        timers += self._arm_join_deadline(group, member, now_ms)
        return ClassicHeartbeatResult(ErrorCode.rebalance_in_progress, timers)

    # ============================================================= LeaveGroup

    def leave(self, group_id: str, identities: tuple[MemberIdentity, ...]) -> ClassicLeaveResult:
        group = self._groups.group(group_id)
        assert group is not None, "only for a consumer group"
        with self._groups.operation(group_id) as change:
            result = self._leave(group, identities)
        result.change = change
        return result

    def _leave(
        self, group: ConsumerGroup, identities: tuple[MemberIdentity, ...]
    ) -> ClassicLeaveResult:
        groups = self._groups
        group_id = group.group_id
        result = ClassicLeaveResult([])
        for identity in identities:
            try:
                if identity.group_instance_id is None:
                    member = self._classic_member(group, identity.member_id, None)
                else:
                    holder_id = group.static_members.get(identity.group_instance_id)
                    if holder_id is None:
                        raise _Refused(ErrorCode.unknown_member_id)
                    if identity.member_id not in (NO_MEMBER_ID, holder_id):
                        raise _Refused(ErrorCode.fenced_instance_id)
                    member = self._classic_member(group, holder_id, None)
            except _Refused as refused:
                result.members.append(
                    LeftMember(identity.member_id, identity.group_instance_id, refused.error)
                )
                continue
            log.info("consumer group %s: classic member %s left", group_id, member.member_id)
            for kind in TimerKind:
                result.timers += groups._cancel(kind, group_id, member.member_id)
            for record in _member_tombstones(group_id, member.member_id):
                groups._write(result.records, record)
            result.members.append(
                LeftMember(member.member_id, identity.group_instance_id, ErrorCode.none)
            )
        if result.records:
            groups._bump(group, result.records)
        return result

    # ================================================================ helpers

    def _classic_member(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None
    ) -> ConsumerMember:
        """The member a classic request names (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID);
        one of the new protocol is unknown to the classic APIs, as in Kafka."""
        if instance_id is None:
            member = group.members.get(member_id)
        else:
            holder_id = group.static_members.get(instance_id)
            if holder_id is None:
                raise _Refused(ErrorCode.unknown_member_id)
            if holder_id != member_id:
                raise _Refused(ErrorCode.fenced_instance_id)
            member = group.members.get(holder_id)
        if member is None or member.classic is None:
            raise _Refused(ErrorCode.unknown_member_id)
        return member

    def _arm_join_deadline(
        self, group: ConsumerGroup, member: ConsumerMember, now_ms: int
    ) -> list[TimerChange]:
        """The member was told to join again: within its rebalance timeout, counted from
        the first time it was told (Kafka's join timeout)."""
        groups = self._groups
        if groups.has_timer(TimerKind.CLASSIC_JOIN, group.group_id, member.member_id):
            return []
        deadline = now_ms + max(member.rebalance_timeout_ms, 0)
        return [groups._arm(TimerKind.CLASSIC_JOIN, group.group_id, member.member_id, deadline)]

    def _arm_session(
        self, group: ConsumerGroup, member: ConsumerMember, now_ms: int
    ) -> TimerChange:
        deadline = now_ms + self._groups.session_timeout_ms(member)
        return self._groups._arm(TimerKind.SESSION, group.group_id, member.member_id, deadline)


def _waits_on_unreleased_partition(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Whether a partition of its target that it does not hold yet is still owned by
    another member (Kafka's ``waitingOnUnreleasedPartition``)."""
    target = group.target_assignment.get(member.member_id, {})
    for topic_id, partitions in target.items():
        for partition in partitions - member.assigned_partitions.get(topic_id, frozenset()):
            if group.owner_of(topic_id, partition) not in (None, member.member_id):
                return True
    return False
