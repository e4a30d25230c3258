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
again shortly) and for DeleteGroups' tombstones::

    write ─▶ pending[group] += change ─▶ committed: drop it
                                      └▶ failed: revert it and the group's later ones

Timers that fire for a member who heartbeated since are ignored
(``ConsumerGroups.expire`` checks the deadline it armed).

One group id names one group: a classic group with members keeps the id (a heartbeat
for it answers GROUP_ID_NOT_FOUND, as Kafka does when it cannot convert the group; the
online upgrade is not built), an empty classic group's metadata record is deleted and
the consumer group takes the id (its committed offsets stay, as in Kafka).
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
from sluice.group.api import OFFSET_COMMIT_MEMBER_EPOCH_VERSION, GroupListing
from sluice.group.consumer_group import CONSUMER_GROUP_TYPE, ConsumerGroup, MetadataView
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
    record."""


OtherGroupLookup = Callable[[str], OtherGroupHold | None]
"""The group of another type holding an id, if any (``GroupCoordinator`` answers)."""


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
    ) -> None:
        self._config = config
        self._append = append
        self._other_group = other_group
        self._groups = ConsumerGroups(config, new_member_id)
        self._timers: list[_TimerEntry] = []
        self._timer_sequence = itertools.count()
        self._pending: dict[str, list[Change]] = {}
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
            if result.records:
                log.info("consumer group %s: member %s expired", key.group_id, key.member_id)
                on_stored = self._log_write_error(key.group_id)
                effects.append(
                    self._write(result.records, self._settling(result.change, on_stored))
                )
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
        if other is not None and other.in_use:
            # Kafka converts a classic group whose members use the consumer protocol
            # (its online upgrade), else answers this; Sluice does not convert yet.
            response = ConsumerGroupHeartbeatResponse(
                ErrorCode.group_id_not_found,
                f"Group {request.group_id} is not a consumer group.",
            )
            return [Reply(token, response)]
        result = self._groups.heartbeat(request, topics, now_ms)
        self._arm(result.timers)
        if not result.records:
            return [Reply(token, result.response)]
        extra: tuple[Record, ...] = ()
        if other is not None and other.metadata_tombstone is not None:
            extra = (other.metadata_tombstone,)
            other.on_tombstone_written()
        answer = result.response

        def on_stored(_completed_ms: int, error: ErrorCode | None) -> list[Effect]:
            if error is None:
                return [Reply(token, answer)]
            log.warning(
                "consumer group %s: heartbeat records not written (%s); change reverted",
                request.group_id,
                error.name,
            )
            return [Reply(token, ConsumerGroupHeartbeatResponse(heartbeat_write_error(error)))]

        return [self._write(result.records, self._settling(result.change, on_stored), extra)]

    # ================================================================ reverting

    def _settling(
        self, change: Change | None, on_completion: CompletionHandler
    ) -> CompletionHandler:
        """``on_completion``, after the change is kept (written) or reverted (not)."""
        assert change is not None, "records come with the change that made them"
        group_id = change.group_id
        self._pending.setdefault(group_id, []).append(change)

        def settle(completed_ms: int, error: ErrorCode | None) -> list[Effect]:
            self._settle(group_id, change, completed_ms, error)
            return on_completion(completed_ms, error)

        return settle

    def _settle(self, group_id: str, change: Change, now_ms: int, error: ErrorCode | None) -> None:
        pending = self._pending.get(group_id, [])
        index = next((i for i, c in enumerate(pending) if c is change), None)
        if index is None:
            # Reverted when an earlier write of the group failed (or forgotten when a
            # classic group took the id).
            if error is None:
                log.warning(
                    "consumer group %s: records written after an earlier write failed; "
                    "memory is behind the log until the partition is loaded again",
                    group_id,
                )
            return
        if error is None:
            del pending[index]
        else:
            for later in reversed(pending[index:]):
                self._arm(self._groups.revert(later, now_ms))
            del pending[index:]
        if not pending:
            del self._pending[group_id]

    def _write(
        self,
        records: Sequence[ConsumerGroupRecord],
        on_completion: CompletionHandler,
        extra: Sequence[Record] = (),
    ) -> Append:
        return self._append([*extra, *(encode_record(r) for r in records)], on_completion)

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
        epoch (UNSUPPORTED_VERSION; TxnOffsetCommit of any version is accepted), and send
        its current epoch (STALE_MEMBER_EPOCH; for a transactional commit
        ILLEGAL_GENERATION, the error transactional producers know)."""
        group = self._groups.group(group_id)
        assert group is not None, "asked only for a consumer group's id"
        if member_epoch < 0 and not group.members:
            return None
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if not transactional and api_version < OFFSET_COMMIT_MEMBER_EPOCH_VERSION:
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
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
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
        return encoded, self._settling(change, lambda _completed_ms, _error: [])

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
