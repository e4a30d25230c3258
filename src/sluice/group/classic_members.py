"""SyncGroup, Heartbeat and LeaveGroup in the classic group protocol: a member of the
current generation taking its assignment (the leader's written to the log first),
keeping its session alive or learning of a rebalance, and leaving.

It owns no state: functions over the groups of a
:class:`~sluice.group.classic_groups.ClassicGroups`, returning the effects for the shard
(the rebalance they may start is :mod:`~sluice.group.classic_rebalance`'s).
"""

from __future__ import annotations

import logging

from sluice.common.errors import ErrorCode
from sluice.coordinator.api import Effect, Reply, RequestToken
from sluice.group.api import (
    NO_MEMBER_ID,
    HeartbeatRequest,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeftMember,
    SyncGroupRequest,
    SyncGroupResponse,
)
from sluice.group.classic_groups import ClassicGroups, group_id_is_valid, store_error
from sluice.group.classic_rebalance import (
    maybe_complete_join,
    maybe_prepare_rebalance,
    propagate_assignment,
    remove_member_and_update,
    reset_and_propagate_assignment_error,
)
from sluice.group.state import Group, GroupState

log = logging.getLogger(__name__)

_PREPARING = GroupState.PREPARING_REBALANCE
_COMPLETING = GroupState.COMPLETING_REBALANCE
_STABLE = GroupState.STABLE
_DEAD = GroupState.DEAD


def _is_inconsistent(given: str | None, known: str | None) -> bool:
    """A protocol type or name a member sent that disagrees with the group's (either
    side unknown agrees with anything, as in Kafka)."""
    return given is not None and known is not None and given != known


def sync(
    classic: ClassicGroups, now_ms: int, token: RequestToken, request: SyncGroupRequest
) -> list[Effect]:
    def answer(error: ErrorCode, assignment: bytes = b"") -> list[Effect]:
        return [Reply(token, SyncGroupResponse(error, assignment))]

    if not group_id_is_valid(request.group_id, allow_empty=False):
        return answer(ErrorCode.invalid_group_id)
    group = classic.groups.get(request.group_id)
    if group is None:
        return answer(ErrorCode.unknown_member_id)
    if group.is_in(_DEAD):
        return answer(ErrorCode.coordinator_not_available)
    error = group.validate_member(request.member_id, request.group_instance_id)
    if error is not None:
        return answer(error)
    if request.generation_id != group.generation_id:
        return answer(ErrorCode.illegal_generation)
    if _is_inconsistent(request.protocol_type, group.protocol_type) or _is_inconsistent(
        request.protocol_name, group.protocol_name
    ):
        return answer(ErrorCode.inconsistent_group_protocol)
    if group.is_in(_PREPARING):
        return answer(ErrorCode.rebalance_in_progress)
    member = group.members[request.member_id]
    group.pending_sync_members.discard(member.member_id)
    if group.is_in(_STABLE):
        classic.heard_from(group, member, now_ms)
        return answer(ErrorCode.none, member.assignment)
    assert group.is_in(_COMPLETING), f"members in a {group.state.value} group"
    effects: list[Effect] = []
    if member.sync_token is not None:
        superseded = SyncGroupResponse(ErrorCode.rebalance_in_progress)
        effects.append(Reply(member.sync_token, superseded))
    member.sync_token = token
    if member.member_id != group.leader_id:
        return effects
    assignments = dict(request.assignments)
    generation_id = group.generation_id

    def on_stored(completed_ms: int, error: ErrorCode | None) -> list[Effect]:
        if not (group.is_in(_COMPLETING) and group.generation_id == generation_id):
            return []  # a new rebalance began; parked syncs were answered then
        if error is not None:
            log.warning(
                "group %s: could not store the assignment of generation %d: %s",
                group.group_id,
                generation_id,
                error.name,
            )
            effects = reset_and_propagate_assignment_error(
                classic, group, store_error(error), completed_ms
            )
            return effects + maybe_prepare_rebalance(classic, group, completed_ms)
        for m in group.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        effects = propagate_assignment(classic, group, ErrorCode.none, completed_ms)
        group.transition_to(_STABLE, completed_ms)
        return effects

    effects.append(classic.append([classic.group_record(group, assignments)], on_stored))
    return effects


def heartbeat(classic: ClassicGroups, now_ms: int, request: HeartbeatRequest) -> ErrorCode:
    if not group_id_is_valid(request.group_id, allow_empty=False):
        return ErrorCode.invalid_group_id
    group = classic.groups.get(request.group_id)
    if group is None:
        return ErrorCode.unknown_member_id
    if group.is_in(_DEAD):
        return ErrorCode.coordinator_not_available
    error = group.validate_member(request.member_id, request.group_instance_id)
    if error is not None:
        return error
    if request.generation_id != group.generation_id:
        return ErrorCode.illegal_generation
    classic.heard_from(group, group.members[request.member_id], now_ms)
    if group.is_in(_PREPARING):
        return ErrorCode.rebalance_in_progress
    return ErrorCode.none


def leave(
    classic: ClassicGroups, now_ms: int, token: RequestToken, request: LeaveGroupRequest
) -> list[Effect]:
    """LeaveGroup for a classic group, its members one by one."""
    effects: list[Effect] = []
    group = classic.groups.get(request.group_id)
    if group is not None and group.is_in(_DEAD):
        response = LeaveGroupResponse(ErrorCode.coordinator_not_available)
        return [*effects, Reply(token, response)]
    results = []
    for identity in request.members:
        if group is None:
            error = ErrorCode.unknown_member_id
        else:
            error, removed = _leave_one(
                classic, group, identity.member_id, identity.group_instance_id, now_ms
            )
            effects += removed
        results.append(LeftMember(identity.member_id, identity.group_instance_id, error))
    return [*effects, Reply(token, LeaveGroupResponse(ErrorCode.none, tuple(results)))]


def _leave_one(
    classic: ClassicGroups, group: Group, member_id: str, group_instance_id: str | None, now_ms: int
) -> tuple[ErrorCode, list[Effect]]:
    if member_id == NO_MEMBER_ID:
        # Removal by instance id alone (an administrator removing a static member).
        current = None if group_instance_id is None else group.static_members.get(group_instance_id)
        if current is None:
            return ErrorCode.unknown_member_id, []
        member_id = current
    elif member_id in group.pending_members:
        del group.pending_members[member_id]
        effects = maybe_complete_join(classic, group, now_ms)
        classic.drop_if_unused(group)
        return ErrorCode.none, effects
    else:
        error = group.validate_member(member_id, group_instance_id)
        if error is not None:
            return error, []
    log.info("group %s: member %s left", group.group_id, member_id)
    return ErrorCode.none, remove_member_and_update(
        classic, group, group.members[member_id], now_ms
    )
