"""ConsumerGroupHeartbeat (KIP-848) as a deterministic state machine: the consumer groups
of one ``__consumer_offsets`` partition.

Sans-IO, like the rest of the group coordinator: no clock, no randomness of its own
(new member ids come from an injected source), no log. A heartbeat goes in as plain
data with the metadata image's view of the topics and the time; out come the answer,
the records to write and the timers to arm or cancel::

    heartbeat(request, topics, now) ──▶ HeartbeatResult(response, records, timers)
    expire(timer, now) ───────────────▶ TimerResult(records, timers)
    replay(record) ───────────────────▶ (state changed; loading runs only this)

The state changes only through :meth:`ConsumerGroups.replay`: a heartbeat makes its
records and replays each at once, so loading the partition's records gives exactly the
state that wrote them. The caller writes the records, answers once they are committed,
and arms the timers (a timer that fires late, or after its member heartbeated again, is
ignored: each expiry checks the deadline it was armed for).

One heartbeat, in order: check the request (INVALID_REQUEST, UNSUPPORTED_ASSIGNOR,
INVALID_REGULAR_EXPRESSION), find or create the member (epoch 0 joins; static members
by instance id: UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID; UNKNOWN_MEMBER_ID;
FENCED_MEMBER_EPOCH unless the epoch is the member's or, after a lost answer, its
previous one with nothing owned beyond its assignment; GROUP_MAX_SIZE_REACHED), write
its metadata if it changed, resolve its regular expression to the topics its principal
may DESCRIBE (``describable_topics``), bump the group epoch when the assignment's inputs changed
(members, subscriptions, racks, assignors, the subscribed topics' partitions), compute
the target assignment when it is behind the group epoch, then move the member one step
towards its target (:mod:`~sluice.group.consumer_reconciliation`). See
:mod:`~sluice.group.consumer_group` for the model.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping

from sluice.common.errors import ErrorCode
from sluice.group.consumer_assignors import (
    ASSIGNORS,
    DEFAULT_ASSIGNOR,
    AssignmentSpecMember,
)
from sluice.group.consumer_group import (
    JOIN_MEMBER_EPOCH,
    LEAVE_MEMBER_EPOCH,
    LEAVE_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    MetadataView,
    TopicImage,
)
from sluice.group.consumer_heartbeat_api import (
    NO_REBALANCE_TIMEOUT,
    ArmTimer,
    CancelTimer,
    Change,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupsConfig,
    HeartbeatError,
    HeartbeatResult,
    TimerChange,
    TimerKey,
    TimerKind,
    TimerResult,
    from_topic_partitions,
    invalid_request_problem,
    to_topic_partitions,
)
from sluice.group.consumer_reconciliation import CurrentAssignment, MemberFenced, reconcile
from sluice.group.consumer_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRecord,
    ConsumerGroupRecordValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicMetadataEntry,
)
from sluice.group.consumer_regex import InvalidRegularExpression, check, matching_topics
from sluice.group.migration import ClassicGroupImage, ClassicMemberImage

log = logging.getLogger(__name__)

EXPIRY_RETRY_BACKOFF_MS = 500
"""A member's removal whose records were not written is tried again this long after
(Kafka retries a coordinator timer's failed operation after a backoff of 500 ms)."""

# ================================================================ the groups


class ConsumerGroups:
    """Every consumer group (new protocol) of one ``__consumer_offsets`` partition. See
    the module docstring."""

    def __init__(self, config: ConsumerGroupsConfig, new_member_id: Callable[[], str]) -> None:
        self._config = config
        self._new_member_id = new_member_id
        self._groups: dict[str, ConsumerGroup] = {}
        self._deadlines: dict[TimerKey, int] = {}
        self._change: Change | None = None
        """What the operation under way changed, to undo it (``revert``)."""

    # ============================================================ inspection

    def group(self, group_id: str) -> ConsumerGroup | None:
        """The group's state, for tests and diagnostics (do not modify it)."""
        return self._groups.get(group_id)

    def groups(self) -> list[ConsumerGroup]:
        return list(self._groups.values())

    # ============================================================ replay

    def replay(self, record: ConsumerGroupRecord) -> None:
        """Apply one record (a tombstone deletes what its key names)."""
        key, value = record.key, record.value
        group = self._groups.get(key.group_id)
        if isinstance(key, ConsumerGroupMetadataKey):
            if value is None:
                self._groups.pop(key.group_id, None)
                return
            assert isinstance(value, ConsumerGroupMetadataValue)
            self._group(key.group_id).group_epoch = value.epoch
            return
        if value is None and group is None:
            return
        group = self._group(key.group_id)
        if isinstance(key, ConsumerGroupPartitionMetadataKey):
            topics = value.topics if isinstance(value, ConsumerGroupPartitionMetadataValue) else ()
            group.subscribed_topics = {
                t.topic_name: TopicImage(
                    t.topic_id,
                    t.topic_name,
                    t.partition_count,
                    tuple(frozenset(racks) for racks in t.partition_racks),
                )
                for t in topics
            }
        elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
            if isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
                group.assignment_epoch = value.assignment_epoch
        elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
            if isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
                group.target_assignment[key.member_id] = from_topic_partitions(
                    value.topic_partitions
                )
            else:
                group.target_assignment.pop(key.member_id, None)
        elif isinstance(key, ConsumerGroupMemberMetadataKey):
            if isinstance(value, ConsumerGroupMemberMetadataValue):
                self._replay_member_metadata(group, key.member_id, value)
            else:
                group.remove_member(key.member_id)
        elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
            if isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
                member = group.members.setdefault(key.member_id, ConsumerMember(key.member_id))
                member.member_epoch = value.member_epoch
                member.previous_member_epoch = value.previous_member_epoch
                member.state = value.state
                group.set_current_assignment(
                    member,
                    from_topic_partitions(value.assigned_partitions),
                    from_topic_partitions(value.partitions_pending_revocation),
                )
            elif key.member_id in group.members:
                member = group.members[key.member_id]
                group.set_current_assignment(member, {}, {})
                member.member_epoch = member.previous_member_epoch = 0
                member.state = MemberState.STABLE

    def _group(self, group_id: str) -> ConsumerGroup:
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = ConsumerGroup(group_id)
        return group

    @staticmethod
    def _replay_member_metadata(
        group: ConsumerGroup, member_id: str, value: ConsumerGroupMemberMetadataValue
    ) -> None:
        member = group.members.setdefault(member_id, ConsumerMember(member_id))
        if member.instance_id is not None and member.instance_id != value.instance_id:
            group.static_members.pop(member.instance_id, None)
        member.instance_id = value.instance_id
        member.rack_id = value.rack_id
        member.client_id = value.client_id
        member.client_host = value.client_host
        member.subscribed_topic_names = frozenset(value.subscribed_topic_names)
        member.subscribed_topic_regex = value.subscribed_topic_regex
        member.rebalance_timeout_ms = value.rebalance_timeout_ms
        member.server_assignor = value.server_assignor
        member.classic = value.classic_member_metadata
        if value.instance_id is not None:
            group.static_members[value.instance_id] = member_id

    # ============================================================ deletion

    def delete_group_records(self, group_id: str) -> tuple[list[ConsumerGroupRecord], Change]:
        """The tombstones that delete the group (replayed here already), and how to undo
        that; DeleteGroups writes them once the group is empty."""
        with self.operation(group_id) as change:
            records: list[ConsumerGroupRecord] = []
            self._delete_records(group_id, records)
            return records, change

    def _delete_records(self, group_id: str, records: list[ConsumerGroupRecord]) -> None:
        """Write the tombstones of every record of the group (for the operation under way)."""
        group = self._groups.get(group_id)
        if group is None:
            return
        tombstones: list[ConsumerGroupRecord] = []
        for member_id in sorted(set(group.members) | set(group.target_assignment)):
            tombstones += _member_tombstones(group_id, member_id)
        tombstones += [
            ConsumerGroupRecord(ConsumerGroupTargetAssignmentMetadataKey(group_id), None),
            ConsumerGroupRecord(ConsumerGroupPartitionMetadataKey(group_id), None),
            ConsumerGroupRecord(ConsumerGroupMetadataKey(group_id), None),
        ]
        for record in tombstones:
            self._write(records, record)

    # ============================================================ undoing

    def _begin(self, group_id: str) -> Change:
        """Start noting what an operation on ``group_id`` changes."""
        assert self._change is None, "one operation at a time"
        self._change = Change(group_id, created_group=group_id not in self._groups)
        return self._change

    @contextlib.contextmanager
    def operation(self, group_id: str) -> Iterator[Change]:
        """Note what the operation run inside changes (every ``_write``, timer and
        resolution), to undo it with :meth:`revert` should its records not be written;
        the classic members' operations (:mod:`~sluice.group.consumer_classic`) use it."""
        change = self._begin(group_id)
        try:
            yield change
        finally:
            self._change = None

    def revert(self, change: Change, now_ms: int) -> list[TimerChange]:
        """Undo an operation whose records were not written; the timers to arm again.

        Kafka's coordinator reverts its state to the last committed offset when a write
        fails, so memory never runs ahead of the log; the caller reverts every change
        of the group made after this one first (newest first). A timer whose deadline
        passed meanwhile fires again after :data:`EXPIRY_RETRY_BACKOFF_MS` (Kafka
        retries a timer's operation that failed)."""
        for record in reversed(change.inverse):
            self.replay(record)
        group = self._groups.get(change.group_id)
        for member_id, resolution in reversed(change.resolutions):
            member = None if group is None else group.members.get(member_id)
            if member is not None:
                member.resolved_regex = resolution
        if change.created_group:
            group = self._groups.pop(change.group_id, None)
            assert group is None or not group.members, "a created group reverts to empty"
        timers: list[TimerChange] = []
        restored: dict[TimerKey, int | None] = {}
        for key, previous in reversed(change.deadlines):
            restored[key] = previous
        for key, previous in restored.items():
            if previous is None:
                self._deadlines.pop(key, None)
                continue
            deadline = previous if previous > now_ms else now_ms + EXPIRY_RETRY_BACKOFF_MS
            self._deadlines[key] = deadline
            timers.append(ArmTimer(key, deadline))
        return timers

    def _note(self, record: ConsumerGroupRecord) -> None:
        """Keep the record that restores ``record.key`` as it is now (before ``record``
        is replayed)."""
        if self._change is not None:
            self._change.inverse.append(self._current_record(record))

    def _current_record(self, written: ConsumerGroupRecord) -> ConsumerGroupRecord:
        """The record whose replay gives ``written.key`` its current state (a tombstone
        for what does not exist)."""
        key = written.key
        group = self._groups.get(key.group_id)
        value: ConsumerGroupRecordValue | None = None
        if group is None:
            pass
        elif isinstance(key, ConsumerGroupMetadataKey):
            value = ConsumerGroupMetadataValue(group.group_epoch)
        elif isinstance(key, ConsumerGroupPartitionMetadataKey):
            value = _partition_metadata_value(group.subscribed_topics)
        elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
            value = ConsumerGroupTargetAssignmentMetadataValue(group.assignment_epoch)
        elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
            target = group.target_assignment.get(key.member_id)
            if target is not None:
                value = ConsumerGroupTargetAssignmentMemberValue(to_topic_partitions(target))
        elif isinstance(key, ConsumerGroupMemberMetadataKey):
            member = group.members.get(key.member_id)
            if member is not None:
                value = _metadata_value(member)
        elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
            member = group.members.get(key.member_id)
            if member is not None:
                value = ConsumerGroupCurrentMemberAssignmentValue(
                    member.member_epoch,
                    member.previous_member_epoch,
                    member.state,
                    to_topic_partitions(member.assigned_partitions),
                    to_topic_partitions(member.partitions_pending_revocation),
                )
        return ConsumerGroupRecord(key, value)

    def _set_deadline(self, key: TimerKey, deadline_ms: int | None) -> int | None:
        """Set (None: clear) a timer's deadline, noting the one it replaces; returns it."""
        previous = self._deadlines.get(key)
        if self._change is not None:
            self._change.deadlines.append((key, previous))
        if deadline_ms is None:
            self._deadlines.pop(key, None)
        else:
            self._deadlines[key] = deadline_ms
        return previous

    # ============================================================ timers

    def expire(self, key: TimerKey, now_ms: int) -> TimerResult:
        """A timer fired: remove its member if the deadline it was armed for has passed
        (a member that heartbeated or revoked since has a later deadline, or none)."""
        deadline = self._deadlines.get(key)
        if deadline is None or deadline > now_ms:
            return TimerResult()
        group = self._groups.get(key.group_id)
        member = None if group is None else group.members.get(key.member_id)
        if group is None or member is None:
            self._deadlines.pop(key, None)
            return TimerResult()
        if key.kind is TimerKind.REBALANCE and member.state is not MemberState.UNREVOKED_PARTITIONS:
            self._deadlines.pop(key, None)
            return TimerResult()
        change = self._begin(key.group_id)
        try:
            records: list[ConsumerGroupRecord] = []
            image = self.downgrade_image(group, member)
            if image is not None:
                timers = self._delete_for_downgrade(group, records)
            else:
                timers = self._remove_member(group, member, records)
        finally:
            self._change = None
        return TimerResult(records, timers, change, downgrade=image)

    def start_timers(self, now_ms: int) -> list[TimerChange]:
        """Once the partition is loaded: every member's session starts now, and members
        that must revoke partitions get their rebalance timeout from now (Kafka's rule
        when a coordinator takes over). This first session is a classic member's own
        session timeout, else the broker's ``group.consumer.session.timeout.ms``: a
        group's override arrives with its members' next heartbeats."""
        timers: list[TimerChange] = []
        for group in self._groups.values():
            for member_id, member in group.members.items():
                deadline = now_ms + self.session_timeout_ms(member)
                timers.append(self._arm(TimerKind.SESSION, group.group_id, member_id, deadline))
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    deadline = now_ms + max(member.rebalance_timeout_ms, 0)
                    kind = TimerKind.REBALANCE
                    timers.append(self._arm(kind, group.group_id, member_id, deadline))
        return timers

    def session_timeout_ms(self, member: ConsumerMember) -> int:
        """A classic member's own session timeout (from its JoinGroup), else the group's."""
        if member.classic is not None:
            return member.classic.session_timeout_ms
        return self._config.session_timeout_ms

    def _arm(self, kind: TimerKind, group_id: str, member_id: str, deadline_ms: int) -> ArmTimer:
        key = TimerKey(kind, group_id, member_id)
        self._set_deadline(key, deadline_ms)
        return ArmTimer(key, deadline_ms)

    def has_timer(self, kind: TimerKind, group_id: str, member_id: str) -> bool:
        return TimerKey(kind, group_id, member_id) in self._deadlines

    def _cancel(self, kind: TimerKind, group_id: str, member_id: str) -> list[TimerChange]:
        key = TimerKey(kind, group_id, member_id)
        if key not in self._deadlines:
            return []
        self._set_deadline(key, None)
        return [CancelTimer(key)]

    # ============================================================ the heartbeat

    def heartbeat(
        self, request: ConsumerGroupHeartbeatRequest, topics: MetadataView, now_ms: int
    ) -> HeartbeatResult:
        """Answer one heartbeat (see the module docstring)."""
        records: list[ConsumerGroupRecord] = []
        change = self._begin(request.group_id)
        try:
            result = self._heartbeat(request, topics, now_ms, records)
        except HeartbeatError as error:
            assert not records, "a refused heartbeat writes nothing"
            return HeartbeatResult(ConsumerGroupHeartbeatResponse(error.error, error.message))
        finally:
            self._change = None
        result.change = change
        return result

    def _write(self, records: list[ConsumerGroupRecord], record: ConsumerGroupRecord) -> None:
        self._note(record)
        records.append(record)
        self.replay(record)

    def _heartbeat(
        self,
        request: ConsumerGroupHeartbeatRequest,
        topics: MetadataView,
        now_ms: int,
        records: list[ConsumerGroupRecord],
    ) -> HeartbeatResult:
        problem = invalid_request_problem(request)
        if problem is not None:
            raise HeartbeatError(ErrorCode.invalid_request, problem)
        if request.server_assignor is not None and request.server_assignor not in (
            self._config.assignors
        ):
            raise HeartbeatError(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {request.server_assignor} is not supported. Supported "
                f"assignors: {', '.join(self._config.assignors)}.",
            )
        if request.subscribed_topic_regex:
            try:
                check(request.subscribed_topic_regex)
            except InvalidRegularExpression as error:
                raise HeartbeatError(ErrorCode.invalid_regular_expression, str(error)) from None
        group = self._groups.get(request.group_id)
        epoch = request.member_epoch
        if epoch in (LEAVE_MEMBER_EPOCH, LEAVE_STATIC_MEMBER_EPOCH):
            return self._leave(group, request, records)
        if group is None and epoch != JOIN_MEMBER_EPOCH:
            raise HeartbeatError(
                ErrorCode.unknown_member_id,
                f"Group {request.group_id} has no member {request.member_id}.",
            )
        timers: list[TimerChange] = []
        member, is_new = self._member_for(group, request, records)
        if not is_new:
            self._check_epoch(member, request)
        # Nothing is refused from here on.
        group = self._group(request.group_id)
        bump = self._update_member(group, member, request, is_new, records)
        member = group.members[member.member_id]
        bump |= self._resolve_regex(group, member, request, topics)
        self._refresh_subscribed_topics(group, topics, bump, records)
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group, topics, records)
        assigned_before = dict(member.assigned_partitions)
        owned = (
            None
            if request.owned_partitions is None
            else from_topic_partitions(request.owned_partitions)
        )
        if epoch == JOIN_MEMBER_EPOCH:
            owned = {}
        try:
            timers += self._reconcile(group, member, owned, now_ms, records)
        except MemberFenced as fenced:
            timers += self._remove_member(group, member, records)
            answer = ConsumerGroupHeartbeatResponse(ErrorCode.fenced_member_epoch, str(fenced))
            return HeartbeatResult(answer, records, timers)
        timers.append(
            self._arm(
                TimerKind.SESSION,
                group.group_id,
                member.member_id,
                now_ms + self._config.session_timeout_for(request),
            )
        )
        full_request = (
            request.rebalance_timeout_ms != NO_REBALANCE_TIMEOUT
            and (
                request.subscribed_topic_names is not None
                or request.subscribed_topic_regex is not None
            )
            and request.owned_partitions is not None
        )
        # Against the epoch the member sent: one that retries after a lost answer
        # (its previous epoch) is sent the assignment it missed.
        changed = (
            member.member_epoch != request.member_epoch
            or member.assigned_partitions != assigned_before
        )
        response = ConsumerGroupHeartbeatResponse(
            ErrorCode.none,
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self._config.heartbeat_interval_for(request),
            assignment=(
                to_topic_partitions(member.assigned_partitions)
                if changed or full_request or is_new
                else None
            ),
        )
        return HeartbeatResult(response, records, timers)

    # ------------------------------------------------------------ members

    def _member_for(
        self,
        group: ConsumerGroup | None,
        request: ConsumerGroupHeartbeatRequest,
        records: list[ConsumerGroupRecord],
    ) -> tuple[ConsumerMember, bool]:
        """The member the heartbeat is from, created when it joins (then True)."""
        group_id, instance_id = request.group_id, request.instance_id
        joining = request.member_epoch == JOIN_MEMBER_EPOCH
        if group is not None and instance_id is not None:
            holder_id = group.static_members.get(instance_id)
            holder = None if holder_id is None else group.members.get(holder_id)
            if holder is not None and joining:
                if holder.member_epoch != LEAVE_STATIC_MEMBER_EPOCH:
                    raise HeartbeatError(
                        ErrorCode.unreleased_instance_id,
                        f"Static member {holder.member_id} with instance id {instance_id} "
                        "is present in the group.",
                    )
                return self._replace_static_member(group, holder, request, records), False
            if not joining:
                if holder is None:
                    raise HeartbeatError(
                        ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown."
                    )
                if holder.member_id != request.member_id:
                    raise HeartbeatError(
                        ErrorCode.fenced_instance_id,
                        f"Static member {request.member_id} with instance id {instance_id} "
                        f"was fenced by member {holder.member_id}.",
                    )
                return holder, False
        member = None if group is None else group.members.get(request.member_id)
        if member is not None:
            return member, False
        if not joining:
            raise HeartbeatError(
                ErrorCode.unknown_member_id,
                f"Member {request.member_id} is not a member of group {group_id}.",
            )
        if group is not None and len(group.members) >= self._config.group_size_max:
            raise HeartbeatError(
                ErrorCode.group_max_size_reached,
                f"The consumer group has reached its maximum capacity of "
                f"{self._config.group_size_max} members.",
            )
        return ConsumerMember(request.member_id or self._new_member_id()), True

    def _replace_static_member(
        self,
        group: ConsumerGroup,
        old: ConsumerMember,
        request: ConsumerGroupHeartbeatRequest,
        records: list[ConsumerGroupRecord],
    ) -> ConsumerMember:
        """A static member back after a temporary leave, under a new member id: it takes
        the old member's place, partitions and target, without a rebalance."""
        new_id = request.member_id or self._new_member_id()
        assigned, pending = dict(old.assigned_partitions), dict(old.partitions_pending_revocation)
        epoch, state = old.previous_member_epoch, old.state
        target = group.target_assignment.get(old.member_id, {})
        metadata = _metadata_value(old)
        for record in _member_tombstones(group.group_id, old.member_id):
            self._write(records, record)
        self._set_deadline(TimerKey(TimerKind.SESSION, group.group_id, old.member_id), None)
        self._set_deadline(TimerKey(TimerKind.REBALANCE, group.group_id, old.member_id), None)
        gid = group.group_id
        self._write(
            records, ConsumerGroupRecord(ConsumerGroupMemberMetadataKey(gid, new_id), metadata)
        )
        self._write(
            records,
            ConsumerGroupRecord(
                ConsumerGroupTargetAssignmentMemberKey(gid, new_id),
                ConsumerGroupTargetAssignmentMemberValue(to_topic_partitions(target)),
            ),
        )
        self._write(
            records,
            ConsumerGroupRecord(
                ConsumerGroupCurrentMemberAssignmentKey(gid, new_id),
                ConsumerGroupCurrentMemberAssignmentValue(
                    epoch, epoch, state, to_topic_partitions(assigned), to_topic_partitions(pending)
                ),
            ),
        )
        return group.members[new_id]

    def _check_epoch(self, member: ConsumerMember, request: ConsumerGroupHeartbeatRequest) -> None:
        """FENCED_MEMBER_EPOCH unless the member sent its epoch, or (its last answer lost)
        its previous epoch while owning nothing beyond its assignment. Epoch 0 rejoins."""
        epoch = request.member_epoch
        if epoch in (JOIN_MEMBER_EPOCH, member.member_epoch):
            return
        if epoch < member.member_epoch and epoch == member.previous_member_epoch:
            owned = from_topic_partitions(request.owned_partitions or ())
            if request.owned_partitions is not None and all(
                partitions <= member.assigned_partitions.get(topic_id, frozenset())
                for topic_id, partitions in owned.items()
            ):
                return
        raise HeartbeatError(
            ErrorCode.fenced_member_epoch,
            f"The consumer group member has a member epoch ({epoch}) different from the "
            f"one known by the group coordinator ({member.member_epoch}).",
        )

    def _resolve_regex(
        self,
        group: ConsumerGroup,
        member: ConsumerMember,
        request: ConsumerGroupHeartbeatRequest,
        topics: MetadataView,
    ) -> bool:
        """Resolve the member's regular expression against the topics, keeping those it
        may DESCRIBE (Kafka resolves a pattern on behalf of the member's principal);
        whether the member's topics changed (the group epoch must then move)."""
        before = _member_topics(member, topics, group)
        regex = member.subscribed_topic_regex
        resolved: tuple[str, frozenset[str]] | None = None
        if regex:
            candidates = (name for name, topic in topics.items() if not topic.is_internal)
            matched = frozenset(matching_topics(regex, candidates))
            if request.describable_topics is not None and matched:
                matched = frozenset(request.describable_topics(matched)) & matched
            resolved = (regex, matched)
        if resolved != member.resolved_regex:
            if self._change is not None:
                self._change.resolutions.append((member.member_id, member.resolved_regex))
            member.resolved_regex = resolved
        return _member_topics(member, topics, group) != before

    def _update_member(
        self,
        group: ConsumerGroup,
        member: ConsumerMember,
        request: ConsumerGroupHeartbeatRequest,
        is_new: bool,
        records: list[ConsumerGroupRecord],
    ) -> bool:
        """Write the member's metadata if it changed; whether the group epoch must move."""
        updated = ConsumerMember(
            member.member_id,
            instance_id=request.instance_id
            if request.instance_id is not None
            else member.instance_id,
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            client_id=request.client_id,
            client_host=request.client_host,
            subscribed_topic_names=(
                frozenset(request.subscribed_topic_names)
                if request.subscribed_topic_names is not None
                else member.subscribed_topic_names
            ),
            subscribed_topic_regex=(
                (request.subscribed_topic_regex or None)
                if request.subscribed_topic_regex is not None
                else member.subscribed_topic_regex
            ),
            server_assignor=(
                request.server_assignor
                if request.server_assignor is not None
                else member.server_assignor
            ),
            rebalance_timeout_ms=(
                request.rebalance_timeout_ms
                if request.rebalance_timeout_ms != NO_REBALANCE_TIMEOUT
                else member.rebalance_timeout_ms
            ),
        )
        # Compared before the record is replayed into ``member``.
        changed = (
            updated.subscribed_topic_names != member.subscribed_topic_names
            or updated.subscribed_topic_regex != member.subscribed_topic_regex
            or updated.server_assignor != member.server_assignor
            or updated.rack_id != member.rack_id
        )
        new_value = _metadata_value(updated)
        if is_new or new_value != _metadata_value(member):
            self._write(
                records,
                ConsumerGroupRecord(
                    ConsumerGroupMemberMetadataKey(group.group_id, member.member_id), new_value
                ),
            )
        if is_new:
            self._write(
                records,
                ConsumerGroupRecord(
                    ConsumerGroupCurrentMemberAssignmentKey(group.group_id, member.member_id),
                    ConsumerGroupCurrentMemberAssignmentValue(0, 0, MemberState.STABLE, (), ()),
                ),
            )
            return True
        return changed

    # ------------------------------------------------------------ the group epoch

    def _refresh_subscribed_topics(
        self,
        group: ConsumerGroup,
        topics: MetadataView,
        bump: bool,
        records: list[ConsumerGroupRecord],
    ) -> None:
        """Write the subscribed topics if they changed, and the next group epoch if
        anything the assignment depends on did."""
        subscribed = _subscribed_topics(group, topics)
        if subscribed != group.subscribed_topics:
            self._write(
                records,
                ConsumerGroupRecord(
                    ConsumerGroupPartitionMetadataKey(group.group_id),
                    _partition_metadata_value(subscribed),
                ),
            )
            bump = True
        if bump:
            self._bump(group, records)

    def _bump(self, group: ConsumerGroup, records: list[ConsumerGroupRecord]) -> None:
        self._write(
            records,
            ConsumerGroupRecord(
                ConsumerGroupMetadataKey(group.group_id),
                ConsumerGroupMetadataValue(group.group_epoch + 1),
            ),
        )

    def _compute_target(
        self, group: ConsumerGroup, topics: MetadataView, records: list[ConsumerGroupRecord]
    ) -> None:
        """The target assignment for the group epoch; records for the members whose
        target changed, then the assignment epoch."""
        by_id = {t.topic_id: t for t in group.subscribed_topics.values()}
        spec = {
            m.member_id: AssignmentSpecMember(
                frozenset(
                    t.topic_id for t in _member_topics(m, topics, group) if t.topic_id in by_id
                ),
                m.rack_id,
            )
            for m in group.members.values()
        }
        assignor = ASSIGNORS[self.assignor_name(group)]
        target = assignor(spec, by_id, group.target_assignment)
        for member_id in sorted(target):
            if target[member_id] != group.target_assignment.get(member_id):
                self._write(
                    records,
                    ConsumerGroupRecord(
                        ConsumerGroupTargetAssignmentMemberKey(group.group_id, member_id),
                        ConsumerGroupTargetAssignmentMemberValue(
                            to_topic_partitions(target[member_id])
                        ),
                    ),
                )
        self._write(
            records,
            ConsumerGroupRecord(
                ConsumerGroupTargetAssignmentMetadataKey(group.group_id),
                ConsumerGroupTargetAssignmentMetadataValue(group.group_epoch),
            ),
        )

    def assignor_name(self, group: ConsumerGroup) -> str:
        """The assignor most members name (ties: the one first in the configured
        order), else the default (Kafka's rule)."""
        counts = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
        if not counts:
            return self._config.assignors[0] if self._config.assignors else DEFAULT_ASSIGNOR
        most = max(counts.values())
        return next(name for name in self._config.assignors if counts.get(name) == most)

    # ------------------------------------------------------------ reconciliation

    def _reconcile(
        self,
        group: ConsumerGroup,
        member: ConsumerMember,
        owned: Assignment | None,
        now_ms: int,
        records: list[ConsumerGroupRecord],
    ) -> list[TimerChange]:
        current = CurrentAssignment(
            member.member_epoch,
            member.previous_member_epoch,
            member.state,
            dict(member.assigned_partitions),
            dict(member.partitions_pending_revocation),
        )
        member_id = member.member_id

        def owned_by_another(topic_id: uuid.UUID, partition: int) -> bool:
            return group.owner_of(topic_id, partition) not in (None, member_id)

        target = group.target_assignment.get(member_id, {})
        updated = reconcile(current, group.assignment_epoch, target, owned, owned_by_another)
        timers: list[TimerChange] = []
        if updated != current:
            self._write(
                records,
                ConsumerGroupRecord(
                    ConsumerGroupCurrentMemberAssignmentKey(group.group_id, member_id),
                    ConsumerGroupCurrentMemberAssignmentValue(
                        updated.member_epoch,
                        updated.previous_member_epoch,
                        updated.state,
                        to_topic_partitions(updated.assigned),
                        to_topic_partitions(updated.pending_revocation),
                    ),
                ),
            )
        revoking = member.state is MemberState.UNREVOKED_PARTITIONS
        rebalance_key = TimerKey(TimerKind.REBALANCE, group.group_id, member_id)
        if revoking and rebalance_key not in self._deadlines:
            deadline = now_ms + max(member.rebalance_timeout_ms, 0)
            timers.append(self._arm(TimerKind.REBALANCE, group.group_id, member_id, deadline))
        elif not revoking:
            timers += self._cancel(TimerKind.REBALANCE, group.group_id, member_id)
        return timers

    # ------------------------------------------------------------ leaving

    def _leave(
        self,
        group: ConsumerGroup | None,
        request: ConsumerGroupHeartbeatRequest,
        records: list[ConsumerGroupRecord],
    ) -> HeartbeatResult:
        epoch = request.member_epoch
        if group is None:
            raise HeartbeatError(
                ErrorCode.unknown_member_id, f"Group {request.group_id} not found."
            )
        if request.instance_id is not None:
            member_id = group.static_members.get(request.instance_id)
            if member_id is None:
                raise HeartbeatError(
                    ErrorCode.unknown_member_id, f"Instance id {request.instance_id} is unknown."
                )
            if member_id != request.member_id:
                raise HeartbeatError(
                    ErrorCode.fenced_instance_id,
                    f"Static member {request.member_id} with instance id "
                    f"{request.instance_id} was fenced by member {member_id}.",
                )
        member = group.members.get(request.member_id)
        if member is None:
            raise HeartbeatError(
                ErrorCode.unknown_member_id,
                f"Member {request.member_id} is not a member of group {group.group_id}.",
            )
        timers: list[TimerChange] = []
        if epoch == LEAVE_STATIC_MEMBER_EPOCH:
            # Kept, with its partitions, until it comes back or its session ends.
            previous = (
                member.member_epoch
                if member.member_epoch != LEAVE_STATIC_MEMBER_EPOCH
                else member.previous_member_epoch
            )
            self._write(
                records,
                ConsumerGroupRecord(
                    ConsumerGroupCurrentMemberAssignmentKey(group.group_id, member.member_id),
                    ConsumerGroupCurrentMemberAssignmentValue(
                        LEAVE_STATIC_MEMBER_EPOCH,
                        previous,
                        member.state,
                        to_topic_partitions(member.assigned_partitions),
                        to_topic_partitions(member.partitions_pending_revocation),
                    ),
                ),
            )
            timers += self._cancel(TimerKind.REBALANCE, group.group_id, member.member_id)
        response = ConsumerGroupHeartbeatResponse(
            ErrorCode.none, member_id=member.member_id, member_epoch=epoch
        )
        if epoch == LEAVE_STATIC_MEMBER_EPOCH:
            return HeartbeatResult(response, records, timers)
        image = self.downgrade_image(group, member)
        if image is not None:
            timers += self._delete_for_downgrade(group, records)
            return HeartbeatResult(response, records, timers, downgrade=image)
        timers += self._remove_member(group, member, records)
        return HeartbeatResult(response, records, timers)

    # ------------------------------------------------------------ downgrade

    def downgrade_image(
        self, group: ConsumerGroup, leaving: ConsumerMember
    ) -> ClassicGroupImage | None:
        """The classic group this one becomes when ``leaving`` goes, or None (Kafka's
        rules: the leaving member is the last of the new protocol, others remain, the
        policy allows downgrades, and they fit ``group.max.size``). Each member takes its
        target assignment; the generation is the group epoch."""
        others = [m for m in group.members.values() if m.member_id != leaving.member_id]
        if leaving.classic is not None or not others:
            return None
        if not all(m.classic is not None for m in others):
            return None
        if not self._config.migration_policy.downgrades:
            log.info("consumer group %s: not downgraded: the policy forbids it", group.group_id)
            return None
        if len(others) > self._config.classic_group_size_max:
            log.info("consumer group %s: not downgraded: too many members", group.group_id)
            return None
        return self.classic_image(group, others)

    def downgrades_with_replacement(self, group: ConsumerGroup, replaced: ConsumerMember) -> bool:
        """Whether a static classic member taking ``replaced``'s place downgrades the
        group (Kafka's validateOnlineDowngradeWithReplacedMember): ``replaced`` is the
        last member of the new protocol, the policy allows downgrades, and the group
        fits ``group.max.size``."""
        others = [m for m in group.members.values() if m.member_id != replaced.member_id]
        if replaced.classic is not None or not all(m.classic is not None for m in others):
            return False
        if not self._config.migration_policy.downgrades:
            log.info("consumer group %s: not downgraded: the policy forbids it", group.group_id)
            return False
        if len(group.members) > self._config.classic_group_size_max:
            log.info("consumer group %s: not downgraded: too many members", group.group_id)
            return False
        return True

    def classic_image(
        self, group: ConsumerGroup, members: list[ConsumerMember], *, rebalance: bool = True
    ) -> ClassicGroupImage | None:
        """The classic group of ``members`` (all of the classic protocol), each with its
        target assignment, at the group epoch."""
        common = set.intersection(
            *({name for name, _ in m.classic.protocols} for m in members if m.classic is not None)
        )
        if not common:
            return None  # (cannot happen: JoinGroup admits only a protocol in common)
        names = {t.topic_id: t.name for t in group.subscribed_topics.values()}
        images = []
        for member in members:
            assert member.classic is not None
            target = group.target_assignment.get(member.member_id, {})
            images.append(
                ClassicMemberImage(
                    member_id=member.member_id,
                    instance_id=member.instance_id,
                    client_id=member.client_id,
                    client_host=member.client_host,
                    rebalance_timeout_ms=member.rebalance_timeout_ms,
                    session_timeout_ms=member.classic.session_timeout_ms,
                    protocols=member.classic.protocols,
                    subscribed_topic_names=tuple(sorted(member.subscribed_topic_names)),
                    rack_id=member.rack_id,
                    assignment={
                        names[topic_id]: partitions
                        for topic_id, partitions in target.items()
                        if topic_id in names
                    },
                )
            )
        return ClassicGroupImage(group.group_id, group.group_epoch, tuple(images), rebalance)

    def _delete_for_downgrade(
        self, group: ConsumerGroup, records: list[ConsumerGroupRecord]
    ) -> list[TimerChange]:
        """Every timer of the group cancelled and its tombstones written: a classic
        group takes the id."""
        timers: list[TimerChange] = []
        for member_id in group.members:
            for kind in TimerKind:
                timers += self._cancel(kind, group.group_id, member_id)
        log.info("consumer group %s: downgraded to a classic group", group.group_id)
        self._delete_records(group.group_id, records)
        return timers

    def _remove_member(
        self, group: ConsumerGroup, member: ConsumerMember, records: list[ConsumerGroupRecord]
    ) -> list[TimerChange]:
        """The member's tombstones and the next group epoch; its timers cancelled."""
        for record in _member_tombstones(group.group_id, member.member_id):
            self._write(records, record)
        self._bump(group, records)
        timers: list[TimerChange] = []
        for kind in TimerKind:
            timers += self._cancel(kind, group.group_id, member.member_id)
        return timers


def _member_tombstones(group_id: str, member_id: str) -> list[ConsumerGroupRecord]:
    """A member leaves: current assignment, target assignment, metadata (Kafka's order)."""
    return [
        ConsumerGroupRecord(ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id), None),
        ConsumerGroupRecord(ConsumerGroupTargetAssignmentMemberKey(group_id, member_id), None),
        ConsumerGroupRecord(ConsumerGroupMemberMetadataKey(group_id, member_id), None),
    ]


def _partition_metadata_value(
    subscribed: Mapping[str, TopicImage],
) -> ConsumerGroupPartitionMetadataValue:
    return ConsumerGroupPartitionMetadataValue(
        tuple(
            TopicMetadataEntry(
                t.topic_id,
                t.name,
                t.partition_count,
                tuple(tuple(sorted(racks)) for racks in t.partition_racks),
            )
            for t in subscribed.values()
        )
    )


def _metadata_value(member: ConsumerMember) -> ConsumerGroupMemberMetadataValue:
    return ConsumerGroupMemberMetadataValue(
        instance_id=member.instance_id,
        rack_id=member.rack_id,
        client_id=member.client_id,
        client_host=member.client_host,
        subscribed_topic_names=tuple(sorted(member.subscribed_topic_names)),
        subscribed_topic_regex=member.subscribed_topic_regex,
        rebalance_timeout_ms=member.rebalance_timeout_ms,
        server_assignor=member.server_assignor,
        classic_member_metadata=member.classic,
    )


def _member_topics(
    member: ConsumerMember, topics: Mapping[str, TopicImage], group: ConsumerGroup
) -> list[TopicImage]:
    """The topics of ``topics`` the member subscribes to: by name, and those its regular
    expression matched that it may describe, as resolved at its last heartbeat. Before
    its first heartbeat here (the group was loaded from the log), only the topics it
    owns or is assigned that the pattern matches: they were resolved for it before,
    and no other member's rights widen what it gets."""
    names = set(member.subscribed_topic_names)
    regex = member.subscribed_topic_regex
    if regex:
        resolved = member.resolved_regex
        if resolved is not None and resolved[0] == regex:
            names |= resolved[1]
        else:
            held = {
                *member.assigned_partitions,
                *member.partitions_pending_revocation,
                *group.target_assignment.get(member.member_id, {}),
            }
            candidates = (t.name for t in group.subscribed_topics.values() if t.topic_id in held)
            names |= matching_topics(regex, candidates)
    return [topics[name] for name in sorted(names) if name in topics]


def _subscribed_topics(group: ConsumerGroup, topics: MetadataView) -> dict[str, TopicImage]:
    """The topics that exist and some member subscribes to (name → topic)."""
    result: dict[str, TopicImage] = {}
    for member in group.members.values():
        for topic in _member_topics(member, topics, group):
            result[topic.name] = topic
    return dict(sorted(result.items()))
