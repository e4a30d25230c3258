"""Share-group membership: the share groups of one ``__consumer_offsets`` partition.

Part of the group coordinator's shard (:class:`~sluice.group.coordinator.GroupCoordinator`
owns one :class:`ShareGroups` and hands it its operations, records and timers), and as
deterministic: no I/O, no clock, every operation takes ``now_ms`` and returns effects.
See :mod:`~sluice.group.share_group` for the states and epochs::

    ShareGroupHeartbeat ──▶ heartbeat(now, token, request)
                              member joins / leaves / changes subscription, or a
                              subscribed topic changed: group epoch + 1, assignment
                              computed again, the group's record appended
                     ◀──── [Append(n, record)] ... append_completed: [Reply(token, ...)]
                           or at once [Reply(token, ...)] when nothing is written
    poll(now) ───────────▶ members past their session timeout removed (epoch + 1)

A heartbeat that changes the group is answered once its record is committed, so the
epoch a member is given is in the log. If the write fails the member is told the error
(and retries); the in-memory epoch stays ahead, which is harmless: epochs only go up.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from sluice.common.errors import ErrorCode
from sluice.coordinator.api import Append, Effect, Record, Reply, RequestToken
from sluice.group.api import (
    JOIN_MEMBER_EPOCH,
    LEAVE_MEMBER_EPOCH,
    GroupListing,
    ShareAssignedTopic,
    ShareDescribedMember,
    ShareGroupDescription,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from sluice.group.config import GROUP_ID_BYTES_MAX, GroupConfig
from sluice.group.records import (
    STRING_BYTES_MAX,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    encode_key,
    encode_share_group_metadata_value,
)
from sluice.group.share_assignor import ASSIGNOR_NAME, assign
from sluice.group.share_group import (
    SHARE_GROUP_TYPE,
    ShareGroup,
    ShareMember,
    ShareTopic,
)
from sluice.group.write_errors import TOO_LARGE, write_error

log = logging.getLogger(__name__)

SESSION_TIMEOUT_CONFIG = "share.session.timeout.ms"
HEARTBEAT_INTERVAL_CONFIG = "share.heartbeat.interval.ms"

CompletionHandler = Callable[[int, ErrorCode | None], list[Effect]]
AppendFunction = Callable[[Sequence[Record], CompletionHandler], Append]
"""The shard's way to ask for a write (``GroupCoordinator._append``)."""

_SessionTimer = tuple[int, int, str, str]
"""(deadline ms, sequence, group id, member id); stale once the member heartbeats again."""


def _write_error(error: ErrorCode) -> ErrorCode:
    """What a member is told when the group's record could not be written (Kafka's
    mapping for coordinator writes)."""
    if error is ErrorCode.request_timed_out:
        return ErrorCode.coordinator_not_available
    if error in TOO_LARGE:
        return ErrorCode.unknown_server_error
    return write_error(error) or error


def _assigned(
    assignment: Mapping[str, frozenset[int]], topics: Mapping[str, ShareTopic]
) -> tuple[ShareAssignedTopic, ...]:
    return tuple(
        ShareAssignedTopic(topics[name].topic_id, name, tuple(sorted(partitions)))
        for name, partitions in sorted(assignment.items())
        if name in topics
    )


class ShareGroups:
    """Every share group of one ``__consumer_offsets`` partition. See the module
    docstring."""

    def __init__(
        self,
        config: GroupConfig,
        append: AppendFunction,
        is_classic_group: Callable[[str], bool],
    ) -> None:
        self._config = config
        self._append = append
        self._is_classic_group = is_classic_group
        self._groups: dict[str, ShareGroup] = {}
        self._timers: list[_SessionTimer] = []
        self._timer_sequence = itertools.count()

    # ================================================================ inspection

    def group(self, group_id: str) -> ShareGroup | None:
        """The group's state, for tests and diagnostics (do not modify it)."""
        return self._groups.get(group_id)

    def __contains__(self, group_id: str) -> bool:
        return group_id in self._groups

    def groups(self) -> list[ShareGroup]:
        """Every share group here, for metrics and diagnostics (do not modify them)."""
        return list(self._groups.values())

    # =================================================================== loading

    def replay(self, group_id: str, value: ShareGroupMetadataValue | None) -> None:
        if value is None:
            self._groups.pop(group_id, None)
            return
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = ShareGroup(group_id)
        group.group_epoch = value.epoch
        group.assignment_epoch = value.epoch
        group.subscribed_topic_names_ever = set(value.subscribed_topic_names)

    # ==================================================================== timers

    def next_deadline_ms(self) -> int | None:
        return self._timers[0][0] if self._timers else None

    def advance(self, now_ms: int, last_due_ms: int) -> list[Effect]:
        """Expire the members whose session ended at or before ``last_due_ms``."""
        effects: list[Effect] = []
        while self._timers and self._timers[0][0] <= last_due_ms:
            _, _, group_id, member_id = heapq.heappop(self._timers)
            group = self._groups.get(group_id)
            member = None if group is None else group.members.get(member_id)
            if group is None or member is None or member.session_deadline_ms() > last_due_ms:
                continue
            log.info("share group %s: member %s expired", group_id, member_id)
            del group.members[member_id]
            effects += self._update_and_store(group, group.topics, None)
        return effects

    def _heard_from(self, group: ShareGroup, member: ShareMember, now_ms: int) -> None:
        member.last_heartbeat_ms = now_ms
        entry = (member.session_deadline_ms(), next(self._timer_sequence))
        heapq.heappush(self._timers, (*entry, group.group_id, member.member_id))

    # ============================================================ the heartbeat

    def heartbeat(
        self, now_ms: int, token: RequestToken, request: ShareGroupHeartbeatRequest
    ) -> list[Effect]:
        def fail(error: ErrorCode, message: str | None = None) -> list[Effect]:
            return [Reply(token, ShareGroupHeartbeatResponse(error, message))]

        problem = self._invalid(request)
        if problem is not None:
            return fail(ErrorCode.invalid_request, problem)
        group_id = request.group_id
        if self._is_classic_group(group_id):
            # Kafka's answer: one id names one group of one type.
            return fail(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")
        group = self._groups.get(group_id)
        if group is not None and group.deleting:
            return fail(ErrorCode.coordinator_not_available, f"Group {group_id} is being deleted.")
        epoch = request.member_epoch
        if group is None and epoch != JOIN_MEMBER_EPOCH:
            # UNKNOWN_MEMBER_ID, not GROUP_ID_NOT_FOUND: clients rejoin on the former
            # (librdkafka treats the latter as fatal).
            return fail(ErrorCode.unknown_member_id, f"Share group {group_id} has no members.")
        if group is None:
            group = self._groups[group_id] = ShareGroup(group_id)
        member = group.members.get(request.member_id)
        if epoch == LEAVE_MEMBER_EPOCH:
            if member is None:
                return fail(ErrorCode.unknown_member_id)
            del group.members[member.member_id]
            log.info("share group %s: member %s left", group_id, member.member_id)
            response = ShareGroupHeartbeatResponse(
                ErrorCode.none, member_id=member.member_id, member_epoch=LEAVE_MEMBER_EPOCH
            )
            return self._update_and_store(group, request.topics, (token, response))
        changed = False
        if epoch == JOIN_MEMBER_EPOCH:
            if member is None:
                if len(group.members) >= self._config.share_group_size_max:
                    return fail(
                        ErrorCode.group_max_size_reached,
                        f"Share group {group_id} has {len(group.members)} members.",
                    )
                member = group.members[request.member_id] = ShareMember(
                    member_id=request.member_id,
                    client_id=request.client_id,
                    client_host=request.client_host,
                    rack_id=request.rack_id,
                    subscribed_topic_names=frozenset(),
                    session_timeout_ms=0,
                    last_heartbeat_ms=now_ms,
                )
                log.info("share group %s: member %s joined", group_id, member.member_id)
                changed = True
            else:
                member.member_epoch = JOIN_MEMBER_EPOCH  # gets the current assignment again
        elif member is None:
            return fail(ErrorCode.unknown_member_id)
        elif epoch != member.member_epoch:
            return fail(
                ErrorCode.fenced_member_epoch,
                f"The member's epoch is {member.member_epoch}, not {epoch}.",
            )
        if request.subscribed_topic_names is not None:
            subscribed = frozenset(request.subscribed_topic_names)
            changed |= subscribed != member.subscribed_topic_names
            member.subscribed_topic_names = subscribed
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        member.client_id, member.client_host = request.client_id, request.client_host
        member.session_timeout_ms = self._int_config(
            request, SESSION_TIMEOUT_CONFIG, self._config.share_session_timeout_ms
        )
        self._heard_from(group, member, now_ms)
        topics_changed = self._subscribed_topics(group, request.topics) != group.topics
        full_state = epoch == JOIN_MEMBER_EPOCH or request.subscribed_topic_names is not None
        if not changed and not topics_changed:
            return [Reply(token, self._deliver(group, member, request, full_state))]

        def answer(now: int, error: ErrorCode | None) -> list[Effect]:
            if error is not None:
                return fail(_write_error(error))
            if group.members.get(member.member_id) is not member:
                return fail(ErrorCode.unknown_member_id)  # expired or left meanwhile
            return [Reply(token, self._deliver(group, member, request, full_state))]

        return self._update_and_store(group, request.topics, answer)

    @staticmethod
    def _invalid(request: ShareGroupHeartbeatRequest) -> str | None:
        """Kafka's checks of a ShareGroupHeartbeat; the problem, or None."""
        if not request.group_id:
            return "GroupId can't be empty."
        if len(request.group_id.encode()) > GROUP_ID_BYTES_MAX:
            return "GroupId is too long."
        if not request.member_id:
            return "MemberId can't be empty."
        if len(request.member_id.encode()) > STRING_BYTES_MAX:
            return "MemberId is too long."
        if request.member_epoch < LEAVE_MEMBER_EPOCH:
            return f"MemberEpoch is {request.member_epoch}."
        if request.member_epoch == JOIN_MEMBER_EPOCH and not request.subscribed_topic_names:
            return "SubscribedTopicNames must be set in first request."
        names = request.subscribed_topic_names or ()
        if any(not name or len(name.encode()) > STRING_BYTES_MAX for name in names):
            return "SubscribedTopicNames has an empty or too long name."
        return None

    def _int_config(self, request: ShareGroupHeartbeatRequest, name: str, default: int) -> int:
        text = request.group_configs.get(name)
        try:
            return default if text is None else int(text)
        except ValueError:
            log.warning("share group %s: %s=%r is not an integer", request.group_id, name, text)
            return default

    def _deliver(
        self,
        group: ShareGroup,
        member: ShareMember,
        request: ShareGroupHeartbeatRequest,
        full_state: bool,
    ) -> ShareGroupHeartbeatResponse:
        """The answer to a member's heartbeat; it takes the group's assignment now (no
        revocation to wait for: partitions of a share group are not exclusive)."""
        moved = member.member_epoch != group.assignment_epoch
        if moved:
            member.member_epoch = group.assignment_epoch
            member.assignment = dict(group.target_assignment.get(member.member_id, {}))
        return ShareGroupHeartbeatResponse(
            ErrorCode.none,
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self._int_config(
                request, HEARTBEAT_INTERVAL_CONFIG, self._config.share_heartbeat_interval_ms
            ),
            assignment=_assigned(member.assignment, group.topics) if moved or full_state else None,
        )

    @staticmethod
    def _subscribed_topics(
        group: ShareGroup, topics: Mapping[str, ShareTopic]
    ) -> dict[str, ShareTopic]:
        subscribed = group.subscribed_topic_names()
        return {name: topics[name] for name in sorted(subscribed) if name in topics}

    def _update_and_store(
        self,
        group: ShareGroup,
        topics: Mapping[str, ShareTopic],
        then: CompletionHandler | tuple[RequestToken, ShareGroupHeartbeatResponse] | None,
    ) -> list[Effect]:
        """Bump the group epoch, compute the assignment again, write the group's record;
        ``then`` answers once it is written (a fixed reply, or a function)."""
        group.topics = self._subscribed_topics(group, topics)
        group.group_epoch += 1
        previous = group.target_assignment
        group.target_assignment = assign(
            {m.member_id: m.subscribed_topic_names for m in group.members.values()},
            {name: topic.partition_count for name, topic in group.topics.items()},
            previous,
        )
        group.assignment_epoch = group.group_epoch
        group.subscribed_topic_names_ever |= group.subscribed_topic_names()
        log.info(
            "share group %s: epoch %d, %d member(s)",
            group.group_id,
            group.group_epoch,
            len(group.members),
        )

        def completed(now_ms: int, error: ErrorCode | None) -> list[Effect]:
            if error is not None:
                log.warning(
                    "share group %s: epoch %d not written (%s)",
                    group.group_id,
                    group.group_epoch,
                    error.name,
                )
            if then is None:
                return []
            if isinstance(then, tuple):
                token, response = then
                if error is not None:
                    response = ShareGroupHeartbeatResponse(_write_error(error))
                return [Reply(token, response)]
            return then(now_ms, error)

        return [self._append([self._record(group)], completed)]

    @staticmethod
    def _record(group: ShareGroup) -> Record:
        value = ShareGroupMetadataValue(
            group.group_epoch, tuple(sorted(group.subscribed_topic_names_ever))
        )
        key = encode_key(ShareGroupMetadataKey(group.group_id))
        return (key, encode_share_group_metadata_value(value))

    # ================================================================= describe

    def describe(self, group_ids: Iterable[str]) -> tuple[ShareGroupDescription, ...]:
        """ShareGroupDescribe: Kafka's GROUP_ID_NOT_FOUND (with its messages) for ids
        that are not share groups."""
        descriptions = []
        for group_id in group_ids:
            group = self._groups.get(group_id)
            if not group_id or len(group_id.encode()) > GROUP_ID_BYTES_MAX:
                descriptions.append(ShareGroupDescription(group_id, ErrorCode.invalid_group_id))
            elif group is None or group.deleting:
                message = (
                    f"Group {group_id} is not a share group."
                    if self._is_classic_group(group_id)
                    else f"Group {group_id} not found."
                )
                descriptions.append(
                    ShareGroupDescription(group_id, ErrorCode.group_id_not_found, message)
                )
            else:
                descriptions.append(self._describe(group))
        return tuple(descriptions)

    @staticmethod
    def _describe(group: ShareGroup) -> ShareGroupDescription:
        return ShareGroupDescription(
            group_id=group.group_id,
            error=ErrorCode.none,
            state=group.state.value,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=ASSIGNOR_NAME,
            members=tuple(
                ShareDescribedMember(
                    member_id=m.member_id,
                    rack_id=m.rack_id,
                    member_epoch=m.member_epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=tuple(sorted(m.subscribed_topic_names)),
                    assignment=_assigned(m.assignment, group.topics),
                )
                for m in group.members.values()
            ),
        )

    def list_groups(self, wanted_states: set[str] | None) -> list[GroupListing]:
        """Share groups but Dead ones; ``wanted_states`` (lower-case names) filters."""
        listings = []
        for group_id, group in self._groups.items():
            state = group.state.value
            if group.deleting or (wanted_states is not None and state.lower() not in wanted_states):
                continue
            listings.append(GroupListing(group_id, SHARE_GROUP_TYPE, state, SHARE_GROUP_TYPE))
        return listings

    # =================================================================== delete

    def deletion_error(self, group_id: str) -> ErrorCode | None:
        """Why the share group cannot be deleted now, or None."""
        group = self._groups[group_id]
        if group.deleting:
            return ErrorCode.group_id_not_found
        if group.members:
            return ErrorCode.non_empty_group
        return None

    def start_deletion(self, group_id: str) -> tuple[Record, tuple[str, ...]]:
        """Mark the group Dead; its tombstone, and the topics whose share-partition
        state goes with it."""
        group = self._groups[group_id]
        group.deleting = True
        tombstone = (encode_key(ShareGroupMetadataKey(group_id)), None)
        return tombstone, tuple(sorted(group.subscribed_topic_names_ever))

    def finish_deletion(self, group_id: str, error: ErrorCode | None) -> None:
        group = self._groups.get(group_id)
        if group is None or not group.deleting:
            return
        if error is None:
            del self._groups[group_id]
            log.info("share group %s: deleted", group_id)
        else:
            log.warning("share group %s: tombstone not written (%s)", group_id, error.name)
            group.deleting = False
