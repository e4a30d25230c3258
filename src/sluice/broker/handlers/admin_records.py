"""DeleteRecords v0-2: move a partition's log start offset forward.

Per partition, the requested offset becomes the new log start offset; -1 means the high
watermark (delete everything committed). An offset beyond the high watermark is refused
with OFFSET_OUT_OF_RANGE, as is any other negative offset. An offset below the current
log start offset deletes nothing and answers the current one. The answer's
``low_watermark`` is the log start offset after the deletion.

The leader answers at once: followers catch up with the log start offset when they next
fetch, so the request's ``timeout`` is not waited on.

With the authorizer on, each topic needs DELETE (TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import TOPIC_DELETE
from sluice.broker.services import UsesAuthorizer, UsesReplicas
from sluice.common import errors
from sluice.common.errors import KafkaError
from sluice.common.ids import TopicPartition
from sluice.protocol.messages import make, response_module

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext


class AdminRecordsServices(UsesAuthorizer, UsesReplicas, Protocol):
    """What the admin records handlers use of the broker."""


HIGH_WATERMARK_OFFSET = -1
"""The requested offset that stands for "up to the high watermark"."""


def _delete_before(
    services: AdminRecordsServices, topic_partition: TopicPartition, offset: int
) -> int:
    """Delete records below ``offset``; return the new log start offset."""
    partition = services.replicas.get(topic_partition)
    partition.check_leader()
    high_watermark = partition.high_watermark
    if offset == HIGH_WATERMARK_OFFSET:
        offset = high_watermark
    if not 0 <= offset <= high_watermark:
        raise errors.OffsetOutOfRange(
            f"{topic_partition}: cannot delete records before offset {offset}; the high "
            f"watermark is {high_watermark}"
        )
    return int(partition.log.delete_records_before(offset))


async def handle_delete_records(
    services: AdminRecordsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    topics = []
    for requested_topic in request.topics:
        partitions = []
        for requested in requested_topic.partitions:
            tp = TopicPartition(requested_topic.name, requested.partition_index)
            error_code, low_watermark = 0, -1
            try:
                services.authorizer.require(context, TOPIC_DELETE, tp.topic)
                low_watermark = _delete_before(services, tp, int(requested.offset))
            except KafkaError as e:
                error_code = e.code
            partitions.append(
                make(
                    module.DeleteRecordsPartitionResult,
                    partition_index=requested.partition_index,
                    low_watermark=low_watermark,
                    error_code=error_code,
                )
            )
        topics.append(
            make(
                module.DeleteRecordsTopicResult,
                name=requested_topic.name,
                partitions=tuple(partitions),
            )
        )
    return make(module.DeleteRecordsResponse, throttle_time=0, topics=tuple(topics))
