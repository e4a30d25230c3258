"""Consumer groups of the new protocol (KIP-848) hosted by the group coordinator shard of
one ``__consumer_offsets`` partition.

:class:`~sluice.group.coordinator.GroupCoordinator` owns one :class:`HostedConsumerGroups`
and hands it its records, its ConsumerGroupHeartbeats and its clock. This module turns
the pure state machine (:class:`~sluice.group.consumer_heartbeat.ConsumerGroups`) into the
shard's effects::

    load:      replay(key, value) ─▶ decode (consumer_records_codec) ─▶ ConsumerGroups.replay
    heartbeat(now, token, request, topics)
               ─▶ ConsumerGroups.heartbeat ─▶ records? ─ no ─▶ [Reply(token, answer)]
                                                 └─ yes ─▶ [Append(records)]
                  append_completed ─▶ [Reply(token, answer)] or the write's error
    advance(now) ─▶ session and rebalance timers due ─▶ expired members' records appended

A heartbeat is answered once its records are committed, so the epochs and assignment a
member is told are in the log. If the write fails the member is told Kafka's error for
it (:mod:`~sluice.group.write_errors`) and retries, and the change is undone in memory
(``ConsumerGroups.revert``), with every later change of the same group still waiting
for its write, newest first, as Kafka's coordinator reverts to the last committed
offset: memory never runs ahead of the log. The same holds for a member's expiry (tried
again shortly), DeleteGroups' tombstones, classic members' JoinGroup and LeaveGroup, and
the conversions, whose write also changes the classic group of the id: it is put back
by the ``on_write_failed`` / downgrade callback the coordinator gave (an upgrade's
classic group with its members, a downgrade's replacement gone)::

    write ─▶ pending[group] += change ─▶ committed: drop it
                                      └▶ failed: revert it and the group's later ones

Timers that fire for a member who heartbeated since are ignored
(``ConsumerGroups.expire`` checks the deadline it armed).

One group id names one group. A joining heartbeat for an id held by a classic group with
members converts it when Kafka would (its online upgrade: every member uses the consumer
protocol, the policy allows it; the coordinator decides and hands over the group as a
:class:`~sluice.group.migration.ClassicGroupImage`): one write holds the classic group's
tombstone, the converted group's records
(:class:`~sluice.group.consumer_classic.ClassicMembers`) and the heartbeat's; if the
heartbeat is refused nothing is written and the classic group stays. A classic group in
the middle of a rebalance converts too; its parked JoinGroups and SyncGroups are
answered REBALANCE_IN_PROGRESS once that write is committed (``on_write_committed``).
Otherwise a classic group with members keeps the id (GROUP_ID_NOT_FOUND, Kafka's
answer). An empty classic group's metadata record is deleted and the consumer group
takes the id (its committed offsets stay, as in Kafka). The classic APIs of members
inside a consumer group are served here too (``classic_join`` and the others), and when
the last member of the new protocol leaves or expires, or a static classic member takes
its place (JoinGroup with its group instance id), the group's tombstones and the
classic group that replaces it (made by the coordinator's ``downgrade`` callback) are
one write.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sluice.common.errors import ErrorCode
from sluice.coordinator.api import Append, Effect, Record, Reply, RequestToken
from sluice.group.api import (
    OFFSET_COMMIT_MEMBER_EPOCH_VERSION,
    GroupListing,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
)
from sluice.group.consumer_classic import ClassicMembers
from sluice.group.consumer_group import (
    CONSUMER_GROUP_TYPE,
    JOIN_MEMBER_EPOCH,
    ConsumerGroup,
    MetadataView,
)
from sluice.group.consumer_heartbeat import ConsumerGroups
from sluice.group.consumer_heartbeat_api import (
    ArmTimer,
    Change,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupsConfig,
    TimerChange,
    TimerKey,
    to_topic_partitions,
)
from sluice.group.consumer_records import ConsumerGroupRecord, TopicPartitions
from sluice.group.consumer_records_codec import decode_record, encode_record
from sluice.group.migration import ClassicGroupImage
from sluice.group.write_errors import TOO_LARGE, write_error

log = logging.getLogger(__name__)

CompletionHandler = Callable[[int, ErrorCode | None], list[Effect]]
AppendFunction = Callable[[Sequence[Record], CompletionHandler], Append]
"""The shard's way to ask for a write (``GroupCoordinator._append``)."""

_TimerEntry = tuple[int, int, TimerKey]
"""(deadline ms, sequence, timer); stale entries are harmless (``expire`` checks)."""


@dataclass(frozen=True)
class DescribedConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[TopicPartitions, ...]
    """What the member owns now (assigned, not yet revoked ones excluded)."""
    target_assignment: tuple[TopicPartitions, ...]
    uses_classic_protocol: bool = False
    """A member that joined with JoinGroup (or came with its classic group)."""


@dataclass(frozen=True)
class ConsumerGroupDescription:
    """ConsumerGroupDescribe's answer for one group."""

    group_id: str
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedConsumerMember, ...] = ()


@dataclass(frozen=True)
class OtherGroupHold:
    """What a classic or share group of the same id means for a consumer group."""

    in_use: bool
    """A share group, or a classic group with members: the id is not free."""
    metadata_tombstone: Record | None
    """The tombstone of the empty classic group's metadata record, written when a
    consumer group takes its id (None: nothing to delete)."""
    on_tombstone_written: Callable[[], None] = lambda: None
    """Called once the tombstone is handed to a write: the classic group forgets its
    record (and, on an upgrade, its members)."""
    upgrade: ClassicGroupImage | None = None
    """A classic group with members that a joining member of the new protocol converts
    (the online upgrade); ``in_use`` is False then."""
    refusal: str | None = None
    """Why the id is not free, for the heartbeat's error message."""
    on_write_failed: UndoFunction = lambda _now_ms, _error: []
    """Called if the write holding the tombstone fails: the classic group is put back as
    it was before ``on_tombstone_written`` (its record, and on an upgrade its members)."""
    on_write_committed: Callable[[int], list[Effect]] = lambda _now_ms: []
    """Called once that write is committed (at ``now_ms``): an upgrade of a rebalancing
    group answers its parked JoinGroups and SyncGroups REBALANCE_IN_PROGRESS."""


UndoFunction = Callable[[int, ErrorCode], list[Effect]]
"""Puts a classic group back as it was before a write that failed (at ``now_ms``, the
write's error): the effects (answers to requests parked on it meanwhile)."""


@dataclass(eq=False)
class _Pending:
    """A change of a consumer group whose records are being written."""

    change: Change
    undo_other: UndoFunction | None = None
    """What the same write changed of the classic group of the id, to put back."""


def _nothing_committed(_now_ms: int) -> list[Effect]:
    return []


OtherGroupLookup = Callable[[str], OtherGroupHold | None]
"""The group of another type holding an id, if any (``GroupCoordinator`` answers)."""
DowngradeFunction = Callable[
    [ClassicGroupImage, int], tuple[list[Record], list[Effect], UndoFunction]
]
"""Makes the classic group of an image (at ``now_ms``): its records, effects, and how
to put back the classic group as it was should the records not be written."""


def heartbeat_write_error(error: ErrorCode) -> ErrorCode:
    """What a member is told when its heartbeat's records could not be written (Kafka's
    mapping for the coordinator's writes)."""
    if error is ErrorCode.request_timed_out:
        return ErrorCode.coordinator_not_available
    if error in TOO_LARGE:
        return ErrorCode.unknown_server_error
    return write_error(error) or error


class HostedConsumerGroups:
    """Every consumer group of one ``__consumer_offsets`` partition, as effects. See the
    module docstring."""

    def __init__(
        self,
        config: ConsumerGroupsConfig,
        append: AppendFunction,
        other_group: OtherGroupLookup,
        new_member_id: Callable[[], str],
        downgrade: DowngradeFunction,
    ) -> None:
        self._config = config
        self._append = append
        self._other_group = other_group
        self._downgrade = downgrade
        self._groups = ConsumerGroups(config, new_member_id)
        self._classic = ClassicMembers(self._groups, config, new_member_id)
        self._timers: list[_TimerEntry] = []
        self._timer_sequence = itertools.count()
        self._pending: dict[str, list[_Pending]] = {}
        """Group id → its changes whose records are being written, oldest first."""

    # ================================================================ inspection

    def group(self, group_id: str) -> ConsumerGroup | None:
        """The group's state, for tests, diagnostics and descriptions (do not modify it)."""
        return self._groups.group(group_id)

    def __contains__(self, group_id: str) -> bool:
        return self._groups.group(group_id) is not None

    def groups(self) -> list[ConsumerGroup]:
        return self._groups.groups()

    def describe(self, group_id: str) -> ConsumerGroupDescription:
        """ConsumerGroupDescribe: GROUP_ID_NOT_FOUND for an id no consumer group has
        (Kafka's answer, a classic or share group's id included)."""
        group = self._groups.group(group_id)
        if group is None:
            return ConsumerGroupDescription(
                group_id, ErrorCode.group_id_not_found, f"Group {group_id} not found."
            )
        members = tuple(
            DescribedConsumerMember(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=tuple(sorted(m.subscribed_topic_names)),
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=to_topic_partitions(m.assigned_partitions),
                target_assignment=to_topic_partitions(group.target_assignment.get(m.member_id, {})),
                uses_classic_protocol=m.classic is not None,
            )
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        )
        return ConsumerGroupDescription(
            group_id,
            state=group.state.value,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=self._groups.assignor_name(group),
            members=members,
        )

    # =================================================================== loading

    def replay(self, key: bytes, value: bytes | None) -> None:
        """One consumer-group record of the partition (CorruptMessage if malformed)."""
        self._groups.replay(decode_record(key, value))

    def load_completed(self, now_ms: int) -> None:
        """Every member's session starts now, as in Kafka: members that keep
        heartbeating carry on; the others are removed once it ends."""
        self._arm(self._groups.start_timers(now_ms))

    # ==================================================================== timers

    def next_deadline_ms(self) -> int | None:
        return self._timers[0][0] if self._timers else None

    def advance(self, now_ms: int, last_due_ms: int) -> list[Effect]:
        """Fire the timers due at or before ``last_due_ms``."""
        effects: list[Effect] = []
        while self._timers and self._timers[0][0] <= last_due_ms:
            _, _, key = heapq.heappop(self._timers)
            result = self._groups.expire(key, last_due_ms)
            self._arm(result.timers)
            if not result.records:
                continue
            log.info("consumer group %s: member %s expired", key.group_id, key.member_id)
            trailing: list[Record] = []
            undo_other: UndoFunction | None = None
            if result.downgrade is not None:
                trailing, downgrade_effects, undo_other = self._downgrade(result.downgrade, now_ms)
                effects += downgrade_effects
            assert result.change is not None, "records come with the change that made them"
            on_stored = self._settling(
                [result.change], self._log_write_error(key.group_id), undo_other
            )
            effects.append(self._write(result.records, on_stored, trailing=trailing))
        return effects

    def _arm(self, changes: Iterable[TimerChange]) -> None:
        for change in changes:
            if isinstance(change, ArmTimer):
                entry = (change.deadline_ms, next(self._timer_sequence), change.key)
                heapq.heappush(self._timers, entry)
            # a cancelled timer's entry stays: ``expire`` finds no deadline and ignores it

    # ================================================================= heartbeat

    def heartbeat(
        self,
        now_ms: int,
        token: RequestToken,
        request: ConsumerGroupHeartbeatRequest,
        topics: MetadataView,
    ) -> list[Effect]:
        other = self._other_group(request.group_id)
        upgrade = None if other is None else other.upgrade
        if upgrade is not None and request.member_epoch != JOIN_MEMBER_EPOCH:
            upgrade = None  # only a joining member converts the group, as in Kafka
        if other is not None and (other.in_use or (other.upgrade is not None and upgrade is None)):
            message = other.refusal or f"Group {request.group_id} is not a consumer group."
            response = ConsumerGroupHeartbeatResponse(ErrorCode.group_id_not_found, message)
            return [Reply(token, response)]
        upgrade_records: list[ConsumerGroupRecord] = []
        upgrade_changes: list[Change] = []
        if upgrade is not None:
            conversion = self._classic.convert(upgrade, topics, now_ms)
            upgrade_records, upgrade_changes = conversion.records, [conversion.change]
        result = self._groups.heartbeat(request, topics, now_ms)
        if upgrade is not None:
            if result.response.error is not ErrorCode.none:
                # Nothing is written: the converted group is undone, the classic one stays.
                self._arm(self._groups.revert(conversion.change, now_ms))
                return [Reply(token, result.response)]
            self._arm(conversion.timers)
        self._arm(result.timers)
        if not result.records:
            return [Reply(token, result.response)]
        extra: tuple[Record, ...] = ()
        undo_other: UndoFunction | None = None
        on_committed: Callable[[int], list[Effect]] = _nothing_committed
        if other is not None and other.metadata_tombstone is not None:
            extra = (other.metadata_tombstone,)
            other.on_tombstone_written()
            undo_other = other.on_write_failed
            on_committed = other.on_write_committed
        trailing: list[Record] = []
        effects: list[Effect] = []
        if result.downgrade is not None:
            trailing, effects, undo_other = self._downgrade(result.downgrade, now_ms)
        answer = result.response

        def on_stored(completed_ms: int, error: ErrorCode | None) -> list[Effect]:
            if error is None:
                return [Reply(token, answer), *on_committed(completed_ms)]
            log.warning(
                "consumer group %s: heartbeat records not written (%s); change reverted",
                request.group_id,
                error.name,
            )
            return [Reply(token, ConsumerGroupHeartbeatResponse(heartbeat_write_error(error)))]

        changes = [*upgrade_changes, result.change]
        records = [*upgrade_records, *result.records]
        on_settled = self._settling(changes, on_stored, undo_other)
        return [self._write(records, on_settled, extra, trailing), *effects]

    # ================================================================ reverting

    def _settling(
        self,
        changes: Sequence[Change | None],
        on_completion: CompletionHandler,
        undo_other: UndoFunction | None = None,
    ) -> CompletionHandler:
        """``on_completion``, after the changes of one write are kept (written) or
        reverted (not), with ``undo_other``: what the write changed of a classic group
        (an upgrade's hand-over, a downgrade's new classic group)."""
        assert changes and all(c is not None for c in changes), (
            "records come with the change that made them"
        )
        entries = [_Pending(c) for c in changes if c is not None]
        entries[0].undo_other = undo_other
        group_id = entries[0].change.group_id
        self._pending.setdefault(group_id, []).extend(entries)
        first = entries[0]

        def settle(completed_ms: int, error: ErrorCode | None) -> list[Effect]:
            effects = self._settle(group_id, first, len(entries), completed_ms, error)
            return effects + on_completion(completed_ms, error)

        return settle

    def _settle(
        self, group_id: str, first: _Pending, count: int, now_ms: int, error: ErrorCode | None
    ) -> list[Effect]:
        pending = self._pending.get(group_id, [])
        index = next((i for i, p in enumerate(pending) if p is first), None)
        if index is None:
            # Reverted when an earlier write of the group failed (or forgotten when a
            # classic group took the id).
            if error is None:
                log.warning(
                    "consumer group %s: records written after an earlier write failed; "
                    "memory is behind the log until the partition is loaded again",
                    group_id,
                )
            return []
        effects: list[Effect] = []
        if error is None:
            del pending[index : index + count]
        else:
            for later in reversed(pending[index:]):
                self._arm(self._groups.revert(later.change, now_ms))
                if later.undo_other is not None:
                    effects += later.undo_other(now_ms, error)
            del pending[index:]
        if not pending:
            del self._pending[group_id]
        return effects

    def _write(
        self,
        records: Sequence[ConsumerGroupRecord],
        on_completion: CompletionHandler,
        extra: Sequence[Record] = (),
        trailing: Sequence[Record] = (),
    ) -> Append:
        encoded = [*extra, *(encode_record(r) for r in records), *trailing]
        return self._append(encoded, on_completion)

    # ====================================================== classic members

    def classic_join(
        self, now_ms: int, token: RequestToken, request: JoinGroupRequest, topics: MetadataView
    ) -> list[Effect]:
        """JoinGroup to a consumer group with members: answered once its records are
        written (:mod:`~sluice.group.consumer_classic`)."""
        result = self._classic.join(request, topics, now_ms)
        self._arm(result.timers)
        answer = result.response
        if not result.records:
            return [Reply(token, answer)]
        trailing: list[Record] = []
        effects: list[Effect] = []
        undo_other: UndoFunction | None = None
        if result.downgrade is not None:
            trailing, effects, undo_other = self._downgrade(result.downgrade, now_ms)

        def on_stored(_completed_ms: int, error: ErrorCode | None) -> list[Effect]:
            if error is None:
                return [Reply(token, answer)]
            log.warning(
                "consumer group %s: JoinGroup records not written (%s); change reverted",
                request.group_id,
                error.name,
            )
            failed = JoinGroupResponse(heartbeat_write_error(error), member_id=request.member_id)
            return [Reply(token, failed)]

        on_settled = self._settling([result.change], on_stored, undo_other)
        return [self._write(result.records, on_settled, trailing=trailing), *effects]

    def classic_sync(self, token: RequestToken, request: SyncGroupRequest, now_ms: int) -> Reply:
        result = self._classic.sync(request, now_ms)
        self._arm(result.timers)
        return Reply(token, result.response)

    def classic_heartbeat(
        self, token: RequestToken, request: HeartbeatRequest, now_ms: int
    ) -> Reply:
        result = self._classic.heartbeat(request, now_ms)
        self._arm(result.timers)
        return Reply(token, HeartbeatResponse(result.error))

    def classic_leave(self, token: RequestToken, request: LeaveGroupRequest) -> list[Effect]:
        result = self._classic.leave(request.group_id, request.members)
        self._arm(result.timers)
        answer = LeaveGroupResponse(ErrorCode.none, tuple(result.members))
        if not result.records:
            return [Reply(token, answer)]

        def on_stored(_completed_ms: int, error: ErrorCode | None) -> list[Effect]:
            if error is None:
                return [Reply(token, answer)]
            log.warning(
                "consumer group %s: LeaveGroup records not written (%s); change reverted",
                request.group_id,
                error.name,
            )
            return [Reply(token, LeaveGroupResponse(heartbeat_write_error(error)))]

        return [self._write(result.records, self._settling([result.change], on_stored))]

    def _log_write_error(self, group_id: str) -> CompletionHandler:
        def on_stored(_completed_ms: int, error: ErrorCode | None) -> list[Effect]:
            if error is not None:
                log.warning("consumer group %s: records not written (%s)", group_id, error.name)
            return []

        return on_stored

    # ================================================================== offsets

    def validate_offset_commit(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        *,
        transactional: bool = False,
        api_version: int = OFFSET_COMMIT_MEMBER_EPOCH_VERSION,
    ) -> ErrorCode | None:
        """Kafka's check of OffsetCommit and TxnOffsetCommit for a consumer group
        (ConsumerGroup.validateOffsetCommit): without an epoch (-1, an administrator's or
        a simple consumer's commit) only while the group has no members; else the member
        must be known (UNKNOWN_MEMBER_ID), commit with OffsetCommit v9+, which carries its
        epoch (UNSUPPORTED_VERSION; TxnOffsetCommit of any version is accepted, and so is
        any version from a classic member, whose generation is its epoch), and send its
        current epoch (STALE_MEMBER_EPOCH; for a transactional commit or a classic
        member ILLEGAL_GENERATION, the error their clients know)."""
        group = self._groups.group(group_id)
        assert group is not None, "asked only for a consumer group's id"
        if member_epoch < 0 and not group.members:
            return None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if (
            not transactional
            and member.classic is None
            and api_version < OFFSET_COMMIT_MEMBER_EPOCH_VERSION
        ):
            return ErrorCode.unsupported_version
        error = self._member_epoch_error(group, member_id, member_epoch)
        if transactional and error is ErrorCode.stale_member_epoch:
            return ErrorCode.illegal_generation
        return error

    def validate_offset_fetch(
        self, group_id: str, member_id: str | None, member_epoch: int
    ) -> ErrorCode | None:
        """Kafka's check of OffsetFetch v9+: a fetch without member id and epoch (an
        administrator's) is answered; a member's must name it and its current epoch."""
        group = self._groups.group(group_id)
        assert group is not None, "asked only for a consumer group's id"
        if member_id is None and member_epoch < 0:
            return None
        return self._member_epoch_error(group, member_id or "", member_epoch)

    @staticmethod
    def _member_epoch_error(
        group: ConsumerGroup, member_id: str, member_epoch: int
    ) -> ErrorCode | None:
        """A classic member's generation is its epoch: it is told ILLEGAL_GENERATION,
        which its client knows, as in Kafka."""
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            if member.classic is not None:
                return ErrorCode.illegal_generation
            return ErrorCode.stale_member_epoch
        return None

    def list_groups(self, wanted_states: set[str] | None) -> list[GroupListing]:
        """ListGroups' entries (type and protocol type ``consumer``); ``wanted_states``
        lower-case state names, None for all."""
        listings = []
        for group in self._groups.groups():
            state = group.state.value
            if wanted_states is None or state.lower() in wanted_states:
                listings.append(
                    GroupListing(group.group_id, CONSUMER_GROUP_TYPE, state, CONSUMER_GROUP_TYPE)
                )
        return listings

    # ================================================================== deletion

    def deletion_error(self, group_id: str) -> ErrorCode | None:
        """Why DeleteGroups may not delete the group: it has members (NON_EMPTY_GROUP)."""
        group = self._groups.group(group_id)
        assert group is not None, "asked only for a consumer group's id"
        return ErrorCode.non_empty_group if group.members else None

    def delete(self, group_id: str) -> tuple[list[Record], CompletionHandler]:
        """DeleteGroups: the tombstones of an empty consumer group, which is gone once
        this returns, and what to call when their write completes (the group comes back
        if they were not written)."""
        records, change = self._groups.delete_group_records(group_id)
        encoded = [encode_record(r) for r in records]
        return encoded, self._settling([change], lambda _completed_ms, _error: [])

    def delete_empty(self, group_id: str) -> list[Record]:
        """The tombstones of an empty consumer group whose id a classic group takes; the
        group is gone once this returns. Not reverted if they are not written (the
        classic group holds the id in memory by then): the group comes back when the
        partition is loaded again; its pending changes are forgotten."""
        records, _ = self._groups.delete_group_records(group_id)
        self._pending.pop(group_id, None)
        return [encode_record(r) for r in records]


def new_member_id_source(random_bits: Callable[[int], int]) -> Callable[[], str]:
    """Member ids for v0 joins that leave them to the coordinator: random UUIDs in
    Kafka's base64 form is what Java makes; any unique string works."""

    def new_member_id() -> str:
        return str(uuid.UUID(int=random_bits(128)))

    return new_member_id
