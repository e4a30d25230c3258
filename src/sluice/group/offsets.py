"""Committed offsets of the groups of one ``__consumer_offsets`` partition: OffsetCommit,
TxnOffsetCommit, OffsetFetch, OffsetDelete and offset expiry, and the offsets replayed
at load.

Offsets are kept in their classic group (:class:`~sluice.group.state.Group`, hosted by
:class:`~sluice.group.classic_groups.ClassicGroups`), a consumer group's (KIP-848) in a
classic group's place that holds nothing else. A commit becomes visible only once its
records are in the log. The shard checks the group id and routes share and consumer
groups before it asks here.

State owned here: the offsets committed by open transactions, per producer, invisible
to OffsetFetch (which answers UNSTABLE_OFFSET_COMMIT for them when asked for stable
offsets) until the transaction's marker lands in the partition, then committed offsets
or dropped on an abort; and the position of each offset record in the log, which
decides between a transactional commit and a later plain one, as Kafka's record
offsets do.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.coordinator.api import Append, Effect, Record, Reply, RequestToken
from sluice.group.api import (
    NO_MEMBER_ID,
    FetchedOffset,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
)
from sluice.group.classic_groups import (
    ClassicGroups,
    delete_error,
    group_id_is_valid,
    tombstone,
)
from sluice.group.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_offset_commit_value,
    encode_key,
    encode_offset_commit_value,
)
from sluice.group.state import CONSUMER_PROTOCOL_TYPE, Group, GroupState
from sluice.group.write_errors import TOO_LARGE, write_error

log = logging.getLogger(__name__)

EXPIRY_RECORDS_PER_APPEND_MAX = 1_000
"""Tombstones written by one offset-expiry append; more are split over several appends
so no single write grows past what the log accepts in one batch."""

_EMPTY = GroupState.EMPTY
_COMPLETING = GroupState.COMPLETING_REBALANCE
_DEAD = GroupState.DEAD


def _commit_error(error: ErrorCode) -> ErrorCode:
    """For an offset commit: too large means the commit is."""
    if error in TOO_LARGE:
        return ErrorCode.invalid_commit_offset_size
    return write_error(error) or error


def commit_refused(token: RequestToken, request: OffsetCommitRequest, error: ErrorCode) -> Reply:
    """The answer to a commit refused as a whole: ``error`` for each of its partitions."""
    errors = tuple((partition, error) for partition, _ in request.offsets)
    return Reply(token, OffsetCommitResponse(errors))


class Offsets:
    """The committed offsets of one partition's groups. See the module docstring."""

    def __init__(self, classic: ClassicGroups) -> None:
        self._classic = classic
        self._transactional_offsets: dict[
            int, dict[tuple[str, TopicPartition], tuple[OffsetCommitValue | None, int]]
        ] = {}
        """Producer id → offsets its open transaction committed (None: a tombstone),
        each with its record's log position."""
        self._log_position = 0
        """Offset records of the partition so far, in log order (replayed, then
        committed: the runtime reports appends in log order). Kafka compares the
        offsets of the records in the log; this count orders them the same way."""

    # ================================================================ loading

    def replay(self, key: OffsetCommitKey, value: bytes | None) -> None:
        """An offset record of the partition (not in a transaction), in log order."""
        partition = TopicPartition(key.topic, key.partition)
        if value is None:
            group = self._classic.groups.get(key.group_id)
            if group is not None:
                group.offsets.pop(partition, None)
            return
        offset = decode_offset_commit_value(value)
        group = self._classic.groups.get(key.group_id)
        if group is None:
            group = self._classic.groups[key.group_id] = Group(key.group_id, -1)
        group.offsets[partition] = offset
        group.offset_positions[partition] = self._next_log_position()

    def replay_transactional(self, producer_id: int, key: bytes, value: bytes | None) -> None:
        """An offset committed inside a transaction: pending until its marker."""
        decoded = decode_key(key)
        if not isinstance(decoded, OffsetCommitKey):
            return  # only offsets are ever written in a transaction
        partition = TopicPartition(decoded.topic, decoded.partition)
        pending = self._transactional_offsets.setdefault(producer_id, {})
        pending[(decoded.group_id, partition)] = (
            None if value is None else decode_offset_commit_value(value),
            self._next_log_position(),
        )

    def _next_log_position(self) -> int:
        self._log_position += 1
        return self._log_position

    # ========================================================= transactions

    def finish_transaction(self, producer_id: int, committed: bool, now_ms: int) -> None:
        pending = self._transactional_offsets.pop(producer_id, None)
        if pending is None or not committed:
            return
        for (group_id, partition), (value, position) in pending.items():
            group = self._classic.groups.get(group_id)
            if (
                group is not None
                and partition in group.offsets
                and group.offset_positions.get(partition, 0) > position
            ):
                continue  # a commit written after this one wins, as in Kafka
            if value is None:
                if group is not None:
                    group.offsets.pop(partition, None)
                continue
            if group is None or group.is_in(_DEAD):
                group = self._classic.groups[group_id] = Group(group_id, now_ms)
            group.offsets[partition] = value
            group.offset_positions[partition] = position

    def has_pending_transactional_offset(self, group_id: str, partition: TopicPartition) -> bool:
        return any(
            (group_id, partition) in pending for pending in self._transactional_offsets.values()
        )

    # ========================================================= OffsetCommit

    def commit(
        self,
        now_ms: int,
        token: RequestToken,
        request: OffsetCommitRequest,
        transaction: tuple[int, int] | None,
        *,
        consumer_group: bool = False,
    ) -> list[Effect]:
        """OffsetCommit, or TxnOffsetCommit with ``transaction`` (producer id and epoch),
        once the shard has checked the group id. ``consumer_group``: the id is a
        consumer group's (KIP-848) and its member and epoch were checked already; its
        offsets are kept in a classic group's place, which holds nothing else."""

        def answer_all(error: ErrorCode) -> list[Effect]:
            return [commit_refused(token, request, error)]

        group = self._classic.groups.get(request.group_id)
        if consumer_group:
            if group is None or group.is_in(_DEAD):
                group = self._classic.groups[request.group_id] = Group(request.group_id, now_ms)
        elif group is None:
            if request.generation_id >= 0 and transaction is None:
                return answer_all(ErrorCode.illegal_generation)
            # A simple consumer (or an administrator) storing offsets without a group.
            group = self._classic.groups[request.group_id] = Group(request.group_id, now_ms)
        elif transaction is not None and request.generation_id < 0:
            pass  # a producer committing for a group it is not a member of (v0–2)
        else:
            error = self._validate_offset_commit(group, request)
            if error is not None:
                return answer_all(error)
            member = group.members.get(request.member_id)
            if member is not None:
                self._classic.heard_from(group, member, now_ms)
        expire_timestamp_ms = now_ms + request.retention_ms if request.retention_ms >= 0 else -1
        results: list[ErrorCode | None] = []
        accepted: list[tuple[TopicPartition, OffsetCommitValue]] = []
        records: list[Record] = []
        for partition, offset in request.offsets:
            metadata = offset.metadata or ""
            if len(metadata.encode()) > self._classic.config.offset_metadata_bytes_max:
                results.append(ErrorCode.offset_metadata_too_large)
                continue
            value = OffsetCommitValue(
                offset=offset.offset,
                leader_epoch=offset.leader_epoch,
                metadata=metadata,
                commit_timestamp_ms=now_ms,
                expire_timestamp_ms=expire_timestamp_ms,
            )
            key = OffsetCommitKey(group.group_id, partition.topic, partition.partition)
            records.append((encode_key(key), encode_offset_commit_value(value)))
            accepted.append((partition, value))
            results.append(None)
        if not accepted:
            self._classic.drop_if_unused(group)
            return answer_all(ErrorCode.offset_metadata_too_large)
        for partition, _ in accepted:
            group.pending_offset_commits[partition] += 1

        def on_committed(_completed_ms: int, error: ErrorCode | None) -> list[Effect]:
            for partition, value in accepted:
                group.pending_offset_commits[partition] -= 1
                if group.pending_offset_commits[partition] <= 0:
                    del group.pending_offset_commits[partition]
                if error is not None:
                    continue
                position = self._next_log_position()
                if transaction is None:
                    group.offsets[partition] = value
                    group.offset_positions[partition] = position
                else:
                    pending = self._transactional_offsets.setdefault(transaction[0], {})
                    pending[(group.group_id, partition)] = (value, position)
            outcome = ErrorCode.none if error is None else _commit_error(error)
            errors = tuple(
                (partition, outcome if result is None else result)
                for (partition, _), result in zip(request.offsets, results, strict=True)
            )
            if error is not None:
                self._classic.drop_if_unused(group)
            return [Reply(token, OffsetCommitResponse(errors))]

        return [self._classic.append(records, on_committed, transaction)]

    def _validate_offset_commit(
        self, group: Group, request: OffsetCommitRequest
    ) -> ErrorCode | None:
        """Kafka's rules: a commit without a generation is a simple consumer's, allowed
        only while the group is Empty; otherwise the member and its generation must be
        current, and not while the new generation is still being assigned."""
        if group.is_in(_DEAD):
            return ErrorCode.coordinator_not_available
        if request.generation_id < 0 and group.is_in(_EMPTY):
            return None
        if (
            request.generation_id >= 0
            or request.member_id != NO_MEMBER_ID
            or request.group_instance_id is not None
        ):
            error = group.validate_member(request.member_id, request.group_instance_id)
            if error is not None:
                return error
            if request.generation_id != group.generation_id:
                return ErrorCode.illegal_generation
        elif not group.is_in(_EMPTY):
            return ErrorCode.unknown_member_id
        if group.is_in(_COMPLETING):
            return ErrorCode.rebalance_in_progress
        return None

    # ========================================================== OffsetFetch

    def fetch(
        self, group_id: str, partitions: Iterable[TopicPartition] | None, require_stable: bool
    ) -> OffsetFetchResponse:
        """Committed offsets (only those in the log). ``partitions`` None: all of them.
        ``require_stable``: a partition with an offset pending in an open transaction
        answers UNSTABLE_OFFSET_COMMIT (the consumer retries)."""
        group = self._classic.groups.get(group_id)
        offsets = {} if group is None or group.is_in(_DEAD) else group.offsets
        if partitions is None:
            wanted: Iterable[TopicPartition] = sorted(offsets)
        else:
            wanted = partitions
        fetched = []
        for partition in wanted:
            value = offsets.get(partition)
            if require_stable and self.has_pending_transactional_offset(group_id, partition):
                fetched.append(FetchedOffset(partition, error=ErrorCode.unstable_offset_commit))
            elif value is None:
                fetched.append(FetchedOffset(partition))
            else:
                fetched.append(
                    FetchedOffset(partition, value.offset, value.leader_epoch, value.metadata)
                )
        return OffsetFetchResponse(ErrorCode.none, tuple(fetched))

    # ========================================================= OffsetDelete

    def delete(
        self, token: RequestToken, group_id: str, partitions: Sequence[TopicPartition]
    ) -> list[Effect]:
        """OffsetDelete (KIP-496): any offset of an Empty group; of a consumer group
        with members, only offsets of topics no member subscribes to
        (GROUP_SUBSCRIBED_TO_TOPIC); other non-empty groups: NON_EMPTY_GROUP."""

        def answer(response: OffsetDeleteResponse) -> list[Effect]:
            return [Reply(token, response)]

        if not group_id_is_valid(group_id, allow_empty=True):
            return answer(OffsetDeleteResponse(ErrorCode.invalid_group_id))
        group = self._classic.groups.get(group_id)  # a share group id is not found here either
        if group is None or group.is_in(_DEAD):
            return answer(OffsetDeleteResponse(ErrorCode.group_id_not_found))
        if not group.is_in(_EMPTY) and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return answer(OffsetDeleteResponse(ErrorCode.non_empty_group))
        results: list[ErrorCode | None] = []
        removing: set[TopicPartition] = set()
        for partition in partitions:
            if not group.is_in(_EMPTY) and group.is_subscribed_to(partition.topic):
                results.append(ErrorCode.group_subscribed_to_topic)
                continue
            results.append(None)
            if partition in group.offsets or group.pending_offset_commits[partition]:
                removing.add(partition)

        def response(outcome: ErrorCode) -> OffsetDeleteResponse:
            errors = tuple(
                (partition, outcome if result is None else result)
                for partition, result in zip(partitions, results, strict=True)
            )
            return OffsetDeleteResponse(ErrorCode.none, errors)

        if not removing:
            return answer(response(ErrorCode.none))
        ordered = sorted(removing)
        records = [
            tombstone(OffsetCommitKey(group.group_id, p.topic, p.partition)) for p in ordered
        ]

        def on_deleted(_completed_ms: int, error: ErrorCode | None) -> list[Effect]:
            if error is None:
                for partition in ordered:
                    group.offsets.pop(partition, None)
                return [Reply(token, response(ErrorCode.none))]
            return [Reply(token, response(delete_error(error)))]

        return [self._classic.append(records, on_deleted)]

    # =============================================================== expiry

    def expire(self, now_ms: int) -> list[Effect]:
        """Tombstones for offsets past retention, and for Empty groups left with no
        offsets (those become Dead until the tombstones are committed)."""
        retention_ms = self._classic.config.offsets_retention_ms
        steps: list[tuple[Record, Group, TopicPartition | None]] = []
        for group in list(self._classic.groups.values()):
            if group.is_in(_DEAD):
                continue
            expired = group.expired_offsets(now_ms, retention_ms)
            for partition in expired:
                key = OffsetCommitKey(group.group_id, partition.topic, partition.partition)
                steps.append((tombstone(key), group, partition))
            if (
                group.is_in(_EMPTY)
                and len(expired) == len(group.offsets)
                and not group.pending_offset_commits
                and not group.pending_members
            ):
                steps.append((tombstone(GroupMetadataKey(group.group_id)), group, None))
        if steps:
            log.info("offset expiry: %d tombstone(s)", len(steps))
        appends: list[Effect] = []
        for start in range(0, len(steps), EXPIRY_RECORDS_PER_APPEND_MAX):
            chunk = steps[start : start + EXPIRY_RECORDS_PER_APPEND_MAX]
            appends.append(self._append_expiry(chunk, now_ms))
        return appends

    def _append_expiry(
        self, chunk: list[tuple[Record, Group, TopicPartition | None]], now_ms: int
    ) -> Append:
        removed_offsets = [
            (group, partition, group.offsets[partition])
            for _, group, partition in chunk
            if partition is not None
        ]
        dying: list[tuple[Group, int]] = []
        for _, group, partition in chunk:
            if partition is None:
                dying.append((group, group.state_timestamp_ms))
                group.transition_to(_DEAD, now_ms)

        def on_expired(_completed_ms: int, error: ErrorCode | None) -> list[Effect]:
            if error is None:
                for group, partition, value in removed_offsets:
                    if group.offsets.get(partition) is value:
                        del group.offsets[partition]
            else:
                log.warning("offset expiry: tombstones not written (%s)", error.name)
            self._classic.finish_removal(dying, error)
            return []

        return self._classic.append([record for record, _, _ in chunk], on_expired)
