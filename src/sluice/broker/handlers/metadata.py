"""Metadata: brokers, controller, topics with partition leaders, epochs and ISRs.

Auto-creation happens inside the request (clients treat UNKNOWN_TOPIC_OR_PARTITION as
retriable for a while, but a topic that appears at once is what users expect): the
response waits until the topics are created, while the event loop serves others
(``services.topics``). ``topics`` null means all topics; an empty list means none.
Authorized operations (v8-10), when asked for, are those the principal may do on the
cluster or topic (every one Kafka supports when the authorizer is off).

With the authorizer on (:mod:`sluice.broker.handlers.acl_rules`), as in Kafka: a request
for all topics lists only those the principal may DESCRIBE; a named topic it may not
DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED (whether it exists or not, so names do
not leak); a missing topic is auto-created only with CREATE on the cluster or on the
topic, and otherwise answered TOPIC_AUTHORIZATION_FAILED.

v10+ answers carry each topic's id; from v12 a requested topic may be named by its id
alone (name null): such a topic is never auto-created, and an unknown id is answered with
UNKNOWN_TOPIC_ID, as Kafka does.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.authorization import CLUSTER
from sluice.broker.handlers.acl_rules import CLUSTER_CREATE, TOPIC_CREATE, TOPIC_DESCRIBE
from sluice.broker.services import UsesAuthorizer, UsesTopics
from sluice.broker.topics import INTERNAL_TOPIC_PREFIX
from sluice.cluster.model import ZERO_TOPIC_ID, TopicMetadata
from sluice.common.acls import AUTHORIZED_OPERATIONS_OMITTED
from sluice.common.authorizer import ResourceType
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import topic_name_problem
from sluice.protocol.messages import has_field, make, response_module

if TYPE_CHECKING:
    from types import ModuleType

    from sluice.broker.context import RequestContext


class MetadataServices(UsesAuthorizer, UsesTopics, Protocol):
    """What the metadata handlers use of the broker."""


def _topic_entry(
    module: ModuleType,
    services: MetadataServices,
    context: RequestContext,
    topic: TopicMetadata,
    request: Any,
) -> Any:
    live = {b.node_id for b in services.topics.image.live_brokers()}
    partitions = []
    for index, state in sorted(topic.partitions.items()):
        leader_alive = state.leader in live
        partitions.append(
            make(
                module.MetadataResponsePartition,
                error_code=0 if leader_alive else ErrorCode.leader_not_available,
                partition_index=index,
                leader_id=state.leader if leader_alive else -1,
                leader_epoch=state.leader_epoch,
                replica_nodes=state.replicas,
                isr_nodes=state.isr,
                offline_replicas=tuple(r for r in state.replicas if r not in live),
            )
        )
    return make(
        module.MetadataResponseTopic,
        error_code=0,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.name.startswith(INTERNAL_TOPIC_PREFIX),
        partitions=tuple(partitions),
        topic_authorized_operations=(
            services.authorizer.operations(context, ResourceType.TOPIC, topic.name)
            if getattr(request, "include_topic_authorized_operations", False)
            else AUTHORIZED_OPERATIONS_OMITTED
        ),
    )


def _error_entry(
    module: ModuleType, name: str | None, error_code: int, topic_id: uuid.UUID = ZERO_TOPIC_ID
) -> Any:
    return make(
        module.MetadataResponseTopic,
        error_code=error_code,
        name=name,
        topic_id=topic_id,
        partitions=(),
    )


async def handle_metadata(services: MetadataServices, context: RequestContext, request: Any) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    authorizer = services.authorizer
    listener = context.connection.listener_name
    # v0 has no null: an empty list there means all topics.
    if request.topics is None or (context.header.api_version == 0 and not request.topics):
        entries = [
            _topic_entry(module, services, context, t, request)
            for name, t in sorted(services.topics.all().items())
            if authorizer.allows(context, TOPIC_DESCRIBE, name)
        ]
    else:
        allow_auto_create = (
            request.allow_auto_topic_creation
            if has_field(type(request), "allow_auto_topic_creation")
            else True
        )
        entries = []
        valid = [
            r.name for r in request.topics if r.name is not None and not topic_name_problem(r.name)
        ]
        describable = authorizer.allowed(context, TOPIC_DESCRIBE, valid)
        may_create_any = authorizer.allows(context, CLUSTER_CREATE)
        wanted = [
            name
            for name in valid
            if name in describable
            and (
                services.topics.get(name) is not None
                or may_create_any
                or authorizer.allows(context, TOPIC_CREATE, name)
            )
        ]
        # Every new name in one creation batch, off the event loop (``services.topics``).
        found = await services.topics.ensure_all(wanted) if allow_auto_create else {}
        for requested in request.topics:
            name = requested.name
            topic_id = getattr(requested, "topic_id", None)
            if context.header.api_version >= 12 and topic_id not in (None, ZERO_TOPIC_ID):
                by_id = services.topics.by_id(topic_id)
                if by_id is None:
                    entries.append(_error_entry(module, None, ErrorCode.unknown_topic_id, topic_id))
                elif not authorizer.allows(context, TOPIC_DESCRIBE, by_id.name):
                    refused = ErrorCode.topic_authorization_failed
                    entries.append(_error_entry(module, None, refused))
                else:
                    entries.append(_topic_entry(module, services, context, by_id, request))
                continue
            if name is None or topic_name_problem(name) is not None:
                entries.append(_error_entry(module, name or "", ErrorCode.invalid_topic_exception))
                continue
            if name not in describable or (allow_auto_create and name not in wanted):
                entries.append(_error_entry(module, name, ErrorCode.topic_authorization_failed))
                continue
            topic = found.get(name) if allow_auto_create else services.topics.get(name)
            if isinstance(topic, KafkaError):
                entries.append(_error_entry(module, name, topic.code))
                continue
            if topic is None:
                entries.append(_error_entry(module, name, ErrorCode.unknown_topic_or_partition))
            else:
                entries.append(_topic_entry(module, services, context, topic, request))
    return make(
        module.MetadataResponse,
        throttle_time=0,
        brokers=tuple(
            make(
                module.MetadataResponseBroker,
                node_id=b.node_id,
                host=b.address(listener)[0],
                port=b.address(listener)[1],
                rack=b.rack,
            )
            for b in services.topics.image.live_brokers()
        ),
        cluster_id=services.topics.image.cluster_id,
        controller_id=services.topics.image.controller_id,
        topics=tuple(entries),
        cluster_authorized_operations=(
            services.authorizer.operations(context, ResourceType.CLUSTER, CLUSTER)
            if getattr(request, "include_cluster_authorized_operations", False)
            else AUTHORIZED_OPERATIONS_OMITTED
        ),
        error_code=ErrorCode.none,  # v13+: REBOOTSTRAP_REQUIRED is never needed here
    )
