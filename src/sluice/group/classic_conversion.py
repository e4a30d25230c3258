"""The conversions between a classic group and a consumer group (KIP-848) on the classic
side: a classic group handed over to a consumer group that takes its id (Kafka's online
upgrade, or only its record dropped when it is empty), a classic group made from a
consumer group whose last member of the new protocol left (the online downgrade), and
a classic group put back as it was when the write of either conversion fails.

The consumer side is :mod:`~sluice.group.consumer_coordinator` and
:mod:`~sluice.group.consumer_classic`; the two meet in
:class:`~sluice.group.migration.ClassicGroupImage`. It owns no state: functions over the
groups of a :class:`~sluice.group.classic_groups.ClassicGroups`; the requests a
rebalance had parked are held by the closures of the
:class:`~sluice.group.consumer_coordinator.OtherGroupHold` it returns until the write
is done.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from sluice.common.errors import ErrorCode
from sluice.coordinator.api import Effect, Record, Reply, RequestToken
from sluice.group.api import JoinGroupResponse, SyncGroupResponse
from sluice.group.classic_groups import ClassicGroups, Timer, tombstone
from sluice.group.classic_rebalance import prepare_rebalance
from sluice.group.consumer_coordinator import (
    OtherGroupHold,
    UndoFunction,
    heartbeat_write_error,
)
from sluice.group.member import Member, member_image
from sluice.group.migration import (
    ClassicGroupImage,
    MalformedConsumerProtocol,
    encode_assignment,
    subscription_version,
)
from sluice.group.records import GroupMetadataKey
from sluice.group.state import CONSUMER_PROTOCOL_TYPE, Group, GroupMembership, GroupState

log = logging.getLogger(__name__)

_EMPTY = GroupState.EMPTY
_STABLE = GroupState.STABLE
_DEAD = GroupState.DEAD

_ParkedRequests = tuple[Member, RequestToken | None, RequestToken | None]
"""A member of a rebalancing classic group with its parked JoinGroup and SyncGroup."""


def _detach_parked_requests(group: Group) -> list[_ParkedRequests]:
    """Take the parked requests off the group's members (an upgrade holds them)."""
    parked = [
        (member, member.join_token, member.sync_token)
        for member in group.members.values()
        if member.awaiting_join or member.awaiting_sync
    ]
    for member, _, _ in parked:
        member.join_token = member.sync_token = None
    return parked


def _answer_parked(parked: Iterable[_ParkedRequests], error: ErrorCode) -> list[Effect]:
    effects: list[Effect] = []
    for member, join_token, sync_token in parked:
        if join_token is not None:
            response = JoinGroupResponse(error, member_id=member.member_id)
            effects.append(Reply(join_token, response))
        if sync_token is not None:
            effects.append(Reply(sync_token, SyncGroupResponse(error)))
    return effects


def hold_for_consumer_group(classic: ClassicGroups, group_id: str) -> OtherGroupHold | None:
    """What a consumer group taking ``group_id`` must do to the classic group of that id
    (none: there is none, or only its offsets are): upgrade it (its members, from
    :func:`_upgrade_image`), refuse, or write its metadata's tombstone. The id is no
    share group's and no consumer group's (the shard checked)."""
    group = classic.groups.get(group_id)
    if group is None or group.is_in(_DEAD):
        return None
    metadata_tombstone = tombstone(GroupMetadataKey(group_id))
    saved: list[GroupMembership] = []

    def put_back(now_ms: int, error: ErrorCode) -> list[Effect]:
        # The write holding the tombstone failed: the classic group is as it was.
        return restore_classic(classic, group, saved[0], now_ms, error) if saved else []

    if group.members:
        upgrade = _upgrade_image(classic, group)
        if isinstance(upgrade, str):
            return OtherGroupHold(in_use=True, metadata_tombstone=None, refusal=upgrade)
        timestamp_ms = group.state_timestamp_ms
        parked: list[_ParkedRequests] = []

        def hand_over() -> None:
            # A rebalance in progress: its parked JoinGroups and SyncGroups wait for
            # the write, then are told to join again (the newcomer moved the epoch).
            parked.extend(_detach_parked_requests(group))
            saved.append(group.membership())
            group.hand_over(timestamp_ms)

        def put_back_rebalance(now_ms: int, error: ErrorCode) -> list[Effect]:
            # The classic group carries on its rebalance as if nothing had happened:
            # its parked requests are parked again, its deadlines watched again.
            if not saved:
                return []
            requests = parked[:]
            parked.clear()
            return restore_classic(classic, group, saved[0], now_ms, error, requests)

        def rejoin_parked(_now_ms: int) -> list[Effect]:
            effects = _answer_parked(parked, ErrorCode.rebalance_in_progress)
            parked.clear()
            return effects

        return OtherGroupHold(
            False,
            metadata_tombstone,
            hand_over,
            upgrade=upgrade,
            on_write_failed=put_back_rebalance,
            on_write_committed=rejoin_parked,
        )
    if not group.is_in(_EMPTY):
        return OtherGroupHold(in_use=True, metadata_tombstone=None)
    if group.generation_id == 0:
        return OtherGroupHold(in_use=False, metadata_tombstone=None)  # no record

    def forget_record() -> None:
        # The consumer group takes the id: the empty classic group's record goes,
        # its offsets stay with the id; what is left is what loading would leave.
        saved.append(group.membership())
        group.generation_id = 0
        group.protocol_type = group.protocol_name = None

    return OtherGroupHold(False, metadata_tombstone, forget_record, on_write_failed=put_back)


def restore_classic(
    classic: ClassicGroups,
    group: Group,
    saved: GroupMembership,
    now_ms: int,
    error: ErrorCode,
    parked: Sequence[_ParkedRequests] = (),
) -> list[Effect]:
    """Put a classic group back as it was before a conversion (upgrade or downgrade)
    whose write failed, as Kafka's coordinator reverts to the last committed offset:
    requests parked on members it gained since are answered with the write's error
    (they retry), those of a rebalance it was in (``parked``) wait again, its
    members' sessions start again now and its rebalance deadlines are watched again.
    Offsets are kept: they have their own records."""
    effects: list[Effect] = []
    answer = heartbeat_write_error(error)
    for member in group.members.values():
        if member.join_token is not None:
            response = JoinGroupResponse(answer, member_id=member.member_id)
            effects.append(Reply(member.join_token, response))
            member.join_token = None
        if member.sync_token is not None:
            effects.append(Reply(member.sync_token, SyncGroupResponse(answer)))
            member.sync_token = None
    group.restore_membership(saved)
    for member, join_token, sync_token in parked:
        member.join_token, member.sync_token = join_token, sync_token
    if classic.groups.get(group.group_id) is None:
        classic.groups[group.group_id] = group
    for member in group.members.values():
        classic.heard_from(group, member, now_ms)
    # The conversion's interval consumed their timers (the group was empty then).
    if group.join_deadline_ms is not None:
        classic.watch(group.join_deadline_ms, group, Timer.JOIN)
    if group.sync_deadline_ms is not None:
        classic.watch(group.sync_deadline_ms, group, Timer.SYNC)
    for member_id, deadline_ms in group.pending_members.items():
        classic.watch(deadline_ms, group, Timer.PENDING_MEMBER, member_id)
    log.warning(
        "group %s: conversion not written (%s); the classic group is restored",
        group.group_id,
        error.name,
    )
    classic.drop_if_unused(group)
    return effects


def _upgrade_image(classic: ClassicGroups, group: Group) -> ClassicGroupImage | str:
    """The classic group as a consumer group takes it over (Kafka's online upgrade),
    or why it cannot: the policy forbids it, its members do not use the consumer
    protocol, there are more than ``group.consumer.max.size``, or their
    subscriptions or assignments do not parse. As in Kafka, a group in the middle of
    a rebalance converts too: each member with its subscription and its last
    assignment (none for a member that joined in this rebalance); its parked
    requests are told to join again once the conversion is written. A group that
    never completed a rebalance has no protocol yet and is not converted."""
    group_id = group.group_id
    refused = f"Group {group_id} is not a consumer group."
    if not classic.config.consumer_migration_policy.upgrades:
        log.info("classic group %s: not upgraded: the policy forbids it", group_id)
        return refused
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE or group.protocol_name is None:
        return refused
    if len(group.members) > classic.config.consumer_group_size_max:
        log.info("classic group %s: not upgraded: too many members", group_id)
        return refused
    members = []
    for member in group.members.values():
        try:
            members.append(member_image(member, group.protocol_name))
        except MalformedConsumerProtocol as error:
            log.warning("classic group %s: not upgraded: %s", group_id, error)
            return (
                f"Cannot upgrade the classic group {group_id} to consumer group because "
                "the embedded consumer protocol is malformed."
            )
    return ClassicGroupImage(group_id, group.generation_id, tuple(members))


def downgrade_to_classic(
    classic: ClassicGroups, image: ClassicGroupImage, now_ms: int
) -> tuple[list[Record], list[Effect], UndoFunction]:
    """The classic group that replaces a consumer group whose last member of the new
    protocol left (Kafka's online downgrade): Stable at the group epoch with the
    members' target assignments, its record written after the consumer group's
    tombstones, then a rebalance, so every member joins again (none when a static
    member took the place of the last member of the new protocol with the same
    subscription: ``image.rebalance``). If the write fails the
    group is put back as it was (empty, holding the id's offsets), and the consumer
    group is restored (``HostedConsumerGroups`` reverts it)."""
    group = classic.groups.get(image.group_id)
    if group is None or group.is_in(_DEAD):
        group = classic.groups[image.group_id] = Group(image.group_id, now_ms)
    saved = group.membership()
    assert not group.members, f"group {image.group_id}: a classic group with members"
    group.generation_id = image.generation
    for stored in image.members:
        member = Member(
            member_id=stored.member_id,
            group_instance_id=stored.instance_id,
            client_id=stored.client_id,
            client_host=stored.client_host,
            session_timeout_ms=stored.session_timeout_ms,
            rebalance_timeout_ms=stored.rebalance_timeout_ms,
            protocols=stored.protocols,
            last_heartbeat_ms=now_ms,
        )
        group.add_member(member, CONSUMER_PROTOCOL_TYPE)
    protocol = group.protocol_name = group.select_protocol()
    group.subscribed_topics = group.compute_subscribed_topics()
    for stored in image.members:
        member = group.members[stored.member_id]
        version = subscription_version(member.metadata(protocol))
        member.assignment = encode_assignment(stored.assignment, version)
    group.transition_to(_STABLE, now_ms)
    group.has_metadata_record = True
    assignments = {m.member_id: m.assignment for m in group.members.values()}
    record = classic.group_record(group, assignments)
    for member in group.members.values():
        classic.watch_member(group, member)
    log.info(
        "consumer group %s: downgraded to a classic group at generation %d",
        image.group_id,
        image.generation,
    )
    effects = prepare_rebalance(classic, group, now_ms) if image.rebalance else []

    def put_back(failed_ms: int, error: ErrorCode) -> list[Effect]:
        return restore_classic(classic, group, saved, failed_ms, error)

    return [record], effects, put_back
