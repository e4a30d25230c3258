"""JoinGroup in the classic group protocol: new members (an id handed out first when the
client asks for one, KIP-394), known members joining again, static members
(KIP-345) replacing their former selves, and ``group.max.size`` (KIP-389).

A JoinGroup either starts or joins a rebalance (:mod:`~sluice.group.classic_rebalance`
parks it until the join phase ends) or is answered at once with the current generation;
a static member that replaces itself in a Stable group gets its new id written first.

It owns no state: functions over the groups of a
:class:`~sluice.group.classic_groups.ClassicGroups`, returning the effects for the shard.
"""

from __future__ import annotations

import logging

from sluice.common.errors import ErrorCode
from sluice.coordinator.api import Effect, Reply, RequestToken
from sluice.group.api import (
    NO_MEMBER_ID,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupResponse,
)
from sluice.group.classic_groups import ClassicGroups, Timer, group_id_is_valid, store_error
from sluice.group.classic_rebalance import (
    maybe_complete_join,
    maybe_prepare_rebalance,
    prepare_rebalance,
    remove_member_and_update,
)
from sluice.group.member import Member
from sluice.group.state import Group, GroupState, JoinWait

log = logging.getLogger(__name__)

_PREPARING = GroupState.PREPARING_REBALANCE
_COMPLETING = GroupState.COMPLETING_REBALANCE
_STABLE = GroupState.STABLE
_DEAD = GroupState.DEAD


def join(
    classic: ClassicGroups,
    now_ms: int,
    token: RequestToken,
    request: JoinGroupRequest,
    *,
    share_group: bool,
) -> list[Effect]:
    """JoinGroup for a classic group (``share_group``: the id is a share group's)."""

    def fail(error: ErrorCode, member_id: str = request.member_id) -> list[Effect]:
        return [Reply(token, JoinGroupResponse(error, member_id=member_id))]

    if not group_id_is_valid(request.group_id, allow_empty=False):
        return fail(ErrorCode.invalid_group_id)
    if share_group:
        return fail(ErrorCode.group_id_not_found)  # Kafka: not a classic group
    config = classic.config
    if not (
        config.session_timeout_ms_min <= request.session_timeout_ms <= config.session_timeout_ms_max
    ):
        return fail(ErrorCode.invalid_session_timeout)
    group = classic.groups.get(request.group_id)
    if group is None:
        if request.member_id != NO_MEMBER_ID:
            return fail(ErrorCode.unknown_member_id)
        group = classic.groups[request.group_id] = Group(request.group_id, now_ms)
    if group.is_in(_DEAD):
        return fail(ErrorCode.coordinator_not_available)
    effects: list[Effect] = []
    if not _accepts_joining_member(classic, group, request):
        member = group.members.get(request.member_id)
        if member is not None:
            effects += remove_member_and_update(classic, group, member, now_ms)
        classic.drop_if_unused(group)
        return effects + fail(ErrorCode.group_max_size_reached, NO_MEMBER_ID)
    names = [name for name, _ in request.protocols]
    if not group.supports_protocols(request.protocol_type, names):
        classic.drop_if_unused(group)
        return fail(ErrorCode.inconsistent_group_protocol)
    if request.member_id == NO_MEMBER_ID:
        effects += _join_new_member(classic, group, now_ms, token, request)
    else:
        effects += _join_known_member(classic, group, now_ms, token, request)
    effects += maybe_complete_join(classic, group, now_ms)
    return effects


def _accepts_joining_member(
    classic: ClassicGroups, group: Group, request: JoinGroupRequest
) -> bool:
    """group.max.size (KIP-389): members already in, or already given an id, keep
    their seat; a new one needs a free seat. During a rebalance only members that
    joined again count, so newcomers can replace members that are gone."""
    size_max = classic.config.group_size_max
    member_id = request.member_id
    if member_id in group.pending_members:
        return True
    instance_id = request.group_instance_id
    if member_id == NO_MEMBER_ID and instance_id in group.static_members:
        return True
    if group.is_in(_PREPARING):
        member = group.members.get(member_id)
        if member is not None and member.awaiting_join:
            return True
        return group.awaiting_join_count() < size_max
    if member_id in group.members:
        return True
    return len(group.members) + len(group.pending_members) < size_max


def _join_new_member(
    classic: ClassicGroups,
    group: Group,
    now_ms: int,
    token: RequestToken,
    request: JoinGroupRequest,
) -> list[Effect]:
    instance_id = request.group_instance_id
    member_id = classic.new_member_id(instance_id if instance_id is not None else request.client_id)
    if instance_id is not None:
        if instance_id in group.static_members:
            return _replace_static_member(classic, group, now_ms, token, request, member_id)
        return _add_member_and_rebalance(classic, group, now_ms, token, request, member_id)
    if request.require_known_member_id:
        deadline = now_ms + request.session_timeout_ms
        group.pending_members[member_id] = deadline
        classic.watch(deadline, group, Timer.PENDING_MEMBER, member_id)
        response = JoinGroupResponse(ErrorCode.member_id_required, member_id=member_id)
        return [Reply(token, response)]
    return _add_member_and_rebalance(classic, group, now_ms, token, request, member_id)


def _join_known_member(
    classic: ClassicGroups,
    group: Group,
    now_ms: int,
    token: RequestToken,
    request: JoinGroupRequest,
) -> list[Effect]:
    def fail(error: ErrorCode) -> list[Effect]:
        return [Reply(token, JoinGroupResponse(error, member_id=request.member_id))]

    if request.member_id in group.pending_members:
        if request.group_instance_id is not None:
            return fail(ErrorCode.unknown_member_id)  # pending ids are only dynamic
        return _add_member_and_rebalance(classic, group, now_ms, token, request, request.member_id)
    error = group.validate_member(request.member_id, request.group_instance_id)
    if error is not None:
        return fail(error)
    member = group.members[request.member_id]
    if group.is_in(_PREPARING):
        return _update_member_and_rebalance(classic, group, member, now_ms, token, request)
    if group.is_in(_COMPLETING):
        if not member.matches(request.protocols):
            return _update_member_and_rebalance(classic, group, member, now_ms, token, request)
        # The member lost our answer: give it again.
        classic.heard_from(group, member, now_ms)
        return [Reply(token, _current_generation(group, member))]
    assert group.is_in(_STABLE), f"members in a {group.state.value} group"
    if member.member_id == group.leader_id or not member.matches(request.protocols):
        # The leader joins again to have the group reassigned (topic metadata changed).
        return _update_member_and_rebalance(classic, group, member, now_ms, token, request)
    classic.heard_from(group, member, now_ms)
    return [Reply(token, _current_generation(group, member))]


def _current_generation(group: Group, member: Member) -> JoinGroupResponse:
    is_leader = member.member_id == group.leader_id
    return JoinGroupResponse(
        error=ErrorCode.none,
        generation_id=group.generation_id,
        protocol_name=group.protocol_name or "",
        leader=group.leader_id or "",
        member_id=member.member_id,
        members=group.current_member_metadata() if is_leader else (),
    )


def _add_member_and_rebalance(
    classic: ClassicGroups,
    group: Group,
    now_ms: int,
    token: RequestToken,
    request: JoinGroupRequest,
    member_id: str,
) -> list[Effect]:
    member = Member(
        member_id=member_id,
        group_instance_id=request.group_instance_id,
        client_id=request.client_id,
        client_host=request.client_host,
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        protocols=request.protocols,
        last_heartbeat_ms=now_ms,
        join_token=token,
        is_new=True,
    )
    if group.is_in(_PREPARING) and group.join_wait is JoinWait.INITIAL_DELAY:
        group.new_member_added = True
    group.add_member(member, request.protocol_type)
    classic.watch_member(group, member)
    return maybe_prepare_rebalance(classic, group, now_ms)


def _park_join(member: Member, token: RequestToken, request: JoinGroupRequest) -> list[Effect]:
    """Make ``token`` the member's waiting JoinGroup, with the request's protocols."""
    effects: list[Effect] = []
    if member.join_token is not None:
        superseded = JoinGroupResponse(ErrorCode.rebalance_in_progress, member_id=member.member_id)
        effects.append(Reply(member.join_token, superseded))
    member.join_token = token
    member.protocols = request.protocols
    member.session_timeout_ms = request.session_timeout_ms
    member.rebalance_timeout_ms = request.rebalance_timeout_ms
    return effects


def _update_member_and_rebalance(
    classic: ClassicGroups,
    group: Group,
    member: Member,
    now_ms: int,
    token: RequestToken,
    request: JoinGroupRequest,
) -> list[Effect]:
    effects = _park_join(member, token, request)
    return effects + maybe_prepare_rebalance(classic, group, now_ms)


def _replace_static_member(
    classic: ClassicGroups,
    group: Group,
    now_ms: int,
    token: RequestToken,
    request: JoinGroupRequest,
    new_member_id: str,
) -> list[Effect]:
    """A static member joined without its member id (its client restarted): it gets
    a new id and the old one is fenced. In Stable, if the group's protocol would
    not change, no rebalance: the new id is written to the log and the member gets
    the current generation (with the old leader id, so a restarted leader does not
    compute an assignment nobody would receive)."""
    instance_id = request.group_instance_id
    assert instance_id is not None
    old_member_id = group.static_members[instance_id]
    member = group.members[old_member_id]
    effects: list[Effect] = []
    if member.join_token is not None:
        fenced = JoinGroupResponse(ErrorCode.fenced_instance_id, member_id=old_member_id)
        effects.append(Reply(member.join_token, fenced))
        member.join_token = None
    if member.sync_token is not None:
        effects.append(Reply(member.sync_token, SyncGroupResponse(ErrorCode.fenced_instance_id)))
        member.sync_token = None
    saved = (member.protocols, member.session_timeout_ms, member.rebalance_timeout_ms)
    current_leader = group.leader_id
    group.replace_static_member(instance_id, new_member_id)
    member.last_heartbeat_ms = now_ms
    effects += _park_join(member, token, request)
    if group.is_in(_PREPARING):
        return effects
    if group.is_in(_COMPLETING):
        # The leader may already be assigning to the old id: rebalance again.
        return effects + prepare_rebalance(classic, group, now_ms)
    assert group.is_in(_STABLE), f"static members in a {group.state.value} group"
    if group.protocol_name != group.select_protocol():
        return effects + prepare_rebalance(classic, group, now_ms)

    def on_stored(completed_ms: int, error: ErrorCode | None) -> list[Effect]:
        if member.join_token != token:
            return []  # answered meanwhile (a rebalance started, or fenced again)
        member.join_token = None
        if error is None:
            response = JoinGroupResponse(
                error=ErrorCode.none,
                generation_id=group.generation_id,
                protocol_name=group.protocol_name or "",
                leader=current_leader or "",
                member_id=member.member_id,
                members=(
                    group.current_member_metadata() if group.leader_id == member.member_id else ()
                ),
            )
            classic.heard_from(group, member, completed_ms)
            return [Reply(token, response)]
        log.warning(
            "group %s: could not store new member id of %s (%s); reverting",
            group.group_id,
            instance_id,
            error.name,
        )
        if group.static_members.get(instance_id) == member.member_id:
            group.replace_static_member(instance_id, old_member_id)
            member.protocols, member.session_timeout_ms, member.rebalance_timeout_ms = saved
        classic.heard_from(group, member, completed_ms)
        failed = JoinGroupResponse(store_error(error), member_id=NO_MEMBER_ID)
        return [Reply(token, failed)]

    assignments = {m.member_id: m.assignment for m in group.members.values()}
    return [*effects, classic.append([classic.group_record(group, assignments)], on_stored)]
