"""ListOffsets: an offset per partition, by time or by one of Kafka's special timestamps.

A request's timestamp is either a time (>= 0: the first record at or after it) or one of
these, each allowed from the request version Kafka allows it (KIP-734, KIP-1005)::

    timestamp  name                      from  answer (a broker without tiered storage)
    -1         LATEST                    v1    high watermark (read_committed, v2+: the
                                               last stable offset)
    -2         EARLIEST                  v1    log start offset
    -3         MAX_TIMESTAMP             v7    offset and timestamp of the record with the
                                               largest timestamp; -1/-1 if it is at or
                                               above the high watermark or there is none
    -4         EARLIEST_LOCAL            v8    log start offset (all of the log is local)
    -5         LATEST_TIERED             v9    offset -1, timestamp -1, leader epoch -1
    -6         EARLIEST_PENDING_UPLOAD   v11   offset -1, timestamp -1, leader epoch -1

Any other negative timestamp, or one of these below its version, is answered for that
partition with UNSUPPORTED_VERSION, as Kafka's ReplicaManager does; the request's other
partitions are answered normally. A partition named twice gets INVALID_REQUEST. Under
read_committed (v2+) every answer stays below the last stable offset instead of the high
watermark, as Kafka's does.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import TOPIC_DESCRIBE
from sluice.broker.services import UsesAuthorizer, UsesReplicas, UsesTopics
from sluice.common import errors
from sluice.common.errors import KafkaError
from sluice.common.ids import TopicPartition
from sluice.protocol.messages import make, response_module

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext
    from sluice.broker.replication.partition import Partition


class ListOffsetsServices(UsesAuthorizer, UsesReplicas, UsesTopics, Protocol):
    """What the list offsets handlers use of the broker."""


READ_COMMITTED = 1
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6

FIRST_VERSION_OF_SPECIAL_TIMESTAMP: dict[int, int] = {
    LATEST_TIMESTAMP: 1,
    EARLIEST_TIMESTAMP: 1,
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL_TIMESTAMP: 8,
    LATEST_TIERED_TIMESTAMP: 9,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP: 11,
}
"""The request version from which Kafka accepts each negative timestamp."""

UNKNOWN = -1
"""Offset, timestamp and leader epoch of "no answer"."""


def special_timestamp_problem(timestamp: int, version: int) -> str | None:
    """Why ``timestamp`` cannot be asked at request ``version``, or None if it can."""
    if timestamp >= 0:
        return None
    first = FIRST_VERSION_OF_SPECIAL_TIMESTAMP.get(timestamp)
    if first is None:
        return f"timestamp {timestamp} is neither a time nor one of Kafka's special timestamps"
    if version < first:
        return f"timestamp {timestamp} needs ListOffsets v{first} or later, not v{version}"
    return None


def _lookup(partition: Partition, timestamp: int, read_committed: bool) -> tuple[int, int, int]:
    """(timestamp, offset, leader epoch) for one partition this broker leads."""
    log = partition.log
    epoch = partition.leader_epoch
    upper = log.last_stable_offset if read_committed else partition.high_watermark
    if timestamp == LATEST_TIMESTAMP:
        return UNKNOWN, upper, epoch
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        return UNKNOWN, log.log_start_offset, epoch
    if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
        return UNKNOWN, UNKNOWN, UNKNOWN
    if timestamp == MAX_TIMESTAMP:
        found = log.max_timestamp_offset()
        if found is None or found.offset >= upper:
            return UNKNOWN, UNKNOWN, UNKNOWN
        return found.timestamp_ms, found.offset, found.leader_epoch
    by_time = log.offset_for_timestamp(timestamp)
    if by_time is None or by_time[0] >= upper:
        return UNKNOWN, UNKNOWN, UNKNOWN
    offset, found_timestamp = by_time
    return found_timestamp, offset, epoch


async def handle_list_offsets(
    services: ListOffsetsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    named = Counter(
        (topic.name, partition.partition_index)
        for topic in request.topics
        for partition in topic.partitions
    )
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    describable = services.authorizer.allowed(
        context, TOPIC_DESCRIBE, {str(t.name) for t in request.topics}
    )
    topics = []
    for requested_topic in request.topics:
        partitions = []
        for requested in requested_topic.partitions:
            tp = TopicPartition(requested_topic.name, requested.partition_index)
            error_code, timestamp, offset, epoch = 0, UNKNOWN, UNKNOWN, UNKNOWN
            try:
                if named[requested_topic.name, requested.partition_index] > 1:
                    raise errors.InvalidRequest(f"{tp} appears more than once in the request")
                if tp.topic not in describable:
                    raise errors.for_code(TOPIC_DESCRIBE.error_code)(f"may not describe {tp}")
                problem = special_timestamp_problem(
                    int(requested.timestamp), context.header.api_version
                )
                if problem is not None:
                    raise errors.UnsupportedVersion(problem)
                partition = services.replicas.get(services.topics.resolve(tp)[0])
                partition.check_leader(getattr(requested, "current_leader_epoch", -1))
                timestamp, offset, epoch = _lookup(
                    partition, int(requested.timestamp), read_committed
                )
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
