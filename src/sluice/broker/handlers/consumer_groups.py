"""The consumer group protocol of KIP-848 on the wire: ConsumerGroupHeartbeat (68, v0–v1)
and ConsumerGroupDescribe (69, v0–v1). Listed in ApiVersions and served when the broker
enables the protocol (``group.coordinator.rebalance.protocols`` with ``consumer``), else
answered UNSUPPORTED_VERSION, as Kafka does (docs/consumer-groups.md).

These translate between kio's messages and the group coordinator's plain data
(:mod:`sluice.group.consumer_heartbeat_api`, :mod:`sluice.group.consumer_coordinator`);
the request goes to the coordinator of the group (FindCoordinator key type 0, the leader
of its ``__consumer_offsets`` partition), NOT_COORDINATOR elsewhere. The handler adds the
broker's topics (name, id, partition count; internal ones marked) for the assignors, and
the group's config overrides from the metadata store (``consumer.session.timeout.ms``,
``consumer.heartbeat.interval.ms``).

Authorization (Kafka's KafkaApis): a heartbeat needs READ on the group
(GROUP_AUTHORIZATION_FAILED) and DESCRIBE on every topic it subscribes to by name
(TOPIC_AUTHORIZATION_FAILED); a description needs DESCRIBE on the group, and on every
topic its members subscribe to or are assigned, else the group is answered
TOPIC_AUTHORIZATION_FAILED. A member's regular expression matches only the topics the
member's principal may DESCRIBE (Kafka's rule): the coordinator asks the handler's
``describable_topics`` at each of the member's heartbeats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import GROUP_DESCRIBE, GROUP_READ, TOPIC_DESCRIBE
from sluice.broker.handlers.group_topics import BrokerTopics as _BrokerTopics
from sluice.broker.handlers.groups import client_host
from sluice.broker.services import UsesAuthorizer, UsesConfig, UsesGroups, UsesStore, UsesTopics
from sluice.common import errors
from sluice.common.authorizer import ResourceType
from sluice.common.errors import ErrorCode, KafkaError
from sluice.group.consumer_coordinator import ConsumerGroupDescription
from sluice.group.consumer_heartbeat_api import ConsumerGroupHeartbeatRequest
from sluice.group.consumer_records import TopicPartitions
from sluice.protocol.messages import has_field, make, millis, response_module

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext
    from sluice.broker.topics import TopicManager


class ConsumerGroupsServices(
    UsesAuthorizer, UsesConfig, UsesGroups, UsesStore, UsesTopics, Protocol
):
    """What the consumer group handlers use of the broker."""


AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
"""What ``authorized_operations`` holds when the client did not ask for them."""
CONSUMER_MEMBER_TYPE = 1
"""ConsumerGroupDescribe v1's member type of a member using this protocol."""
CLASSIC_MEMBER_TYPE = 0
"""ConsumerGroupDescribe v1's member type of a member using the classic protocol."""


DISABLED_MESSAGE = (
    "the consumer group protocol (KIP-848) is not enabled on this broker: set "
    "group.coordinator.rebalance.protocols=classic,consumer, or use group.protocol=classic"
)


def _enabled(services: ConsumerGroupsServices) -> bool:
    return "consumer" in services.config.group_coordinator_rebalance_protocols


def _require_enabled(services: ConsumerGroupsServices) -> None:
    """Kafka answers UNSUPPORTED_VERSION when the consumer protocol is not enabled."""
    if not _enabled(services):
        raise errors.for_code(ErrorCode.unsupported_version)(DISABLED_MESSAGE)


# --------------------------------------------------------- ConsumerGroupHeartbeat


async def handle_consumer_group_heartbeat(
    services: ConsumerGroupsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    try:
        _require_enabled(services)
        services.authorizer.require(context, GROUP_READ, request.group_id)
        for name in request.subscribed_topic_names or ():
            services.authorizer.require(context, TOPIC_DESCRIBE, name)
        owned = request.topic_partitions
        heartbeat = ConsumerGroupHeartbeatRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=int(request.member_epoch),
            instance_id=request.instance_id,
            rack_id=request.rack_id,
            rebalance_timeout_ms=millis(request.rebalance_timeout),
            subscribed_topic_names=(
                None
                if request.subscribed_topic_names is None
                else tuple(request.subscribed_topic_names)
            ),
            subscribed_topic_regex=(
                request.subscribed_topic_regex
                if has_field(type(request), "subscribed_topic_regex")
                else None  # v0 has none
            ),
            server_assignor=request.server_assignor,
            owned_partitions=(
                None
                if owned is None
                else tuple(
                    TopicPartitions(t.topic_id, tuple(int(p) for p in t.partitions))
                    for t in owned
                    if t.topic_id is not None
                )
            ),
            client_id=context.header.client_id or "",
            client_host=client_host(context),
            version=context.header.api_version,
            group_configs=services.store.image().group_overrides(request.group_id),
            describable_topics=lambda names: frozenset(
                services.authorizer.allowed(context, TOPIC_DESCRIBE, names)
            ),
        )
        response = await services.groups.consumer_group_heartbeat(
            heartbeat, _BrokerTopics(services.topics)
        )
    except KafkaError as e:
        return make(
            module.ConsumerGroupHeartbeatResponse,
            throttle_time=0,
            error_code=e.code,
            error_message=str(e) or None,
            member_id=None,
            member_epoch=0,
            heartbeat_interval=0,
            assignment=None,
        )
    return make(
        module.ConsumerGroupHeartbeatResponse,
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
                topic_partitions=tuple(
                    make(module.TopicPartitions, topic_id=t.topic_id, partitions=t.partitions)
                    for t in response.assignment
                ),
            )
        ),
    )


# ---------------------------------------------------------- ConsumerGroupDescribe


async def handle_consumer_group_describe(
    services: ConsumerGroupsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    if not _enabled(services):
        refused = [
            ConsumerGroupDescription(group_id, ErrorCode.unsupported_version, DISABLED_MESSAGE)
            for group_id in request.group_ids
        ]
        return make(
            module.ConsumerGroupDescribeResponse,
            throttle_time=0,
            groups=tuple(
                _described_group(module, services.topics, d, AUTHORIZED_OPERATIONS_OMITTED)
                for d in refused
            ),
        )
    allowed = services.authorizer.allowed(context, GROUP_DESCRIBE, request.group_ids)
    described = await services.groups.describe_consumer_groups(
        [g for g in request.group_ids if g in allowed]
    )
    by_id = {d.group_id: d for d in described}
    groups = []
    for group_id in request.group_ids:
        if group_id not in allowed:
            description = ConsumerGroupDescription(
                group_id, GROUP_DESCRIBE.error_code, "may not describe the group"
            )
        else:
            description = _topics_checked(services, context, by_id[group_id])
        failed = description.error is not ErrorCode.none
        operations = (
            services.authorizer.operations(context, ResourceType.GROUP, group_id)
            if request.include_authorized_operations and not failed
            else AUTHORIZED_OPERATIONS_OMITTED
        )
        groups.append(_described_group(module, services.topics, description, operations))
    return make(module.ConsumerGroupDescribeResponse, throttle_time=0, groups=tuple(groups))


def _topics_checked(
    services: ConsumerGroupsServices,
    context: RequestContext,
    description: ConsumerGroupDescription,
) -> ConsumerGroupDescription:
    """The description, or TOPIC_AUTHORIZATION_FAILED when it names a topic the request
    may not describe (Kafka's rule: a member's subscriptions and assignment show the
    group's topics)."""
    names = {
        name
        for member in description.members
        for name in (
            *member.subscribed_topic_names,
            *_topic_names(services.topics, member.assignment),
            *_topic_names(services.topics, member.target_assignment),
        )
    }
    refused = names - services.authorizer.allowed(context, TOPIC_DESCRIBE, names)
    if not refused:
        return description
    return ConsumerGroupDescription(
        description.group_id,
        TOPIC_DESCRIBE.error_code,
        "The described group uses topics that the client is not authorized to describe.",
    )


def _topic_names(topics: TopicManager, entries: tuple[TopicPartitions, ...]) -> list[str]:
    names = []
    for entry in entries:
        topic = topics.by_id(entry.topic_id)
        if topic is not None:
            names.append(topic.name)
    return names


def _described_group(
    module: Any, topics: TopicManager, d: ConsumerGroupDescription, operations: int
) -> Any:
    def assignment(entries: tuple[TopicPartitions, ...]) -> Any:
        described = []
        for entry in entries:
            topic = topics.by_id(entry.topic_id)
            if topic is None:
                continue  # deleted since: its partitions go at the next heartbeat
            described.append(
                make(
                    module.TopicPartitions,
                    topic_id=entry.topic_id,
                    topic_name=topic.name,
                    partitions=entry.partitions,
                )
            )
        return make(module.Assignment, topic_partitions=tuple(described))

    return make(
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
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=m.subscribed_topic_names,
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=assignment(m.assignment),
                target_assignment=assignment(m.target_assignment),
                member_type=(  # v1+; make() drops it for v0
                    CLASSIC_MEMBER_TYPE if m.uses_classic_protocol else CONSUMER_MEMBER_TYPE
                ),
            )
            for m in d.members
        ),
        authorized_operations=operations,
    )
