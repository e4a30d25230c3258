"""ListOffsets v1–5: earliest (-2), latest (-1), or the first offset at or after a
timestamp. "Latest" is the high watermark, which is also the last stable offset until
transactions exist."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.broker.dispatcher import handler
from sluice.common.errors import KafkaError
from sluice.common.ids import TopicPartition
from sluice.protocol.codec import RequestHeader
from sluice.protocol.messages import make, response_module
from sluice.protocol.versions import ApiKey

if TYPE_CHECKING:
    from sluice.broker.app import Broker

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


@handler(ApiKey.LIST_OFFSETS)
async def handle_list_offsets(broker: Broker, header: RequestHeader, request: Any) -> Any:
    module = response_module(header.api_key, header.api_version)
    topics = []
    for requested_topic in request.topics:
        partitions = []
        for requested in requested_topic.partitions:
            tp = TopicPartition(requested_topic.name, requested.partition_index)
            error_code, timestamp, offset, epoch = 0, -1, -1, -1
            try:
                partition = broker.replicas.get(tp)
                partition.check_leader(getattr(requested, "current_leader_epoch", -1))
                epoch = partition.leader_epoch
                if requested.timestamp == LATEST_TIMESTAMP:
                    offset = partition.high_watermark
                elif requested.timestamp == EARLIEST_TIMESTAMP:
                    offset = partition.log.log_start_offset
                else:
                    found = partition.log.offset_for_timestamp(int(requested.timestamp))
                    if found is not None:
                        offset, timestamp = found
                        if offset >= partition.high_watermark:
                            offset, timestamp = -1, -1
            except KafkaError as e:
                error_code = e.code
            partitions.append(
                make(
                    module.ListOffsetsPartitionResponse,
                    partition_index=requested.partition_index,
                    error_code=error_code,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=epoch,
                )
            )
        topics.append(
            make(
                module.ListOffsetsTopicResponse,
                name=requested_topic.name,
                partitions=tuple(partitions),
            )
        )
    return make(module.ListOffsetsResponse, throttle_time=0, topics=tuple(topics))
