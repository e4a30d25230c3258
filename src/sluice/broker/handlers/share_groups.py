"""Share-group membership APIs (KIP-932): ShareGroupHeartbeat v1 and ShareGroupDescribe
v1.

These translate between the wire messages and the group coordinator's plain requests
(:mod:`sluice.group.api`); the coordinator (``broker.groups``) keeps the membership and
computes the assignment (:mod:`sluice.group.share_coordinator`). A share group's
coordinator is found like a classic group's (FindCoordinator key type 0, the leader of
its ``__consumer_offsets`` partition). The handler adds what the coordinator cannot
know by itself: the broker's topics (names, ids, partition counts) and the group's
config overrides from the metadata store (``share.session.timeout.ms``,
``share.heartbeat.interval.ms``).

With the authorizer on, a heartbeat needs READ on the group and DESCRIBE on each topic it
subscribes to (GROUP_ or TOPIC_AUTHORIZATION_FAILED), ShareGroupDescribe DESCRIBE on each
group, whose authorized operations are the principal's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import GROUP_DESCRIBE, GROUP_READ, TOPIC_DESCRIBE
from sluice.broker.handlers.groups import client_host
from sluice.broker.services import UsesAuthorizer, UsesGroups, UsesStore, UsesTopics
from sluice.common.authorizer import ResourceType
from sluice.common.errors import ErrorCode, KafkaError
from sluice.group.api import (
    ShareAssignedTopic,
    ShareGroupDescription,
    ShareGroupHeartbeatRequest,
)
from sluice.group.share_group import ShareTopic
from sluice.protocol.messages import has_field, make, response_module

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext
    from sluice.broker.topics import TopicManager


class ShareGroupsServices(UsesAuthorizer, UsesGroups, UsesStore, UsesTopics, Protocol):
    """What the share groups handlers use of the broker."""


AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
"""What ``authorized_operations`` holds when the client did not ask for them."""


class _BrokerTopics(Mapping[str, ShareTopic]):
    """The broker's topics as the coordinator's assignor sees them, looked up on
    demand (the coordinator reads only the topics its groups subscribe to)."""

    def __init__(self, topics: TopicManager) -> None:
        self._topics = topics

    def __getitem__(self, name: str) -> ShareTopic:
        topic = self._topics.get(name)
        if topic is None:
            raise KeyError(name)
        return ShareTopic(topic.topic_id, topic.partition_count)

    def __iter__(self) -> Iterator[str]:
        return iter(self._topics.all())

    def __len__(self) -> int:
        return len(self._topics.all())


def _topic_partitions(topic_class: type[Any], assigned: tuple[ShareAssignedTopic, ...]) -> Any:
    """Assigned partitions by topic: ShareGroupDescribe names each topic, while
    ShareGroupHeartbeat's assignment has only topic ids (no version has a name there)."""
    names = has_field(topic_class, "topic_name")
    return tuple(
        make(topic_class, topic_id=t.topic_id, partitions=t.partitions)
        if not names
        else make(
            topic_class, topic_id=t.topic_id, topic_name=t.topic_name, partitions=t.partitions
        )
        for t in assigned
    )


# ------------------------------------------------------------- ShareGroupHeartbeat


async def handle_share_group_heartbeat(
    services: ShareGroupsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    try:
        services.authorizer.require(context, GROUP_READ, request.group_id)
        for name in request.subscribed_topic_names or ():
            services.authorizer.require(context, TOPIC_DESCRIBE, name)
        group_configs = services.store.image().group_overrides(request.group_id)
        heartbeat = ShareGroupHeartbeatRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=int(request.member_epoch),
            rack_id=request.rack_id,
            subscribed_topic_names=(
                None
                if request.subscribed_topic_names is None
                else tuple(request.subscribed_topic_names)
            ),
            client_id=context.header.client_id or "",
            client_host=client_host(context),
            topics=_BrokerTopics(services.topics),
            group_configs=group_configs,
        )
        response = await services.groups.share_group_heartbeat(heartbeat)
    except KafkaError as e:
        return make(
            module.ShareGroupHeartbeatResponse,
            throttle_time=0,
            error_code=e.code,
            error_message=str(e) or None,
            member_id=None,
            member_epoch=-1,
            heartbeat_interval=0,
            assignment=None,
        )
    return make(
        module.ShareGroupHeartbeatResponse,
        throttle_time=0,
        error_code=response.error,
        error_message=response.error_message,
        member_id=response.member_id,
        member_epoch=response.member_epoch,
        heartbeat_interval=response.heartbeat_interval_ms,
        assignment=(
            None
            if response.assignment is None
            else make(
                module.Assignment,
                topic_partitions=_topic_partitions(module.TopicPartitions, response.assignment),
            )
        ),
    )


# -------------------------------------------------------------- ShareGroupDescribe


async def handle_share_group_describe(
    services: ShareGroupsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    allowed = services.authorizer.allowed(context, GROUP_DESCRIBE, request.group_ids)
    described = await services.groups.describe_share_groups(
        [g for g in request.group_ids if g in allowed]
    )
    by_id = {d.group_id: d for d in described}
    descriptions = [
        by_id[g]
        if g in allowed
        else ShareGroupDescription(g, GROUP_DESCRIBE.error_code, "may not describe the group")
        for g in request.group_ids
    ]
    groups = []
    for d in descriptions:
        failed = d.error is not ErrorCode.none
        operations = (
            services.authorizer.operations(context, ResourceType.GROUP, d.group_id)
            if request.include_authorized_operations
            else AUTHORIZED_OPERATIONS_OMITTED
        )
        groups.append(
            make(
                module.DescribedGroup,
                error_code=d.error,
                error_message=d.error_message,
                group_id=d.group_id,
                group_state=d.state,
                group_epoch=d.group_epoch,
                assignment_epoch=d.assignment_epoch,
                assignor_name=d.assignor_name,
                members=tuple(
                    make(
                        module.Member,
                        member_id=m.member_id,
                        rack_id=m.rack_id,
                        member_epoch=m.member_epoch,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        subscribed_topic_names=m.subscribed_topic_names,
                        assignment=make(
                            module.Assignment,
                            topic_partitions=_topic_partitions(
                                module.TopicPartitions, m.assignment
                            ),
                        ),
                    )
                    for m in d.members
                ),
                authorized_operations=AUTHORIZED_OPERATIONS_OMITTED if failed else operations,
            )
        )
    return make(module.ShareGroupDescribeResponse, throttle_time=0, groups=tuple(groups))
