"""DescribeProducers v0: the active producers of each partition, from its producer state
(what duplicate detection and transactions remember).

Per producer: id, epoch, the last sequence appended (-1 when none carried one), the
largest timestamp of its appended batches, the coordinator epoch of its last marker (-1
when none) and the first offset of its open transaction (-1 when none): what Kafka's
tools show to find a hanging transaction.
Every replica answers, leader or not, as in Kafka. A topic name that is not valid
answers INVALID_TOPIC_EXCEPTION; a topic or partition that does not exist,
UNKNOWN_TOPIC_OR_PARTITION; a partition this broker does not host,
NOT_LEADER_OR_FOLLOWER.

With the authorizer on, each topic needs READ (TOPIC_AUTHORIZATION_FAILED), as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import TOPIC_READ
from sluice.broker.services import UsesAuthorizer, UsesReplicas, UsesTopics
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition, topic_name_problem
from sluice.protocol.messages import make, response_module

if TYPE_CHECKING:
    from types import ModuleType

    from sluice.broker.context import RequestContext


class AdminProducersServices(UsesAuthorizer, UsesReplicas, UsesTopics, Protocol):
    """What the admin producers handlers use of the broker."""


def _topic_error(services: AdminProducersServices, name: str) -> KafkaError | None:
    problem = topic_name_problem(name)
    if problem is not None:
        return errors.InvalidTopicException(problem)
    if services.topics.get(name) is None:
        return errors.UnknownTopicOrPartition(f"topic {name!r} does not exist")
    return None


def _partition_response(
    module: ModuleType, services: AdminProducersServices, tp: TopicPartition
) -> Any:
    partition = services.replicas.find(tp)
    if partition is None:
        topic = services.topics.get(tp.topic)
        exists = topic is not None and tp.partition in topic.partitions
        error: KafkaError = (
            errors.NotLeaderOrFollower(f"this broker does not host {tp}")
            if exists
            else errors.UnknownTopicOrPartition(f"{tp} does not exist")
        )
        return _partition_error(module, tp.partition, error)
    producers = sorted(partition.log.producer_state.producers.values(), key=lambda e: e.producer_id)
    return make(
        module.PartitionResponse,
        partition_index=tp.partition,
        error_code=ErrorCode.none,
        error_message=None,
        active_producers=tuple(
            make(
                module.ProducerState,
                producer_id=entry.producer_id,
                producer_epoch=entry.epoch,
                last_sequence=entry.last_sequence,
                last_timestamp=entry.last_timestamp_ms,
                coordinator_epoch=entry.coordinator_epoch,
                current_txn_start_offset=entry.transaction_first_offset,
            )
            for entry in producers
        ),
    )


def _partition_error(module: ModuleType, index: int, error: KafkaError) -> Any:
    return make(
        module.PartitionResponse,
        partition_index=index,
        error_code=error.code,
        error_message=error.message,
        active_producers=(),
    )


async def handle_describe_producers(
    services: AdminProducersServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    topics = []
    for requested in request.topics:
        topic_error = (
            _topic_error(services, requested.name)
            if services.authorizer.allows(context, TOPIC_READ, requested.name)
            else errors.for_code(TOPIC_READ.error_code)(f"may not read {requested.name!r}")
        )
        partitions = tuple(
            _partition_error(module, int(index), topic_error)
            if topic_error is not None
            else _partition_response(module, services, TopicPartition(requested.name, int(index)))
            for index in requested.partition_indexes
        )
        topics.append(make(module.TopicResponse, name=requested.name, partitions=partitions))
    return make(module.DescribeProducersResponse, throttle_time=0, topics=tuple(topics))
