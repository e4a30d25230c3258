"""Consumer-group APIs: FindCoordinator v0–6, JoinGroup v0–9, SyncGroup v0–5, Heartbeat
v0–4, LeaveGroup v0–5, OffsetCommit v2–9, OffsetFetch v1–9, DescribeGroups v0–6,
ListGroups v0–5, DeleteGroups v0–2, OffsetDelete v0 (the ranges are in
``protocol.versions``; each handler fills the fields its version has).

These only translate between the wire messages and the group coordinator's plain
requests (:mod:`sluice.group.api`); the coordinator (``broker.groups``, a
:class:`~sluice.group.runtime.GroupCoordinatorRuntime`) does the work. A group's
coordinator is the leader of its ``__consumer_offsets`` partition; a broker that does not
coordinate a group answers NOT_COORDINATOR (or COORDINATOR_LOAD_IN_PROGRESS while it
loads), and clients look the coordinator up again.

Kept from Kafka's request handling (not the coordinator's business): OffsetCommit for a
topic or partition that does not exist is refused per partition with
UNKNOWN_TOPIC_OR_PARTITION. FindCoordinator also finds transaction coordinators (key
type 1): the leader of the transactional id's ``__transaction_state`` partition, and
share coordinators (key type 2, ``group:topic id:partition``, which Kafka's brokers ask
for): the leader of the share-partition's ``__share_group_state`` partition. A share
group's own coordinator is found with key type 0, like any group's.

Share groups (KIP-932) live beside the classic groups: ListGroups lists them with group
type ``share``; DescribeGroups describes a share group id as a classic group it is not
(Dead; GROUP_ID_NOT_FOUND from v6); DeleteGroups deletes an Empty share group and then
the share-partition state of every topic it ever subscribed to.

With the authorizer on (:mod:`sluice.broker.handlers.acl_rules`): FindCoordinator needs
DESCRIBE on the group or transactional id (CLUSTER_ACTION for share coordinator keys);
JoinGroup, SyncGroup, Heartbeat, LeaveGroup and OffsetCommit READ on the group, and
OffsetCommit READ on each topic; OffsetFetch DESCRIBE on the group and on each topic (a
fetch of every partition leaves out the topics it may not DESCRIBE); DescribeGroups
DESCRIBE and DeleteGroups DELETE on each group; ListGroups lists every group with
DESCRIBE on the cluster, else those it may DESCRIBE; OffsetDelete DELETE on the group and
READ on each topic. Refusals answer GROUP_AUTHORIZATION_FAILED or
TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import (
    CLUSTER_ACTION,
    CLUSTER_DESCRIBE,
    GROUP_DELETE,
    GROUP_DESCRIBE,
    GROUP_READ,
    TOPIC_DESCRIBE,
    TOPIC_READ,
    TRANSACTIONAL_DESCRIBE,
)
from sluice.broker.handlers.group_topics import BrokerTopics
from sluice.broker.services import (
    UsesAuthorizer,
    UsesGroups,
    UsesSharePersister,
    UsesShareStates,
    UsesTopics,
    UsesTransactions,
)
from sluice.common.authorizer import ResourceType
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition
from sluice.group.api import (
    NO_LEADER_EPOCH,
    FetchedOffset,
    GroupDescription,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    OffsetCommitRequest,
    OffsetFetchResponse,
    OffsetToCommit,
    SyncGroupRequest,
    SyncGroupResponse,
)
from sluice.group.config import OFFSETS_TOPIC
from sluice.group.state import GroupState
from sluice.protocol.messages import has_field, make, millis, response_module
from sluice.share.config import SHARE_STATE_TOPIC
from sluice.share.state import ShareStateKey
from sluice.txn.config import TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from types import ModuleType

    from sluice.broker.context import RequestContext


class GroupsServices(
    UsesAuthorizer,
    UsesGroups,
    UsesSharePersister,
    UsesShareStates,
    UsesTopics,
    UsesTransactions,
    Protocol,
):
    """What the groups handlers use of the broker."""


log = logging.getLogger(__name__)

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2

CLASSIC_GROUP_TYPE = "classic"
"""The group type (ListGroups v5+) of a group of the classic group protocol."""

CLIENT_HOST_UNKNOWN = ""


def client_host(context: RequestContext) -> str:
    """The requesting client's address as Kafka shows it (``/127.0.0.1``)."""
    return f"/{context.client_host}" if context.client_host else CLIENT_HOST_UNKNOWN


def _optional(request: Any, name: str, default: Any = None) -> Any:
    """A field the request's version may lack."""
    return getattr(request, name) if has_field(type(request), name) else default


# ------------------------------------------------------------------ FindCoordinator


async def handle_find_coordinator(
    services: GroupsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    key_type = int(_optional(request, "key_type", GROUP_KEY_TYPE))
    listener = context.connection.listener_name
    if has_field(type(request), "coordinator_keys"):  # v4+: a batch of keys, one answer each
        coordinators = [
            make(
                module.Coordinator,
                key=key,
                **await _find_coordinator(services, context, key_type, key, listener),
            )
            for key in request.coordinator_keys
        ]
        return make(
            module.FindCoordinatorResponse, throttle_time=0, coordinators=tuple(coordinators)
        )
    return make(
        module.FindCoordinatorResponse,
        throttle_time=0,
        **await _find_coordinator(services, context, key_type, request.key, listener),
    )


_COORDINATOR_KEY_NEEDS = {
    GROUP_KEY_TYPE: GROUP_DESCRIBE,
    TRANSACTION_KEY_TYPE: TRANSACTIONAL_DESCRIBE,
    SHARE_KEY_TYPE: CLUSTER_ACTION,
}


async def _find_coordinator(
    services: GroupsServices, context: RequestContext, key_type: int, key: str, listener: str
) -> dict[str, Any]:
    """The coordinator of one key, as FindCoordinator's fields, its address on the
    listener the request came in on."""

    def answer(
        error: ErrorCode, message: str | None, node_id: int, host: str, port: int
    ) -> dict[str, Any]:
        return {
            "error_code": error,
            "error_message": message,
            "node_id": node_id,
            "host": host,
            "port": port,
        }

    def unavailable(error: ErrorCode, message: str) -> dict[str, Any]:
        return answer(error, message, -1, "", -1)

    need = _COORDINATOR_KEY_NEEDS.get(key_type)
    if need is not None:
        resource = "kafka-cluster" if need.resource_type is ResourceType.CLUSTER else key
        if not services.authorizer.allows(context, need, resource):
            return unavailable(need.error_code, f"{need.operation.name} is not allowed")
    if key_type == SHARE_KEY_TYPE:
        return await _find_share_coordinator(services, key, listener, answer, unavailable)
    if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
        return unavailable(ErrorCode.invalid_request, f"unknown coordinator key type {key_type}")
    if key_type == TRANSACTION_KEY_TYPE and not key:
        return unavailable(ErrorCode.invalid_request, "the transactional id is empty")
    topic_name = OFFSETS_TOPIC if key_type == GROUP_KEY_TYPE else TRANSACTION_STATE_TOPIC
    try:
        # Made on first use in a cluster (at start on a single node), as Kafka does.
        if key_type == GROUP_KEY_TYPE:
            topic = await services.topics.ensure_offsets_topic()
            partition = services.groups.coordinator_partition(key)
        else:
            topic = await services.topics.ensure_transaction_state_topic()
            partition = services.transactions.coordinator_partition(key)
    except KafkaError as e:
        return unavailable(
            ErrorCode.coordinator_not_available, f"{topic_name} cannot be created: {e}"
        )
    state = topic.partitions.get(partition)
    live = {b.node_id: b for b in services.topics.image.live_brokers()}
    if state is None or state.leader not in live:
        return unavailable(
            ErrorCode.coordinator_not_available, f"{topic_name}-{partition} has no leader"
        )
    node = live[state.leader]
    return answer(ErrorCode.none, None, node.node_id, *node.address(listener))


async def _find_share_coordinator(
    services: GroupsServices,
    key: str,
    listener: str,
    answer: Callable[[ErrorCode, str | None, int, str, int], dict[str, Any]],
    unavailable: Callable[[ErrorCode, str], dict[str, Any]],
) -> dict[str, Any]:
    """A share coordinator (key type 2, ``group:topic id:partition``): the leader of the
    share-partition's ``__share_group_state`` partition, the topic made on first use."""
    try:
        share_key = ShareStateKey.from_coordinator_key(key)
    except ValueError as e:
        return unavailable(ErrorCode.invalid_request, str(e))
    try:
        topic = await services.topics.ensure_share_state_topic()
    except KafkaError as e:
        return unavailable(
            ErrorCode.coordinator_not_available, f"{SHARE_STATE_TOPIC} cannot be created: {e}"
        )
    partition = services.share_states.coordinator_partition(share_key)
    state = topic.partitions.get(partition)
    live = {b.node_id: b for b in services.topics.image.live_brokers()}
    if state is None or state.leader not in live:
        return unavailable(
            ErrorCode.coordinator_not_available, f"{SHARE_STATE_TOPIC}-{partition} has no leader"
        )
    node = live[state.leader]
    return answer(ErrorCode.none, None, node.node_id, *node.address(listener))


# -------------------------------------------------------------------- JoinGroup


async def handle_join_group(services: GroupsServices, context: RequestContext, request: Any) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    session_timeout_ms = millis(request.session_timeout)
    rebalance_timeout = _optional(request, "rebalance_timeout")
    join = JoinGroupRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=_optional(request, "group_instance_id"),
        client_id=context.header.client_id or "",
        client_host=client_host(context),
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=(
            session_timeout_ms if rebalance_timeout is None else millis(rebalance_timeout)
        ),
        protocol_type=request.protocol_type,
        protocols=tuple((p.name, p.metadata) for p in request.protocols),
        require_known_member_id=context.header.api_version >= 4,
    )
    try:
        services.authorizer.require(context, GROUP_READ, request.group_id)
        response = await services.groups.join_group(join, BrokerTopics(services.topics))
    except KafkaError as e:
        response = JoinGroupResponse(e.code, member_id=request.member_id)
    if _optional(request, "reason"):
        log.debug("group %s: %s joins: %s", request.group_id, request.member_id, request.reason)
    return make(
        module.JoinGroupResponse,
        throttle_time=0,
        error_code=response.error,
        generation_id=response.generation_id,
        # v7+: the group's protocol type, which a successful join has just matched.
        protocol_type=request.protocol_type if response.error is ErrorCode.none else None,
        protocol_name=response.protocol_name,
        # v9+ (KIP-814): never set. A static leader that rejoins a stable group is
        # answered with the old leader id instead, so it computes no assignment.
        skip_assignment=False,
        leader=response.leader,
        member_id=response.member_id,
        members=tuple(
            make(
                module.JoinGroupResponseMember,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                metadata=m.metadata,
            )
            for m in response.members
        ),
    )


# -------------------------------------------------------------------- SyncGroup


async def handle_sync_group(services: GroupsServices, context: RequestContext, request: Any) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    sync = SyncGroupRequest(
        group_id=request.group_id,
        generation_id=int(request.generation_id),
        member_id=request.member_id,
        group_instance_id=_optional(request, "group_instance_id"),
        assignments=tuple((a.member_id, a.assignment) for a in request.assignments),
        protocol_type=_optional(request, "protocol_type"),
        protocol_name=_optional(request, "protocol_name"),
    )
    try:
        services.authorizer.require(context, GROUP_READ, request.group_id)
        response = await services.groups.sync_group(sync)
    except KafkaError as e:
        response = SyncGroupResponse(e.code)
    succeeded = response.error is ErrorCode.none
    return make(
        module.SyncGroupResponse,
        throttle_time=0,
        error_code=response.error,
        # v5+: the group's protocol type and name; the coordinator has checked that the
        # member's agree with them.
        protocol_type=sync.protocol_type if succeeded else None,
        protocol_name=sync.protocol_name if succeeded else None,
        assignment=response.assignment,
    )


# -------------------------------------------------------------------- Heartbeat


async def handle_heartbeat(services: GroupsServices, context: RequestContext, request: Any) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    heartbeat = HeartbeatRequest(
        group_id=request.group_id,
        generation_id=int(request.generation_id),
        member_id=request.member_id,
        group_instance_id=_optional(request, "group_instance_id"),
    )
    try:
        services.authorizer.require(context, GROUP_READ, request.group_id)
        error = (await services.groups.heartbeat(heartbeat)).error
    except KafkaError as e:
        error = e.code
    return make(module.HeartbeatResponse, throttle_time=0, error_code=error)


# ------------------------------------------------------------------- LeaveGroup


async def handle_leave_group(
    services: GroupsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    batched = has_field(type(request), "members")
    if batched:
        for m in request.members:
            if _optional(m, "reason"):
                log.debug("group %s: %s leaves: %s", request.group_id, m.member_id, m.reason)
        identities = tuple(
            MemberIdentity(m.member_id, _optional(m, "group_instance_id")) for m in request.members
        )
    else:
        identities = (MemberIdentity(request.member_id),)
    try:
        services.authorizer.require(context, GROUP_READ, request.group_id)
        response = await services.groups.leave_group(
            LeaveGroupRequest(request.group_id, identities)
        )
    except KafkaError as e:
        response = LeaveGroupResponse(e.code)
    if not batched:
        error = response.error
        if error is ErrorCode.none and response.members:
            error = response.members[0].error  # v0–2: one member, its error is the answer
        return make(module.LeaveGroupResponse, throttle_time=0, error_code=error)
    return make(
        module.LeaveGroupResponse,
        throttle_time=0,
        error_code=response.error,
        members=tuple(
            make(
                module.MemberResponse,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                error_code=m.error,
            )
            for m in response.members
        ),
    )


# ----------------------------------------------------------------- OffsetCommit


def _partition_exists(services: GroupsServices, partition: TopicPartition) -> bool:
    topic = services.topics.get(partition.topic)
    return topic is not None and partition.partition in topic.partitions


def _by_topic(
    entries: Iterable[tuple[TopicPartition, Any]],
) -> dict[str, list[tuple[int, Any]]]:
    """Entries grouped by topic, topics and partitions in their first-seen order."""
    grouped: dict[str, list[tuple[int, Any]]] = {}
    for partition, value in entries:
        grouped.setdefault(partition.topic, []).append((partition.partition, value))
    return grouped


async def handle_offset_commit(
    services: GroupsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    requested: list[tuple[TopicPartition, OffsetToCommit]] = []
    for topic in request.topics:
        for p in topic.partitions:
            offset = OffsetToCommit(
                offset=int(p.committed_offset),
                leader_epoch=int(_optional(p, "committed_leader_epoch", NO_LEADER_EPOCH)),
                metadata=p.committed_metadata,
            )
            requested.append((TopicPartition(topic.name, int(p.partition_index)), offset))
    errors: dict[TopicPartition, ErrorCode] = {}
    known = []
    group_allowed = services.authorizer.allows(context, GROUP_READ, request.group_id)
    readable = services.authorizer.allowed(context, TOPIC_READ, {p.topic for p, _ in requested})
    for partition, offset in requested:
        if not group_allowed:
            errors[partition] = GROUP_READ.error_code
        elif partition.topic not in readable:
            errors[partition] = TOPIC_READ.error_code
        elif _partition_exists(services, partition):
            known.append((partition, offset))
        else:
            errors[partition] = ErrorCode.unknown_topic_or_partition
    retention_time = _optional(request, "retention_time")
    commit = OffsetCommitRequest(
        group_id=request.group_id,
        generation_id=int(request.generation_id_or_member_epoch),
        member_id=request.member_id,
        group_instance_id=_optional(request, "group_instance_id"),
        offsets=tuple(known),
        retention_ms=-1 if retention_time is None else millis(retention_time),
        api_version=context.header.api_version,
    )
    if known:
        try:
            errors.update((await services.groups.commit_offsets(commit)).errors)
        except KafkaError as e:
            errors.update((partition, e.code) for partition, _ in known)
    return make(
        module.OffsetCommitResponse,
        throttle_time=0,
        topics=tuple(
            make(
                module.OffsetCommitResponseTopic,
                name=name,
                partitions=tuple(
                    make(
                        module.OffsetCommitResponsePartition,
                        partition_index=index,
                        error_code=errors[TopicPartition(name, index)],
                    )
                    for index, _ in partitions
                ),
            )
            for name, partitions in _by_topic(requested).items()
        ),
    )


# ------------------------------------------------------------------ OffsetFetch


async def handle_offset_fetch(
    services: GroupsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    if has_field(type(request), "groups"):
        # v8+: several groups in one request, each answered on its own. v9's member id
        # and epoch belong to KIP-848 groups; a classic group does not check them.
        answers = []
        for group in request.groups:
            response = await _fetch_offsets(
                services,
                context,
                group.group_id,
                group.topics,
                request.require_stable,
                _optional(group, "member_id"),
                int(_optional(group, "member_epoch", -1)),
            )
            answers.append(
                make(
                    module.OffsetFetchResponseGroup,
                    group_id=group.group_id,
                    topics=_offset_fetch_topics(
                        module.OffsetFetchResponseTopics,
                        module.OffsetFetchResponsePartitions,
                        response,
                    ),
                    error_code=response.error,
                )
            )
        return make(module.OffsetFetchResponse, throttle_time=0, groups=tuple(answers))
    response = await _fetch_offsets(
        services,
        context,
        request.group_id,
        request.topics,
        _optional(request, "require_stable", False),
    )
    return make(
        module.OffsetFetchResponse,
        throttle_time=0,
        error_code=response.error,
        topics=_offset_fetch_topics(
            module.OffsetFetchResponseTopic, module.OffsetFetchResponsePartition, response
        ),
    )


async def _fetch_offsets(
    services: GroupsServices,
    context: RequestContext,
    group_id: str,
    topics: Sequence[Any] | None,
    require_stable: bool,
    member_id: str | None = None,
    member_epoch: int = -1,
) -> OffsetFetchResponse:
    """One group's committed offsets for ``topics`` (None: every partition it has);
    ``require_stable`` (v7+, KIP-447): offsets pending in an open transaction answer
    UNSTABLE_OFFSET_COMMIT."""
    partitions: list[TopicPartition] | None = None
    if topics is not None:
        partitions = [
            TopicPartition(t.name, int(index)) for t in topics for index in t.partition_indexes
        ]
    try:
        services.authorizer.require(context, GROUP_DESCRIBE, group_id)
        wanted = partitions
        refused: set[str] = set()
        if partitions is not None:
            names = {p.topic for p in partitions}
            refused = names - services.authorizer.allowed(context, TOPIC_DESCRIBE, names)
            wanted = [p for p in partitions if p.topic not in refused]
        response = await services.groups.fetch_offsets(
            group_id, wanted, require_stable, member_id, member_epoch
        )
        if partitions is None:  # every partition: only the topics it may DESCRIBE
            names = {f.partition.topic for f in response.offsets}
            allowed = services.authorizer.allowed(context, TOPIC_DESCRIBE, names)
            return dataclasses.replace(
                response,
                offsets=tuple(f for f in response.offsets if f.partition.topic in allowed),
            )
        if refused:
            found = {f.partition: f for f in response.offsets}
            return dataclasses.replace(
                response,
                offsets=tuple(
                    found.get(p) or FetchedOffset(p, error=TOPIC_DESCRIBE.error_code)
                    for p in partitions
                ),
            )
        return response
    except KafkaError as e:
        # v2+ has a top-level error; v1 only per partition.
        return OffsetFetchResponse(
            e.code, tuple(FetchedOffset(p, error=e.code) for p in partitions or ())
        )


def _offset_fetch_topics(
    topic_class: type[Any], partition_class: type[Any], response: OffsetFetchResponse
) -> tuple[Any, ...]:
    return tuple(
        make(
            topic_class,
            name=name,
            partitions=tuple(
                make(
                    partition_class,
                    partition_index=index,
                    committed_offset=fetched.offset,
                    committed_leader_epoch=fetched.leader_epoch,
                    metadata=fetched.metadata,
                    error_code=fetched.error,
                )
                for index, fetched in entries
            ),
        )
        for name, entries in _by_topic((f.partition, f) for f in response.offsets).items()
    )


# -------------------------------------------------------- DescribeGroups, ListGroups


async def handle_describe_groups(
    services: GroupsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    include_operations = bool(_optional(request, "include_authorized_operations", False))
    allowed = services.authorizer.allowed(context, GROUP_DESCRIBE, request.groups)
    described = await services.groups.describe_groups([g for g in request.groups if g in allowed])
    by_id = {d.group_id: d for d in described}
    descriptions = [by_id[g] if g in allowed else _refused_description(g) for g in request.groups]
    # v6+ (KIP-1043) answers a group that does not exist with GROUP_ID_NOT_FOUND; older
    # versions describe it as Dead with no error.
    not_found_error = context.header.api_version >= 6
    return make(
        module.DescribeGroupsResponse,
        throttle_time=0,
        groups=tuple(
            make(
                module.DescribedGroup,
                **_described_group_error(d, not_found_error),
                group_id=d.group_id,
                group_state=d.state,
                protocol_type=d.protocol_type,
                protocol_data=d.protocol,
                members=tuple(
                    make(
                        module.DescribedGroupMember,
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata,
                        member_assignment=m.assignment,
                    )
                    for m in d.members
                ),
                authorized_operations=(
                    services.authorizer.operations(context, ResourceType.GROUP, d.group_id)
                    if include_operations
                    else -(2**31)
                ),
            )
            for d in descriptions
        ),
    )


def _refused_description(group_id: str) -> GroupDescription:
    return GroupDescription(group_id=group_id, error=GROUP_DESCRIBE.error_code, state="")


def _described_group_error(description: Any, not_found_error: bool) -> dict[str, Any]:
    """error_code and (v6+) error_message of one described group."""
    if (
        not_found_error
        and description.error is ErrorCode.none
        and description.state == GroupState.DEAD.value
    ):
        return {
            "error_code": ErrorCode.group_id_not_found,
            "error_message": description.not_found_message
            or f"group {description.group_id!r} not found",
        }
    return {"error_code": description.error, "error_message": None}


async def handle_list_groups(
    services: GroupsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    states = _optional(request, "states_filter")
    response = await services.groups.list_groups(list(states) if states else None)
    # v5+ filters by group type (case-insensitive): classic or share.
    types = _optional(request, "types_filter")
    listed = response.groups
    if not services.authorizer.allows(context, CLUSTER_DESCRIBE):
        listed = tuple(
            g for g in listed if services.authorizer.allows(context, GROUP_DESCRIBE, g.group_id)
        )
    if types:
        wanted = {t.lower() for t in types}
        listed = tuple(g for g in listed if g.group_type in wanted)
    return make(
        module.ListGroupsResponse,
        throttle_time=0,
        error_code=response.error,
        groups=tuple(
            make(
                module.ListedGroup,
                group_id=g.group_id,
                protocol_type=g.protocol_type,
                group_state=g.state,
                group_type=g.group_type,
            )
            for g in listed
        ),
    )


# ---------------------------------------------------------- DeleteGroups, OffsetDelete


async def handle_delete_groups(
    services: GroupsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    allowed = services.authorizer.allowed(context, GROUP_DELETE, request.groups_names)
    response = await services.groups.delete_groups(
        [g for g in request.groups_names if g in allowed]
    )
    errors = {
        g: ErrorCode.none if g in allowed else GROUP_DELETE.error_code for g in request.groups_names
    }
    errors.update(response.errors)
    for group_id, topics in response.share_topics:
        error = await _delete_share_state(services, group_id, topics)
        if error is not None:
            errors[group_id] = error
    return make(
        module.DeleteGroupsResponse,
        throttle_time=0,
        results=tuple(
            make(module.DeletableGroupResult, group_id=group_id, error_code=error)
            for group_id, error in errors.items()
        ),
    )


async def _delete_share_state(
    services: GroupsServices, group_id: str, topics: Sequence[str]
) -> ErrorCode | None:
    """Delete the share-partition state of a deleted share group: every partition of
    every topic it ever subscribed to (topics since deleted have none left). The error
    of the first deletion that failed, or None; the group itself is gone either way,
    and the failure is logged."""
    persister = services.share_persister
    first_error: ErrorCode | None = None
    for name in topics:
        topic = services.topics.get(name)
        if topic is None:
            continue
        for partition in sorted(topic.partitions):
            try:
                await persister.delete(ShareStateKey(group_id, topic.topic_id, partition))
            except KafkaError as e:
                log.warning(
                    "share group %s: the state of %s-%d was not deleted: %s",
                    group_id,
                    name,
                    partition,
                    e,
                )
                first_error = first_error or e.code
    return first_error


def _offset_delete_topics(
    module: ModuleType, requested: Sequence[TopicPartition], errors: dict[TopicPartition, Any]
) -> tuple[Any, ...]:
    return tuple(
        make(
            module.OffsetDeleteResponseTopic,
            name=name,
            partitions=tuple(
                make(
                    module.OffsetDeleteResponsePartition,
                    partition_index=index,
                    error_code=errors.get(TopicPartition(name, index), ErrorCode.none),
                )
                for index, _ in entries
            ),
        )
        for name, entries in _by_topic((p, None) for p in requested).items()
    )


async def handle_offset_delete(
    services: GroupsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    requested = [
        TopicPartition(t.name, int(p.partition_index)) for t in request.topics for p in t.partitions
    ]
    errors: dict[TopicPartition, Any] = {}
    readable = services.authorizer.allowed(context, TOPIC_READ, {p.topic for p in requested})
    errors.update((p, TOPIC_READ.error_code) for p in requested if p.topic not in readable)
    try:
        services.authorizer.require(context, GROUP_DELETE, request.group_id)
        response = await services.groups.delete_offsets(
            request.group_id, [p for p in requested if p.topic in readable]
        )
    except KafkaError as e:
        top_error = e.code
    else:
        top_error = response.error
        errors.update(response.errors)
    return make(
        module.OffsetDeleteResponse,
        error_code=top_error,
        throttle_time=0,
        topics=()
        if top_error is not ErrorCode.none
        else _offset_delete_topics(module, requested, errors),
    )
