"""The classic group protocol's rebalance: the state machine of
:mod:`~sluice.group.state` driven through PreparingRebalance and CompletingRebalance,
and the classic groups' timers.

What belongs here: starting a rebalance (and its initial delay), ending the join phase
(the next generation, its leader and protocol, every parked JoinGroup answered),
members removed (left, expired, never joined or synced in time, their parked requests
answered), the assignment handed to parked SyncGroups, and what each timer of
:class:`~sluice.group.classic_groups.ClassicGroups` does when it fires. The requests
that drive it are in :mod:`~sluice.group.classic_join` and
:mod:`~sluice.group.classic_members`.

It owns no state: these are functions over the groups of a
:class:`~sluice.group.classic_groups.ClassicGroups`, returning the effects (replies,
appends) for the shard to hand its runtime.
"""

from __future__ import annotations

import logging

from sluice.common.errors import ErrorCode
from sluice.coordinator.api import Effect, Reply
from sluice.group.api import JoinGroupResponse, SyncGroupResponse
from sluice.group.classic_groups import ClassicGroups, CompletionHandler, Timer
from sluice.group.member import Member
from sluice.group.state import Group, GroupState, JoinWait

log = logging.getLogger(__name__)

_EMPTY = GroupState.EMPTY
_PREPARING = GroupState.PREPARING_REBALANCE
_COMPLETING = GroupState.COMPLETING_REBALANCE
_STABLE = GroupState.STABLE


def fire_timer(
    classic: ClassicGroups, group: Group, kind: Timer, member_id: str, now_ms: int
) -> list[Effect]:
    if kind is Timer.MEMBER:
        member = group.members.get(member_id)
        if member is None:
            return []
        deadline = member.liveness_deadline_ms()
        if deadline is None or deadline > now_ms:
            return []
        log.info("group %s: member %s expired", group.group_id, member_id)
        return remove_member_and_update(classic, group, member, now_ms)
    if kind is Timer.PENDING_MEMBER:
        deadline = group.pending_members.get(member_id)
        if deadline is None or deadline > now_ms:
            return []
        del group.pending_members[member_id]
        effects = maybe_complete_join(classic, group, now_ms)
        classic.drop_if_unused(group)
        return effects
    if kind is Timer.JOIN:
        if group.join_deadline_ms is None or group.join_deadline_ms > now_ms:
            return []
        return _on_join_deadline(classic, group, now_ms)
    if group.sync_deadline_ms is None or group.sync_deadline_ms > now_ms:
        return []
    return _on_sync_deadline(classic, group, now_ms)


def maybe_prepare_rebalance(classic: ClassicGroups, group: Group, now_ms: int) -> list[Effect]:
    if group.is_in(_STABLE, _COMPLETING, _EMPTY):
        return prepare_rebalance(classic, group, now_ms)
    return []


def prepare_rebalance(classic: ClassicGroups, group: Group, now_ms: int) -> list[Effect]:
    effects: list[Effect] = []
    if group.is_in(_COMPLETING):
        effects += reset_and_propagate_assignment_error(
            classic, group, ErrorCode.rebalance_in_progress, now_ms
        )
    group.pending_sync_members.clear()
    group.sync_deadline_ms = None
    rebalance_timeout_ms = group.rebalance_timeout_ms
    if group.is_in(_EMPTY):
        delay_ms = min(classic.config.initial_rebalance_delay_ms, rebalance_timeout_ms)
        group.join_wait = JoinWait.INITIAL_DELAY
        group.initial_delay_remaining_ms = rebalance_timeout_ms - delay_ms
        group.new_member_added = False
    else:
        delay_ms = rebalance_timeout_ms
        group.join_wait = JoinWait.REBALANCE_TIMEOUT
    group.transition_to(_PREPARING, now_ms)
    group.join_deadline_ms = now_ms + delay_ms
    classic.watch(group.join_deadline_ms, group, Timer.JOIN)
    log.info(
        "group %s: rebalancing (generation %d, %d member(s))",
        group.group_id,
        group.generation_id,
        len(group.members),
    )
    return effects + maybe_complete_join(classic, group, now_ms)


def maybe_complete_join(classic: ClassicGroups, group: Group, now_ms: int) -> list[Effect]:
    if (
        group.is_in(_PREPARING)
        and group.join_wait is JoinWait.REBALANCE_TIMEOUT
        and group.has_all_members_joined()
    ):
        return _complete_join(classic, group, now_ms)
    return []


def _on_join_deadline(classic: ClassicGroups, group: Group, now_ms: int) -> list[Effect]:
    group.join_deadline_ms = None
    if not group.is_in(_PREPARING):
        return []
    if (
        group.join_wait is JoinWait.INITIAL_DELAY
        and group.new_member_added
        and group.initial_delay_remaining_ms > 0
    ):
        # Members are still arriving: wait once more, within the rebalance timeout.
        group.new_member_added = False
        delay_ms = min(classic.config.initial_rebalance_delay_ms, group.initial_delay_remaining_ms)
        group.initial_delay_remaining_ms -= delay_ms
        group.join_deadline_ms = now_ms + delay_ms
        classic.watch(group.join_deadline_ms, group, Timer.JOIN)
        return []
    return _complete_join(classic, group, now_ms)


def _complete_join(classic: ClassicGroups, group: Group, now_ms: int) -> list[Effect]:
    """End PreparingRebalance: drop dynamic members that did not join again, start
    the next generation and answer every parked JoinGroup."""
    effects: list[Effect] = []
    group.join_deadline_ms = None
    for member in list(group.members.values()):
        if not member.awaiting_join and not member.is_static:
            log.info("group %s: member %s did not join in time", group.group_id, member.member_id)
            effects += _remove_member(classic, group, member)
    if not group.elect_joined_leader() and group.members:
        # Only static members that have not joined again: give them another
        # rebalance timeout (their sessions may end first).
        group.join_wait = JoinWait.REBALANCE_TIMEOUT
        group.join_deadline_ms = now_ms + group.rebalance_timeout_ms
        classic.watch(group.join_deadline_ms, group, Timer.JOIN)
        return effects
    group.generation_id += 1
    if not group.members:
        group.protocol_name = None
        group.subscribed_topics = None
        group.transition_to(_EMPTY, now_ms)
        log.info("group %s: empty at generation %d", group.group_id, group.generation_id)
        return [
            *effects,
            classic.append([classic.group_record(group, {})], _log_store_error(classic, group)),
        ]
    group.protocol_name = group.select_protocol()
    group.subscribed_topics = group.compute_subscribed_topics()
    group.transition_to(_COMPLETING, now_ms)
    everyone = group.current_member_metadata()
    for member in group.members.values():
        if member.join_token is not None:
            response = JoinGroupResponse(
                error=ErrorCode.none,
                generation_id=group.generation_id,
                protocol_name=group.protocol_name,
                leader=group.leader_id or "",
                member_id=member.member_id,
                members=everyone if member.member_id == group.leader_id else (),
            )
            effects.append(Reply(member.join_token, response))
            member.join_token = None
        member.is_new = False
        classic.heard_from(group, member, now_ms)
    group.pending_sync_members = set(group.members)
    group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms
    classic.watch(group.sync_deadline_ms, group, Timer.SYNC)
    log.info(
        "group %s: generation %d with %d member(s), protocol %s, leader %s",
        group.group_id,
        group.generation_id,
        len(group.members),
        group.protocol_name,
        group.leader_id,
    )
    return effects


def _on_sync_deadline(classic: ClassicGroups, group: Group, now_ms: int) -> list[Effect]:
    """Members of the new generation that never sent SyncGroup are removed."""
    group.sync_deadline_ms = None
    if not group.is_in(_COMPLETING, _STABLE) or not group.pending_sync_members:
        return []
    effects: list[Effect] = []
    for member in [m for m in group.members.values() if m.member_id in group.pending_sync_members]:
        log.info("group %s: member %s did not sync in time", group.group_id, member.member_id)
        effects += _remove_member(classic, group, member)
    group.pending_sync_members.clear()
    return effects + prepare_rebalance(classic, group, now_ms)


def _log_store_error(classic: ClassicGroups, group: Group) -> CompletionHandler:
    def on_stored(_now_ms: int, error: ErrorCode | None) -> list[Effect]:
        if error is not None:
            log.warning("group %s: could not store group metadata: %s", group.group_id, error.name)
        return []

    return on_stored


def _remove_member(classic: ClassicGroups, group: Group, member: Member) -> list[Effect]:
    """Remove a member, answering its parked requests with UNKNOWN_MEMBER_ID."""
    effects: list[Effect] = []
    if member.join_token is not None:
        gone = JoinGroupResponse(ErrorCode.unknown_member_id, member_id=member.member_id)
        effects.append(Reply(member.join_token, gone))
        member.join_token = None
    if member.sync_token is not None:
        effects.append(Reply(member.sync_token, SyncGroupResponse(ErrorCode.unknown_member_id)))
        member.sync_token = None
    group.remove_member(member.member_id)
    return effects


def remove_member_and_update(
    classic: ClassicGroups, group: Group, member: Member, now_ms: int
) -> list[Effect]:
    effects = _remove_member(classic, group, member)
    if group.is_in(_STABLE, _COMPLETING):
        effects += prepare_rebalance(classic, group, now_ms)
    elif group.is_in(_PREPARING):
        effects += maybe_complete_join(classic, group, now_ms)
    return effects


def reset_and_propagate_assignment_error(
    classic: ClassicGroups, group: Group, error: ErrorCode, now_ms: int
) -> list[Effect]:
    for member in group.members.values():
        member.assignment = b""
    return propagate_assignment(classic, group, error, now_ms)


def propagate_assignment(
    classic: ClassicGroups, group: Group, error: ErrorCode, now_ms: int
) -> list[Effect]:
    effects: list[Effect] = []
    for member in group.members.values():
        if member.sync_token is None:
            continue
        assignment = member.assignment if error is ErrorCode.none else b""
        effects.append(Reply(member.sync_token, SyncGroupResponse(error, assignment)))
        member.sync_token = None
        classic.heard_from(group, member, now_ms)
    return effects
