"""Where share groups stand, for administrators (KIP-932): DescribeShareGroupOffsets
v0–1, AlterShareGroupOffsets v0 and DeleteShareGroupOffsets v0.

They go to the share group's coordinator (the group coordinator of its id), which knows
the group and its topics, and reach each share-partition's state through the persister
(the share coordinator of its key, here or on another broker):

- *Describe* gives each partition's start offset (-1 where the group has none) and, from
  v1, its lag: the records from the start offset to the partition's high watermark that
  are not finished (acknowledged or archived). The high watermark is the leader's, asked
  with ListOffsets when the partition is led elsewhere; a partition whose leader cannot
  be reached has lag -1. Topics left out (null) mean every topic the group has read.
- *Alter* sets the start offset of the partitions named (a new state, with the next
  state epoch, so a leader still holding the old one is fenced at its next write and
  loads the new one); *Delete* forgets the group's state for the topics named. Both
  need the group to exist and be Empty (NON_EMPTY_GROUP otherwise, GROUP_ID_NOT_FOUND
  when there is no share group of that id): offsets of a group with members would move
  under their feet.

With the authorizer on: describing needs DESCRIBE on the group and on each topic (the
others are answered TOPIC_AUTHORIZATION_FAILED, or left out of a listing of every topic);
altering READ on the group and each topic; deleting DELETE on the group and READ on each
topic.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.authorization import Need
from sluice.broker.handlers.acl_rules import (
    GROUP_DELETE,
    GROUP_DESCRIBE,
    GROUP_READ,
    TOPIC_DESCRIBE,
    TOPIC_READ,
)
from sluice.broker.network.leader_offsets import leader_high_watermarks
from sluice.broker.network.peer_connection import PeerUnavailable
from sluice.broker.services import (
    UsesAuthorizer,
    UsesGroups,
    UsesPeers,
    UsesReplicas,
    UsesSharePartitions,
    UsesSharePersister,
    UsesTopics,
)
from sluice.cluster.model import ZERO_TOPIC_ID
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition
from sluice.group.share_group import ShareGroup, ShareGroupState
from sluice.protocol.messages import make, response_module
from sluice.protocol.versions import ApiKey
from sluice.share.state import DeliveryState, ShareState, ShareStateKey

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext


class ShareOffsetsServices(
    UsesAuthorizer,
    UsesGroups,
    UsesPeers,
    UsesReplicas,
    UsesSharePartitions,
    UsesSharePersister,
    UsesTopics,
    Protocol,
):
    """What the share offsets handlers use of the broker."""


log = logging.getLogger(__name__)

NO_OFFSET = -1
NO_LAG = -1
PEER_TIMEOUT_S = 10.0


def _share_group(services: ShareOffsetsServices, group_id: str) -> ShareGroup:
    """The share group, coordinated here; raises NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS or GROUP_ID_NOT_FOUND."""
    groups = services.groups
    shard = groups.loaded_shard(groups.coordinator_partition(group_id))
    group = shard.share_group(group_id)
    if group is None or group.state is ShareGroupState.DEAD:
        raise errors.for_code(ErrorCode.group_id_not_found)(f"no share group {group_id!r}")
    return group


def _empty_share_group(services: ShareOffsetsServices, group_id: str) -> ShareGroup:
    group = _share_group(services, group_id)
    if group.state is not ShareGroupState.EMPTY:
        raise errors.for_code(ErrorCode.non_empty_group)(
            f"share group {group_id!r} has members; stop them first"
        )
    return group


def unfinished(state: ShareState, high_watermark: int) -> int:
    """Records from the start offset to ``high_watermark`` not yet finished."""
    finished = sum(
        min(batch.last_offset + 1, high_watermark) - max(batch.first_offset, state.start_offset)
        for batch in state.batches
        if batch.state in (DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED)
        and batch.first_offset < high_watermark
        and batch.last_offset >= state.start_offset
    )
    return max(high_watermark - state.start_offset - finished, 0)


async def _high_watermark(
    services: ShareOffsetsServices, topic_partition: TopicPartition
) -> int | None:
    """The partition's high watermark, from its leader (here, or by ListOffsets)."""
    hosted = services.replicas.find(topic_partition)
    if hosted is not None and hosted.is_leader:
        return hosted.high_watermark
    topic = services.topics.get(topic_partition.topic)
    state = None if topic is None else topic.partitions.get(topic_partition.partition)
    if state is None or state.leader < 0:
        return None

    try:
        answered = await leader_high_watermarks(
            services.peers, state.leader, [topic_partition], PEER_TIMEOUT_S
        )
    except (PeerUnavailable, errors.ProtocolError, KafkaError) as e:
        log.info("high watermark of %s from broker %d: %s", topic_partition, state.leader, e)
        return None
    return answered.get(topic_partition)


async def _describe_partition(
    services: ShareOffsetsServices, group_id: str, topic_id: uuid.UUID, tp: TopicPartition
) -> tuple[int, int, int, ErrorCode, str | None]:
    """(start offset, leader epoch, lag, error, message) of one share-partition."""
    try:
        state = await services.share_persister.read(
            ShareStateKey(group_id, topic_id, tp.partition), -1
        )
    except KafkaError as e:
        return NO_OFFSET, -1, NO_LAG, e.code, str(e) or None
    if state is None:
        return NO_OFFSET, -1, NO_LAG, ErrorCode.none, None
    high_watermark = await _high_watermark(services, tp)
    lag = NO_LAG if high_watermark is None else unfinished(state, high_watermark)
    return state.start_offset, state.leader_epoch, lag, ErrorCode.none, None


async def handle_describe_share_group_offsets(
    services: ShareOffsetsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, context.header.api_version)
    groups = []
    for wanted in request.groups:
        group_id = str(wanted.group_id)
        try:
            services.authorizer.require(context, GROUP_DESCRIBE, group_id)
            group = _share_group(services, group_id)
        except KafkaError as e:
            groups.append(
                make(
                    module.DescribeShareGroupOffsetsResponseGroup,
                    group_id=group_id,
                    topics=(),
                    error_code=e.code,
                    error_message=str(e) or None,
                )
            )
            continue
        asked: list[tuple[str, list[int] | None]]
        if wanted.topics is None:
            asked = [
                (name, None)
                for name in sorted(group.subscribed_topic_names_ever)
                if services.authorizer.allows(context, TOPIC_DESCRIBE, name)
            ]
        else:
            asked = [(str(t.topic_name), [int(p) for p in t.partitions]) for t in wanted.topics]
        topics = []
        for name, partitions in asked:
            denied = not services.authorizer.allows(context, TOPIC_DESCRIBE, name)
            topic = None if denied else services.topics.get(name)
            if topic is None:
                topics.append(
                    make(
                        module.DescribeShareGroupOffsetsResponseTopic,
                        topic_name=name,
                        topic_id=ZERO_TOPIC_ID,
                        partitions=tuple(
                            make(
                                module.DescribeShareGroupOffsetsResponsePartition,
                                partition_index=p,
                                start_offset=NO_OFFSET,
                                leader_epoch=-1,
                                lag=NO_LAG,
                                error_code=TOPIC_DESCRIBE.error_code
                                if denied
                                else ErrorCode.unknown_topic_or_partition,
                                error_message=None if denied else f"topic {name!r} does not exist",
                            )
                            for p in partitions or ()
                        ),
                    )
                )
                continue
            answered = []
            for index in sorted(topic.partitions) if partitions is None else partitions:
                start, epoch, lag, error, message = await _describe_partition(
                    services, group_id, topic.topic_id, TopicPartition(name, index)
                )
                if index not in topic.partitions:
                    error = ErrorCode.unknown_topic_or_partition
                    message = f"{name} has no partition {index}"
                answered.append(
                    make(
                        module.DescribeShareGroupOffsetsResponsePartition,
                        partition_index=index,
                        start_offset=start,
                        leader_epoch=epoch,
                        lag=lag,
                        error_code=error,
                        error_message=message,
                    )
                )
            topics.append(
                make(
                    module.DescribeShareGroupOffsetsResponseTopic,
                    topic_name=name,
                    topic_id=topic.topic_id,
                    partitions=tuple(answered),
                )
            )
        groups.append(
            make(
                module.DescribeShareGroupOffsetsResponseGroup,
                group_id=group_id,
                topics=tuple(topics),
                error_code=ErrorCode.none,
                error_message=None,
            )
        )
    return make(module.DescribeShareGroupOffsetsResponse, throttle_time=0, groups=tuple(groups))


async def _answer_for_empty_group(
    services: ShareOffsetsServices,
    context: RequestContext,
    rule: Need,
    response: type[Any],
    group_id: str,
    answer_topics: Callable[[], Awaitable[list[Any]]],
) -> Any:
    """The Alter or Delete ``response``: the topics ``answer_topics`` gives, or only the
    group's error when the principal may not (``rule`` on the group) or it is not an
    empty share group coordinated here."""
    try:
        services.authorizer.require(context, rule, group_id)
        _empty_share_group(services, group_id)
    except KafkaError as e:
        return make(
            response,
            throttle_time=0,
            error_code=e.code,
            error_message=str(e) or None,
            responses=(),
        )
    return make(
        response,
        throttle_time=0,
        error_code=ErrorCode.none,
        error_message=None,
        responses=tuple(await answer_topics()),
    )


async def _change_state(
    services: ShareOffsetsServices,
    key: ShareStateKey,
    change: Callable[[ShareStateKey], Awaitable[Any]],
) -> tuple[ErrorCode, str | None]:
    """Apply ``change`` (initialize or delete) to the partition's stored state and drop
    the share-partition loaded here, so its next use reads the new state; the error to
    answer (NONE when it went through)."""
    try:
        await change(key)
        services.share_partitions.forget(key)
    except KafkaError as e:
        return e.code, str(e) or None
    return ErrorCode.none, None


async def handle_alter_share_group_offsets(
    services: ShareOffsetsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(ApiKey.ALTER_SHARE_GROUP_OFFSETS, context.header.api_version)
    group_id = str(request.group_id)

    async def answer_topics() -> list[Any]:
        responses = []
        for wanted in request.topics:
            name = str(wanted.topic_name)
            topic = services.topics.get(name)
            answered = []
            for partition in wanted.partitions:
                index, start = int(partition.partition_index), int(partition.start_offset)
                error, message = ErrorCode.none, None
                if not services.authorizer.allows(context, TOPIC_READ, name):
                    error, message = TOPIC_READ.error_code, None
                elif topic is None or index not in topic.partitions:
                    error, message = (
                        ErrorCode.unknown_topic_or_partition,
                        f"no partition {name}-{index}",
                    )
                elif start < 0:
                    error, message = ErrorCode.invalid_request, f"start offset {start} is negative"
                else:
                    error, message = await _change_state(
                        services,
                        ShareStateKey(group_id, topic.topic_id, index),
                        partial(services.share_persister.initialize, start_offset=start),
                    )
                answered.append(
                    make(
                        module.AlterShareGroupOffsetsResponsePartition,
                        partition_index=index,
                        error_code=error,
                        error_message=message,
                    )
                )
            responses.append(
                make(
                    module.AlterShareGroupOffsetsResponseTopic,
                    topic_name=name,
                    topic_id=ZERO_TOPIC_ID if topic is None else topic.topic_id,
                    partitions=tuple(answered),
                )
            )
        return responses

    return await _answer_for_empty_group(
        services,
        context,
        GROUP_READ,
        module.AlterShareGroupOffsetsResponse,
        group_id,
        answer_topics,
    )


async def handle_delete_share_group_offsets(
    services: ShareOffsetsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(ApiKey.DELETE_SHARE_GROUP_OFFSETS, context.header.api_version)
    group_id = str(request.group_id)

    async def answer_topics() -> list[Any]:
        responses = []
        for wanted in request.topics:
            name = str(wanted.topic_name)
            topic = services.topics.get(name)
            error, message = ErrorCode.none, None
            if not services.authorizer.allows(context, TOPIC_READ, name):
                error, message = TOPIC_READ.error_code, None
            elif topic is None:
                error, message = (
                    ErrorCode.unknown_topic_or_partition,
                    f"topic {name!r} does not exist",
                )
            else:
                for index in sorted(topic.partitions):
                    failed = await _change_state(
                        services,
                        ShareStateKey(group_id, topic.topic_id, index),
                        services.share_persister.delete,
                    )
                    if failed[0] != ErrorCode.none:
                        error, message = failed
            responses.append(
                make(
                    module.DeleteShareGroupOffsetsResponseTopic,
                    topic_name=name,
                    topic_id=ZERO_TOPIC_ID if topic is None else topic.topic_id,
                    error_code=error,
                    error_message=message,
                )
            )
        return responses

    return await _answer_for_empty_group(
        services,
        context,
        GROUP_DELETE,
        module.DeleteShareGroupOffsetsResponse,
        group_id,
        answer_topics,
    )
