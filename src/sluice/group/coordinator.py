"""The group coordinator: a deterministic, synchronous state machine.

One :class:`GroupCoordinator` holds every group of one ``__consumer_offsets``
partition: it is the shard (:class:`~sluice.coordinator.api.CoordinatorShard`) the
generic coordinator runtime runs. It does no I/O and reads no clock: every operation
takes ``now_ms`` (wall-clock milliseconds, as in the records' commit timestamps) and a
token naming the request, and returns :data:`~sluice.coordinator.api.Effect` values for
its runtime to carry out::

    runtime                                   GroupCoordinator
    ───────                                   ────────────────
    join_group(now, token, request) ───────▶  state changes, timers set
                                    ◀───────  [Reply(other token, ...), Append(7, records)]
    log.append(records) ... committed
    append_completed(now, 7, None)  ───────▶  offsets / assignment become visible
                                    ◀───────  [Reply(token, ...)]
    poll(now) at next_deadline_ms() ───────▶  sessions, rebalance and sync timeouts,
                                    ◀───────  offset expiry: [Reply(...), Append(...)]

This module is the shard's front: it checks group ids, tells which kind of group an id
names (one id names a classic, a share or a consumer group, one at a time) and hands
each request to the part that does the work::

    GroupCoordinator ──┬─ classic groups (ClassicGroups: groups, timers, records, loading)
                       │    JoinGroup ............ classic_join
                       │    Sync/Heartbeat/Leave . classic_members
                       │    rebalances, timers ... classic_rebalance
                       │    upgrade, downgrade ... classic_conversion
                       ├─ committed offsets ...... offsets (Offsets)
                       ├─ share groups (KIP-932) . share_coordinator (ShareGroups)
                       └─ consumer groups (KIP-848) consumer_coordinator (HostedConsumerGroups)

State owned here: the appends in flight with what to do once each is written (their
ids are the shard's, shared by every part), when offset expiry next runs, and whether
the partition is still loading. DeleteGroups, DescribeGroups and ListGroups, which
span every kind of group, are answered here.

Rules that keep the log the source of truth:

- Committed offsets, a new assignment (Stable) and deletions become visible only in
  ``append_completed`` once their records are in the log; the runtime completes the
  appends of one coordinator in the order it was given them.
- ``replay(key, value)`` rebuilds the state from the log at load, using only the last
  value of each key (so a compacted log loads the same); ``load_completed(now_ms)``
  then restores groups that had members as Stable, with their sessions starting at
  load time: members that keep heartbeating carry on without a rebalance, as in Kafka.
- Randomness (member ids) comes from the injected ``random.Random``.
- Time never goes backwards (the runtime sees to it). An operation first runs the
  timers due before its ``now_ms``; timers due exactly then run at ``poll(now_ms)``, so
  JoinGroups sent together (same millisecond) make one rebalance even with no initial
  delay.

Transactional offsets (TxnOffsetCommit) are written as the producer's transactional
batch and kept pending per producer, invisible to OffsetFetch (which answers
UNSTABLE_OFFSET_COMMIT for them when asked for stable offsets), until the transaction's
marker lands in the partition: ``complete_transaction`` (live) or ``replay_marker``
(loading) then makes them committed offsets, or drops them on an abort.

Every request gets exactly one :class:`~sluice.coordinator.api.Reply`; a parked request that
is superseded (the same member sends JoinGroup or SyncGroup again) is answered with
REBALANCE_IN_PROGRESS, and one whose member is removed with UNKNOWN_MEMBER_ID.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Sequence
from random import Random

from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.coordinator.api import Append, Effect, Record, Reply, RequestToken
from sluice.group.api import (
    DeleteGroupsResponse,
    GroupDescription,
    GroupListing,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetFetchResponse,
    ShareGroupDescription,
    ShareGroupHeartbeatRequest,
    SyncGroupRequest,
)
from sluice.group.classic_conversion import downgrade_to_classic, hold_for_consumer_group
from sluice.group.classic_groups import (
    ClassicGroups,
    CompletionHandler,
    delete_error,
    group_id_is_valid,
)
from sluice.group.classic_join import join
from sluice.group.classic_members import heartbeat, leave, sync
from sluice.group.classic_rebalance import fire_timer
from sluice.group.config import GroupConfig
from sluice.group.consumer_coordinator import (
    ConsumerGroupDescription,
    HostedConsumerGroups,
    OtherGroupHold,
    UndoFunction,
    new_member_id_source,
)
from sluice.group.consumer_group import ConsumerGroup, MetadataView
from sluice.group.consumer_heartbeat_api import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupsConfig,
)
from sluice.group.consumer_records_codec import is_consumer_group_key
from sluice.group.migration import ClassicGroupImage
from sluice.group.offsets import Offsets, commit_refused
from sluice.group.records import (
    OffsetCommitKey,
    ShareGroupMetadataKey,
    decode_group_metadata_value,
    decode_key,
    decode_share_group_metadata_value,
)
from sluice.group.share_coordinator import ShareGroups
from sluice.group.share_group import ShareGroup
from sluice.group.state import Group, GroupState

log = logging.getLogger(__name__)

_EMPTY = GroupState.EMPTY
_DEAD = GroupState.DEAD


class GroupCoordinator:
    """Every group of one ``__consumer_offsets`` partition. See the module docstring."""

    def __init__(
        self,
        config: GroupConfig | None = None,
        random: Random | None = None,
        consumer_config: ConsumerGroupsConfig | None = None,
    ) -> None:
        self._config = config if config is not None else GroupConfig()
        self._random = random if random is not None else Random()
        self._append_ids = itertools.count(1)
        self._in_flight: dict[int, CompletionHandler] = {}
        self._expiry_check_ms: int | None = None
        self._loading = False
        self._classic = ClassicGroups(self._config, self._random, self._append)
        """The classic groups, and the committed offsets of every kind of group."""
        self._offsets = Offsets(self._classic)
        self._share_groups = ShareGroups(self._config, self._append, self._is_classic_group)
        """The share groups (KIP-932) of the partition: one group id names either a
        classic group here or a share group there, never both."""
        if consumer_config is None:
            consumer_config = ConsumerGroupsConfig(
                session_timeout_ms=self._config.consumer_session_timeout_ms,
                heartbeat_interval_ms=self._config.consumer_heartbeat_interval_ms,
                group_size_max=self._config.consumer_group_size_max,
                assignors=self._config.consumer_assignors,
                migration_policy=self._config.consumer_migration_policy,
                classic_group_size_max=self._config.group_size_max,
            )
        self._consumer_groups = HostedConsumerGroups(
            consumer_config,
            self._append,
            self._other_group_than_consumer,
            new_member_id_source(self._random.getrandbits),
            self._downgrade_to_classic,
        )
        """The consumer groups of the new protocol (KIP-848): an id names a classic, a
        share or a consumer group, one at a time."""

    # ================================================================= inspection

    def group(self, group_id: str) -> Group | None:
        """The group's state, for tests and diagnostics (do not modify it)."""
        return self._classic.groups.get(group_id)

    def group_ids(self) -> list[str]:
        return sorted(self._classic.groups)

    def share_group(self, group_id: str) -> ShareGroup | None:
        """The share group's state, for tests and diagnostics (do not modify it)."""
        return self._share_groups.group(group_id)

    def groups(self) -> list[Group]:
        """Every classic group here, for metrics and diagnostics (do not modify them)."""
        return list(self._classic.groups.values())

    def share_groups(self) -> list[ShareGroup]:
        """Every share group here, for metrics and diagnostics (do not modify them)."""
        return self._share_groups.groups()

    def _is_classic_group(self, group_id: str) -> bool:
        """Whether ``group_id`` is taken for share groups: by a classic group, or by a
        consumer group (KIP-848)."""
        group = self._classic.groups.get(group_id)
        return (group is not None and not group.is_in(_DEAD)) or group_id in self._consumer_groups

    def _other_group_than_consumer(self, group_id: str) -> OtherGroupHold | None:
        if group_id in self._share_groups:
            return OtherGroupHold(in_use=True, metadata_tombstone=None)
        if group_id in self._consumer_groups:
            return None  # (a consumer group's offsets are kept in a classic group's place)
        return hold_for_consumer_group(self._classic, group_id)

    def _downgrade_to_classic(
        self, image: ClassicGroupImage, now_ms: int
    ) -> tuple[list[Record], list[Effect], UndoFunction]:
        return downgrade_to_classic(self._classic, image, now_ms)

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group's state (KIP-848), for descriptions, tests and diagnostics
        (do not modify it)."""
        return self._consumer_groups.group(group_id)

    def consumer_groups(self) -> list[ConsumerGroup]:
        return self._consumer_groups.groups()

    @property
    def appends_in_flight(self) -> int:
        return len(self._in_flight)

    # ================================================================ loading

    def replay(self, key: bytes, value: bytes | None) -> None:
        """Apply one record of the partition, in log order, before any operation.
        Raises CorruptMessage for bytes that are not a record of ours."""
        self._loading = True
        if is_consumer_group_key(key):
            self._consumer_groups.replay(key, value)
            return
        decoded = decode_key(key)
        if isinstance(decoded, ShareGroupMetadataKey):
            share_value = None if value is None else decode_share_group_metadata_value(value)
            self._share_groups.replay(decoded.group_id, share_value)
            return
        if isinstance(decoded, OffsetCommitKey):
            self._offsets.replay(decoded, value)
            return
        metadata = None if value is None else decode_group_metadata_value(value)
        self._classic.replay_metadata(decoded.group_id, metadata)

    def replay_transactional(self, producer_id: int, key: bytes, value: bytes | None) -> None:
        """An offset committed inside a transaction: pending until its marker."""
        self._offsets.replay_transactional(producer_id, key, value)

    def replay_marker(self, producer_id: int, committed: bool) -> None:
        self._offsets.finish_transaction(producer_id, committed, now_ms=-1)

    def has_pending_transactional_offset(self, group_id: str, partition: TopicPartition) -> bool:
        return self._offsets.has_pending_transactional_offset(group_id, partition)

    def complete_transaction(
        self, now_ms: int, token: RequestToken, producer_id: int, committed: bool
    ) -> list[Effect]:
        """A marker for ``producer_id`` was written to this partition (its offsets
        take effect, or are dropped on an abort)."""
        effects = self._advance(now_ms)
        self._offsets.finish_transaction(producer_id, committed, now_ms)
        return [*effects, Reply(token, None)]

    def task_completed(self, now_ms: int, task_id: int, result: object) -> list[Effect]:
        raise AssertionError("the group coordinator hands out no tasks")

    def load_completed(self, now_ms: int) -> None:
        """End of the log: give groups their last metadata; groups with members come
        back Stable, their sessions starting now; drop groups with nothing left."""
        self._classic.load_completed(now_ms)
        self._loading = False
        self._consumer_groups.load_completed(now_ms)
        self._expiry_check_ms = now_ms + self._config.offsets_retention_check_interval_ms
        log.debug("group coordinator loaded %d group(s)", len(self._classic.groups))

    # ================================================================== timers

    def next_deadline_ms(self) -> int | None:
        """When :meth:`poll` next has work (possibly earlier: stale deadlines are cheap)."""
        classic_deadline_ms = self._classic.next_timer_ms()
        deadlines = [] if classic_deadline_ms is None else [classic_deadline_ms]
        if self._expiry_check_ms is not None:
            deadlines.append(self._expiry_check_ms)
        share_deadline_ms = self._share_groups.next_deadline_ms()
        if share_deadline_ms is not None:
            deadlines.append(share_deadline_ms)
        consumer_deadline_ms = self._consumer_groups.next_deadline_ms()
        if consumer_deadline_ms is not None:
            deadlines.append(consumer_deadline_ms)
        return min(deadlines, default=None)

    def poll(self, now_ms: int) -> list[Effect]:
        """Run every timer due at or before ``now_ms``."""
        return self._advance(now_ms, due_now=True)

    def _advance(self, now_ms: int, *, due_now: bool = False) -> list[Effect]:
        """Run the timers that are due. An operation at ``now_ms`` first runs those due
        strictly before it; those due exactly at ``now_ms`` wait for :meth:`poll`, so
        requests arriving in the same millisecond as a deadline come first (as requests
        racing a purgatory expiry do in Kafka: several JoinGroups sent together make one
        rebalance even with no initial delay)."""
        assert not self._loading, "operations start after load_completed()"
        effects: list[Effect] = []
        if self._expiry_check_ms is None:
            self._expiry_check_ms = now_ms + self._config.offsets_retention_check_interval_ms
        last_due_ms = now_ms if due_now else now_ms - 1
        for group, kind, member_id in self._classic.due_timers(last_due_ms):
            effects += fire_timer(self._classic, group, kind, member_id, now_ms)
        effects += self._share_groups.advance(now_ms, last_due_ms)
        effects += self._consumer_groups.advance(now_ms, last_due_ms)
        if self._expiry_check_ms <= last_due_ms:
            self._expiry_check_ms = now_ms + self._config.offsets_retention_check_interval_ms
            effects += self._offsets.expire(now_ms)
        return effects

    # ================================================================= appends

    def _append(
        self,
        records: Sequence[Record],
        on_completion: CompletionHandler,
        transaction: tuple[int, int] | None = None,
    ) -> Append:
        append_id = next(self._append_ids)
        self._in_flight[append_id] = on_completion
        return Append(append_id, tuple(records), transaction)

    def append_completed(
        self, now_ms: int, append_id: int, error: ErrorCode | None = None
    ) -> list[Effect]:
        """The records of ``append_id`` are committed (``error`` None) or were not
        written. The runtime reports appends in the order they were returned."""
        on_completion = self._in_flight.pop(append_id)
        effects = self._advance(now_ms)
        effects += on_completion(now_ms, error)
        return effects

    # =============================================================== JoinGroup

    def join_group(
        self,
        now_ms: int,
        token: RequestToken,
        request: JoinGroupRequest,
        topics: MetadataView | None = None,
    ) -> list[Effect]:
        """``topics``: the metadata image's topics, which a consumer group's assignor
        needs when the id is a consumer group's (none: no topic exists)."""
        effects = self._advance(now_ms)
        consumer_group = self._consumer_groups.group(request.group_id)
        if consumer_group is not None and consumer_group.members:
            # A classic member of a consumer group (Kafka's mixed groups).
            config = self._config
            if not (
                config.session_timeout_ms_min
                <= request.session_timeout_ms
                <= config.session_timeout_ms_max
            ):
                response = JoinGroupResponse(
                    ErrorCode.invalid_session_timeout, member_id=request.member_id
                )
                return [*effects, Reply(token, response)]
            view: MetadataView = {} if topics is None else topics
            return effects + self._consumer_groups.classic_join(now_ms, token, request, view)
        if consumer_group is not None:
            # An empty consumer group gives its id to the classic group, as in Kafka.
            tombstones = self._consumer_groups.delete_empty(request.group_id)
            effects.append(self._append(tombstones, self._log_consumer_group_deletion))
        return effects + join(
            self._classic,
            now_ms,
            token,
            request,
            share_group=request.group_id in self._share_groups,
        )

    # =============================================================== SyncGroup

    def sync_group(
        self, now_ms: int, token: RequestToken, request: SyncGroupRequest
    ) -> list[Effect]:
        effects = self._advance(now_ms)
        if request.group_id in self._consumer_groups:
            return [*effects, self._consumer_groups.classic_sync(token, request, now_ms)]
        return effects + sync(self._classic, now_ms, token, request)

    # =============================================================== Heartbeat

    def heartbeat(
        self, now_ms: int, token: RequestToken, request: HeartbeatRequest
    ) -> list[Effect]:
        effects = self._advance(now_ms)
        if request.group_id in self._consumer_groups:
            return [*effects, self._consumer_groups.classic_heartbeat(token, request, now_ms)]
        return [
            *effects,
            Reply(token, HeartbeatResponse(heartbeat(self._classic, now_ms, request))),
        ]

    # ============================================================== LeaveGroup

    def leave_group(
        self, now_ms: int, token: RequestToken, request: LeaveGroupRequest
    ) -> list[Effect]:
        effects = self._advance(now_ms)
        if not group_id_is_valid(request.group_id, allow_empty=False):
            return [*effects, Reply(token, LeaveGroupResponse(ErrorCode.invalid_group_id))]
        if request.group_id in self._consumer_groups:
            return effects + self._consumer_groups.classic_leave(token, request)
        return effects + leave(self._classic, now_ms, token, request)

    # ============================================================ OffsetCommit

    def commit_offsets(
        self, now_ms: int, token: RequestToken, request: OffsetCommitRequest
    ) -> list[Effect]:
        effects = self._advance(now_ms)
        return effects + self._commit(now_ms, token, request)

    def commit_transactional_offsets(
        self,
        now_ms: int,
        token: RequestToken,
        request: OffsetCommitRequest,
        producer_id: int,
        producer_epoch: int,
    ) -> list[Effect]:
        """TxnOffsetCommit: the offsets are written in the producer's transaction and
        take effect with its COMMIT marker. A member and generation, when given
        (v3+), are checked as for OffsetCommit; for a consumer group (KIP-848) the
        member's epoch, a stale one answered ILLEGAL_GENERATION, as Kafka does."""
        effects = self._advance(now_ms)
        return effects + self._commit(now_ms, token, request, (producer_id, producer_epoch))

    def _commit(
        self,
        now_ms: int,
        token: RequestToken,
        request: OffsetCommitRequest,
        transaction: tuple[int, int] | None = None,
    ) -> list[Effect]:
        if not group_id_is_valid(request.group_id, allow_empty=True):
            return [commit_refused(token, request, ErrorCode.invalid_group_id)]
        if request.group_id in self._share_groups:
            # Kafka: not a classic group
            return [commit_refused(token, request, ErrorCode.group_id_not_found)]
        if request.group_id not in self._consumer_groups:
            return self._offsets.commit(now_ms, token, request, transaction)
        # A consumer group (KIP-848): the epoch is the member's.
        error = self._consumer_groups.validate_offset_commit(
            request.group_id,
            request.member_id,
            request.generation_id,
            transactional=transaction is not None,
            api_version=request.api_version,
        )
        if error is not None:
            return [commit_refused(token, request, error)]
        return self._offsets.commit(now_ms, token, request, transaction, consumer_group=True)

    # ============================================================= OffsetFetch

    def fetch_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None,
        require_stable: bool = False,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> OffsetFetchResponse:
        """Committed offsets (only those in the log). ``partitions`` None: all of them.
        ``require_stable``: a partition with an offset pending in an open transaction
        answers UNSTABLE_OFFSET_COMMIT (the consumer retries). ``member_id`` and
        ``member_epoch`` (OffsetFetch v9+) are checked for a consumer group (KIP-848)."""
        if not group_id_is_valid(group_id, allow_empty=True):
            return OffsetFetchResponse(ErrorCode.invalid_group_id)
        if group_id in self._consumer_groups:
            error = self._consumer_groups.validate_offset_fetch(group_id, member_id, member_epoch)
            if error is not None:
                return OffsetFetchResponse(error)
        return self._offsets.fetch(group_id, partitions, require_stable)

    # ====================================================== Describe and list

    def describe_groups(self, group_ids: Iterable[str]) -> tuple[GroupDescription, ...]:
        """Unknown groups are described as Dead with no error (Kafka, versions < 6)."""
        descriptions = []
        for group_id in group_ids:
            group = self._classic.groups.get(group_id)
            if not group_id_is_valid(group_id, allow_empty=True):
                descriptions.append(
                    GroupDescription(group_id, ErrorCode.invalid_group_id, _DEAD.value)
                )
            elif group_id in self._share_groups or group_id in self._consumer_groups:
                message = f"Group {group_id} is not a classic group."
                descriptions.append(
                    GroupDescription(
                        group_id, ErrorCode.none, _DEAD.value, not_found_message=message
                    )
                )
            elif group is None or group.is_in(_DEAD):
                descriptions.append(GroupDescription(group_id, ErrorCode.none, _DEAD.value))
            else:
                descriptions.append(group.describe())
        return tuple(descriptions)

    def list_groups(self, states: Iterable[str] | None = None) -> tuple[GroupListing, ...]:
        """Every group but Dead ones; ``states`` (case-insensitive names) filters."""
        wanted = None if not states else {state.lower() for state in states}
        listings = []
        for group_id in sorted(self._classic.groups):
            group = self._classic.groups[group_id]
            if group.is_in(_DEAD) or group_id in self._consumer_groups:
                continue  # (a consumer group's offsets are kept in a classic group)
            if wanted is not None and group.state.value.lower() not in wanted:
                continue
            listings.append(GroupListing(group_id, group.protocol_type or "", group.state.value))
        listings += self._share_groups.list_groups(wanted)
        listings += self._consumer_groups.list_groups(wanted)
        return tuple(sorted(listings, key=lambda listing: listing.group_id))

    # ============================================================ DeleteGroups

    def delete_groups(
        self, now_ms: int, token: RequestToken, group_ids: Iterable[str]
    ) -> list[Effect]:
        """Only Empty groups can be deleted (NON_EMPTY_GROUP otherwise). The group is
        Dead while its tombstones (every offset, then the group) are written, and gone
        once they are committed; if they fail it is Empty again (a consumer group is
        restored as it was)."""
        effects = self._advance(now_ms)
        results: dict[str, ErrorCode | None] = {}
        deleting: list[tuple[Group, int]] = []
        deleting_share: list[str] = []
        share_topics: list[tuple[str, tuple[str, ...]]] = []
        consumer_deletions: list[CompletionHandler] = []
        records: list[Record] = []
        for group_id in group_ids:
            if group_id in results:
                continue
            group = self._classic.groups.get(group_id)
            if not group_id_is_valid(group_id, allow_empty=True):
                results[group_id] = ErrorCode.invalid_group_id
            elif group_id in self._share_groups:
                results[group_id] = self._share_groups.deletion_error(group_id)
                if results[group_id] is None:
                    tombstone, topics = self._share_groups.start_deletion(group_id)
                    records.append(tombstone)
                    deleting_share.append(group_id)
                    share_topics.append((group_id, topics))
            elif group_id in self._consumer_groups:
                results[group_id] = self._consumer_groups.deletion_error(group_id)
                if results[group_id] is None:
                    if group is not None and not group.is_in(_DEAD):  # its offsets
                        deleting.append((group, group.state_timestamp_ms))
                        records += self._classic.group_tombstones(group)
                        group.transition_to(_DEAD, now_ms)
                    tombstones, on_written = self._consumer_groups.delete(group_id)
                    records += tombstones
                    consumer_deletions.append(on_written)
            elif group is None or group.is_in(_DEAD):
                results[group_id] = ErrorCode.group_id_not_found
            elif not group.is_in(_EMPTY):
                results[group_id] = ErrorCode.non_empty_group
            else:
                results[group_id] = None
                deleting.append((group, group.state_timestamp_ms))
                records += self._classic.group_tombstones(group)
                group.transition_to(_DEAD, now_ms)
        if not records:
            response = DeleteGroupsResponse(
                tuple((gid, error or ErrorCode.none) for gid, error in results.items())
            )
            return [*effects, Reply(token, response)]

        def on_deleted(completed_ms: int, error: ErrorCode | None) -> list[Effect]:
            self._classic.finish_removal(deleting, error)
            for on_written in consumer_deletions:
                on_written(completed_ms, error)  # a consumer group comes back if not written
            for group_id in deleting_share:
                self._share_groups.finish_deletion(group_id, error)
            outcome = ErrorCode.none if error is None else delete_error(error)
            response = DeleteGroupsResponse(
                tuple(
                    (group_id, outcome if result is None else result)
                    for group_id, result in results.items()
                ),
                tuple(share_topics) if error is None else (),
            )
            return [Reply(token, response)]

        return [*effects, self._append(records, on_deleted)]

    # ============================================================= share groups

    def share_group_heartbeat(
        self, now_ms: int, token: RequestToken, request: ShareGroupHeartbeatRequest
    ) -> list[Effect]:
        """ShareGroupHeartbeat (KIP-932): see :mod:`~sluice.group.share_coordinator`."""
        effects = self._advance(now_ms)
        return effects + self._share_groups.heartbeat(now_ms, token, request)

    def describe_share_groups(self, group_ids: Iterable[str]) -> tuple[ShareGroupDescription, ...]:
        return self._share_groups.describe(group_ids)

    # ======================================================== consumer groups

    def consumer_group_heartbeat(
        self,
        now_ms: int,
        token: RequestToken,
        request: ConsumerGroupHeartbeatRequest,
        topics: MetadataView,
    ) -> list[Effect]:
        """ConsumerGroupHeartbeat (KIP-848): see :mod:`~sluice.group.consumer_coordinator`."""
        effects = self._advance(now_ms)
        return effects + self._consumer_groups.heartbeat(now_ms, token, request, topics)

    def describe_consumer_groups(
        self, group_ids: Iterable[str]
    ) -> tuple[ConsumerGroupDescription, ...]:
        return tuple(self._consumer_groups.describe(group_id) for group_id in group_ids)

    def _log_consumer_group_deletion(self, _now_ms: int, error: ErrorCode | None) -> list[Effect]:
        if error is not None:
            log.warning("consumer group tombstones not written (%s)", error.name)
        return []

    # ============================================================ OffsetDelete

    def delete_offsets(
        self,
        now_ms: int,
        token: RequestToken,
        group_id: str,
        partitions: Sequence[TopicPartition],
    ) -> list[Effect]:
        """OffsetDelete (KIP-496): any offset of an Empty group; of a consumer group
        with members, only offsets of topics no member subscribes to
        (GROUP_SUBSCRIBED_TO_TOPIC); other non-empty groups: NON_EMPTY_GROUP."""
        effects = self._advance(now_ms)
        return effects + self._offsets.delete(token, group_id, partitions)
