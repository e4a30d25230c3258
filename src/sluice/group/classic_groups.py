"""The classic groups of one ``__consumer_offsets`` partition, as the group coordinator
hosts them: what the classic protocol (:mod:`~sluice.group.classic_rebalance`,
:mod:`~sluice.group.classic_join`, :mod:`~sluice.group.classic_members`), the offsets
(:mod:`~sluice.group.offsets`) and the conversions to and from consumer groups
(:mod:`~sluice.group.classic_conversion`) share.

State owned here: the groups by id (each with its members, generation and committed
offsets, :class:`~sluice.group.state.Group`), the classic groups' timers (members'
sessions, ids handed out and never used, rebalance and sync deadlines) and the group
metadata records read while the partition loads. The shard
(:class:`~sluice.group.coordinator.GroupCoordinator`) gives it its way to write and
runs its due timers; nothing here does I/O or reads a clock.

Timers are a heap of (deadline, sequence, group id, kind, member id) entries. An entry
goes stale when its deadline moves (a member heard from again, a rebalance ended); the
protocol checks a popped entry against the group's current state and ignores it then,
so moving a deadline is only pushing a new entry.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from random import Random

from sluice.common.errors import ErrorCode
from sluice.coordinator.api import Append, Effect, Record
from sluice.group.config import (
    CLIENT_ID_IN_MEMBER_ID_CHARS_MAX,
    GROUP_ID_BYTES_MAX,
    GroupConfig,
)
from sluice.group.member import Member, member_record
from sluice.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    ShareGroupMetadataKey,
    encode_group_metadata_value,
    encode_key,
)
from sluice.group.state import Group, GroupState
from sluice.group.write_errors import TOO_LARGE, write_error

log = logging.getLogger(__name__)

CompletionHandler = Callable[[int, ErrorCode | None], list[Effect]]
"""Called with (now_ms, error or None) when an append is committed or has failed."""

AppendFunction = Callable[[Sequence[Record], CompletionHandler, tuple[int, int] | None], Append]
"""The shard's way to ask for a write: records, what to do once it is committed or has
failed, and the (producer id, producer epoch) of a transactional write."""


class Timer(enum.IntEnum):
    MEMBER = 0
    """A member's liveness deadline (session, or new-member join timeout)."""
    PENDING_MEMBER = 1
    """A member id handed out with MEMBER_ID_REQUIRED that was never used."""
    JOIN = 2
    """The group's rebalance (or initial delay) deadline."""
    SYNC = 3
    """The deadline for every member of a new generation to send SyncGroup."""


_TimerEntry = tuple[int, int, str, Timer, str]
"""(deadline ms, sequence, group id, kind, member id). Entries go stale when a deadline
moves; a popped entry is checked against the group's current state."""


def store_error(error: ErrorCode) -> ErrorCode:
    """For a group-metadata write (JoinGroup, SyncGroup): a timeout means "rebalance
    again"."""
    if error is ErrorCode.request_timed_out:
        return ErrorCode.rebalance_in_progress
    if error in TOO_LARGE:
        return ErrorCode.unknown_server_error
    return write_error(error) or error


def delete_error(error: ErrorCode) -> ErrorCode:
    """For tombstones (DeleteGroups, OffsetDelete)."""
    if error in TOO_LARGE:
        return ErrorCode.unknown_server_error
    return write_error(error) or error


def group_id_is_valid(group_id: str, *, allow_empty: bool) -> bool:
    """Kafka accepts the empty group id only in the offset and describe/delete APIs."""
    if not group_id and not allow_empty:
        return False
    return len(group_id.encode()) <= GROUP_ID_BYTES_MAX


def tombstone(key: OffsetCommitKey | GroupMetadataKey | ShareGroupMetadataKey) -> Record:
    return (encode_key(key), None)


class ClassicGroups:
    """The classic groups of one partition. See the module docstring."""

    def __init__(self, config: GroupConfig, random: Random, append: AppendFunction) -> None:
        self.config = config
        self.groups: dict[str, Group] = {}
        """Every classic group here by id, Dead ones (being deleted) included; a
        consumer group's committed offsets are kept in a classic group's place."""
        self._random = random
        self._append = append
        self._timers: list[_TimerEntry] = []
        self._timer_sequence = itertools.count()
        self._loading_metadata: dict[str, GroupMetadataValue | None] = {}

    def append(
        self,
        records: Sequence[Record],
        on_completion: CompletionHandler,
        transaction: tuple[int, int] | None = None,
    ) -> Append:
        return self._append(records, on_completion, transaction)

    # ================================================================== timers

    def watch(self, deadline_ms: int, group: Group, kind: Timer, member_id: str = "") -> None:
        entry = (deadline_ms, next(self._timer_sequence), group.group_id, kind, member_id)
        heapq.heappush(self._timers, entry)

    def watch_member(self, group: Group, member: Member) -> None:
        deadline = member.liveness_deadline_ms()
        if deadline is not None:
            self.watch(deadline, group, Timer.MEMBER, member.member_id)

    def heard_from(self, group: Group, member: Member, now_ms: int) -> None:
        member.last_heartbeat_ms = now_ms
        self.watch_member(group, member)

    def next_timer_ms(self) -> int | None:
        """The earliest deadline watched (possibly stale)."""
        return self._timers[0][0] if self._timers else None

    def due_timers(self, last_due_ms: int) -> Iterator[tuple[Group, Timer, str]]:
        """Pop the timers due at or before ``last_due_ms``, in deadline order, with their
        group (if it still exists) and member id. Timers set while they are handled are
        popped too when they are due by then."""
        while self._timers and self._timers[0][0] <= last_due_ms:
            _, _, group_id, kind, member_id = heapq.heappop(self._timers)
            group = self.groups.get(group_id)
            if group is not None:
                yield group, kind, member_id

    # ============================================================ records, ids

    def group_record(self, group: Group, assignments: Mapping[str, bytes]) -> Record:
        """The group's metadata record, its members with ``assignments``."""
        protocol = group.protocol_name
        value = GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=protocol,
            leader=group.leader_id if group.members else None,
            current_state_timestamp_ms=group.state_timestamp_ms,
            members=tuple(
                member_record(m, protocol, assignments.get(m.member_id, b""))
                for m in group.members.values()
            ),
        )
        return (encode_key(GroupMetadataKey(group.group_id)), encode_group_metadata_value(value))

    def group_tombstones(self, group: Group) -> list[Record]:
        """Tombstones for every offset of the group (committed or being committed), then
        for its metadata."""
        partitions = sorted(set(group.offsets) | set(+group.pending_offset_commits))
        records = [
            tombstone(OffsetCommitKey(group.group_id, p.topic, p.partition)) for p in partitions
        ]
        records.append(tombstone(GroupMetadataKey(group.group_id)))
        return records

    def new_member_id(self, prefix: str) -> str:
        unique = uuid.UUID(int=self._random.getrandbits(128), version=4)
        return f"{prefix[:CLIENT_ID_IN_MEMBER_ID_CHARS_MAX]}-{unique}"

    # ============================================================ coming, going

    def drop_if_unused(self, group: Group) -> None:
        """Forget a group that was created by a request and never came to hold anything
        (it has no record in the log)."""
        if (
            group.is_in(GroupState.EMPTY)
            and group.generation_id == 0
            and not group.has_metadata_record
            and not group.members
            and not group.pending_members
            and not group.has_offsets()
            and self.groups.get(group.group_id) is group
        ):
            del self.groups[group.group_id]

    def finish_removal(self, groups: list[tuple[Group, int]], error: ErrorCode | None) -> None:
        """Forget groups whose tombstones are committed; revive them if not written."""
        for group, state_timestamp_ms in groups:
            if self.groups.get(group.group_id) is not group or not group.is_in(GroupState.DEAD):
                continue
            if error is None:
                del self.groups[group.group_id]
                log.info("group %s: deleted", group.group_id)
            else:
                log.warning("group %s: tombstones not written (%s)", group.group_id, error.name)
                group.transition_to(GroupState.EMPTY, state_timestamp_ms)

    # ================================================================ loading

    def replay_metadata(self, group_id: str, value: GroupMetadataValue | None) -> None:
        """A group metadata record, in log order: only the last one of a group counts."""
        self._loading_metadata[group_id] = value
        if value is not None and group_id not in self.groups:
            self.groups[group_id] = Group(group_id, -1)

    def load_completed(self, now_ms: int) -> None:
        """End of the log: give groups their last metadata; groups with members come
        back Stable, their sessions starting now; drop groups with nothing left."""
        for group_id, metadata in self._loading_metadata.items():
            group = self.groups.get(group_id)
            if group is None:
                continue
            if metadata is None:
                group.has_metadata_record = False
                continue
            self._restore_group(group, metadata, now_ms)
        for group_id, group in list(self.groups.items()):
            if not group.has_metadata_record and not group.offsets:
                del self.groups[group_id]
        self._loading_metadata.clear()

    def _restore_group(self, group: Group, metadata: GroupMetadataValue, now_ms: int) -> None:
        group.has_metadata_record = True
        group.protocol_type = metadata.protocol_type or None
        group.generation_id = metadata.generation
        group.protocol_name = metadata.protocol
        group.state_timestamp_ms = metadata.current_state_timestamp_ms
        if not metadata.members or metadata.protocol is None:
            return
        for stored in metadata.members:
            if stored.member_id in group.members or (
                stored.group_instance_id is not None
                and stored.group_instance_id in group.static_members
            ):
                log.warning(
                    "group %s: the stored group lists member %s twice; keeping the first",
                    group.group_id,
                    stored.member_id,
                )
                continue
            member = Member(
                member_id=stored.member_id,
                group_instance_id=stored.group_instance_id,
                client_id=stored.client_id,
                client_host=stored.client_host,
                session_timeout_ms=stored.session_timeout_ms,
                rebalance_timeout_ms=stored.rebalance_timeout_ms,
                protocols=((metadata.protocol, stored.subscription),),
                last_heartbeat_ms=now_ms,
                assignment=stored.assignment,
            )
            group.add_member(member, metadata.protocol_type)
            self.watch_member(group, member)
        if metadata.leader in group.members:
            group.leader_id = metadata.leader
        group.subscribed_topics = group.compute_subscribed_topics()
        group.transition_to(GroupState.STABLE, metadata.current_state_timestamp_ms)
