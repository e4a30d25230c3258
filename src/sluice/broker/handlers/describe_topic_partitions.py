"""DescribeTopicPartitions v0 (KIP-966): topics and their partitions, a page at a time.

What Kafka 3.9+ admin clients use to describe topics (Metadata is their fallback).
Topics are answered in name order, each with its id and its partitions' leader, leader
epoch, replicas, ISR, eligible leader replicas, last known ELR (KIP-966, as the
controller keeps them: :mod:`sluice.cluster.eligible`) and offline replicas. An empty
topic list means every topic.

Paging: at most ``min(response_partition_limit,
DESCRIBE_TOPIC_PARTITIONS_RESPONSE_PARTITIONS_MAX)`` partitions (at least one) are
answered. When more remain, ``next_cursor`` names the topic and partition to ask for
next, and the client sends the same request with that cursor; topics named before the
cursor's topic are skipped. As in Kafka, a named topic that does not exist is answered
with UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an illegal name), and a
cursor whose topic is not among the named topics, or whose partition is negative, makes
every topic INVALID_REQUEST.

With the authorizer on, a topic needs DESCRIBE: every topic's listing leaves the others
out, a named one is answered TOPIC_AUTHORIZATION_FAILED; authorized operations are the
principal's.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import TOPIC_DESCRIBE
from sluice.broker.services import UsesAuthorizer, UsesTopics
from sluice.broker.topics import INTERNAL_TOPIC_PREFIX
from sluice.cluster.model import ZERO_TOPIC_ID, TopicMetadata
from sluice.common.authorizer import ResourceType
from sluice.common.errors import ErrorCode
from sluice.common.ids import topic_name_problem
from sluice.common.limits import DESCRIBE_TOPIC_PARTITIONS_RESPONSE_PARTITIONS_MAX
from sluice.protocol.messages import make, response_module

if TYPE_CHECKING:
    from types import ModuleType

    from sluice.broker.context import RequestContext


class DescribeTopicPartitionsServices(UsesAuthorizer, UsesTopics, Protocol):
    """What the describe topic partitions handlers use of the broker."""


log = logging.getLogger(__name__)


def _partitions(
    module: ModuleType,
    services: DescribeTopicPartitionsServices,
    topic: TopicMetadata,
    first: int,
    count: int,
) -> list[Any]:
    live = {b.node_id for b in services.topics.image.live_brokers()}
    answers = []
    for index in range(first, min(first + count, topic.partition_count)):
        state = topic.partitions[index]
        answers.append(
            make(
                module.DescribeTopicPartitionsResponsePartition,
                error_code=ErrorCode.none,
                partition_index=index,
                leader_id=state.leader if state.leader in live else -1,
                leader_epoch=state.leader_epoch,
                replica_nodes=state.replicas,
                isr_nodes=state.isr,
                eligible_leader_replicas=state.elr,
                last_known_elr=state.last_known_elr,
                offline_replicas=tuple(r for r in state.replicas if r not in live),
            )
        )
    return answers


def _topic(module: ModuleType, name: str, error: ErrorCode, **fields: Any) -> Any:
    return make(
        module.DescribeTopicPartitionsResponseTopic,
        error_code=error,
        name=name,
        topic_id=fields.pop("topic_id", ZERO_TOPIC_ID),
        is_internal=name.startswith(INTERNAL_TOPIC_PREFIX),
        partitions=fields.pop("partitions", ()),
        **fields,
    )


async def handle_describe_topic_partitions(
    services: DescribeTopicPartitionsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    every_topic = not request.topics
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    if every_topic:
        names = sorted(
            name
            for name in services.topics.all()
            if name >= cursor_topic and services.authorizer.allows(context, TOPIC_DESCRIBE, name)
        )
    else:
        names = sorted({t.name for t in request.topics if t.name >= cursor_topic})
        if cursor is not None and cursor.topic_name not in names:
            return _invalid(module, request, "the cursor's topic is not among the topics named")
    if cursor is not None and cursor.partition_index < 0:
        return _invalid(module, request, "the cursor's partition is negative")
    remaining = max(
        min(
            int(request.response_partition_limit), DESCRIBE_TOPIC_PARTITIONS_RESPONSE_PARTITIONS_MAX
        ),
        1,
    )
    topics: list[Any] = []
    next_cursor = None
    for name in names:
        if remaining == 0:
            next_cursor = make(module.Cursor, topic_name=name, partition_index=0)
            break
        if not services.authorizer.allows(context, TOPIC_DESCRIBE, name):
            topics.append(_topic(module, name, TOPIC_DESCRIBE.error_code))
            continue
        topic = services.topics.get(name)
        if topic is None:
            if not every_topic:
                error = (
                    ErrorCode.invalid_topic_exception
                    if topic_name_problem(name) is not None
                    else ErrorCode.unknown_topic_or_partition
                )
                topics.append(_topic(module, name, error))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        partitions = _partitions(module, services, topic, first, remaining)
        topics.append(
            _topic(
                module,
                name,
                ErrorCode.none,
                topic_id=topic.topic_id,
                partitions=tuple(partitions),
                topic_authorized_operations=services.authorizer.operations(
                    context, ResourceType.TOPIC, name
                ),
            )
        )
        following = first + len(partitions)
        if following < topic.partition_count:
            next_cursor = make(module.Cursor, topic_name=name, partition_index=following)
            break
        remaining -= len(partitions)
    return make(
        module.DescribeTopicPartitionsResponse,
        throttle_time=0,
        topics=tuple(topics),
        next_cursor=next_cursor,
    )


def _invalid(module: ModuleType, request: Any, reason: str) -> Any:
    """Kafka's answer to a request it refuses as a whole: every named topic with
    INVALID_REQUEST (the response has no place for the reason; it is logged)."""
    log.debug("DescribeTopicPartitions refused: %s", reason)
    return make(
        module.DescribeTopicPartitionsResponse,
        throttle_time=0,
        topics=tuple(_topic(module, t.name, ErrorCode.invalid_request) for t in request.topics),
        next_cursor=None,
    )
