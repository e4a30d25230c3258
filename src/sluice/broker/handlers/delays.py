"""SluiceDescribeDelays v0 (a Sluice API, see :mod:`sluice.protocol.private`): the
delayed records waiting in the partitions of a topic that this broker leads.

Per partition: how many records wait (those of undecided transactions included), how
many were delivered, the earliest due time, and the first ``limit`` waiting records by
due time (offset, due time, schedule id), from the partition's delay index. A partition
led by another broker answers NOT_LEADER_OR_FOLLOWER with that broker's id (only the
leader's index is certain to be up to date); an unknown topic or partition,
UNKNOWN_TOPIC_OR_PARTITION. A request that is not the documented object closes the
connection, as a malformed Kafka request does.

With the authorizer on, the topic needs READ (its delayed records are its records).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Protocol

from sluice.broker.handlers.acl_rules import TOPIC_READ
from sluice.broker.services import UsesAuthorizer, UsesConfig, UsesReplicas, UsesTopics
from sluice.common.errors import ErrorCode, ProtocolError
from sluice.common.ids import TopicPartition

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext


class DelaysServices(UsesAuthorizer, UsesConfig, UsesReplicas, UsesTopics, Protocol):
    """What the delays handlers use of the broker."""


LIMIT_MAX: Final = 1000
"""At most this many waiting records are listed per partition."""


def _request_fields(body: dict[str, Any]) -> tuple[str, list[int] | None, int]:
    topic = body.get("topic")
    partitions = body.get("partitions")
    limit = body.get("limit", 10)
    if not isinstance(topic, str):
        raise ProtocolError("SluiceDescribeDelays: 'topic' must be a string")
    if partitions is not None and not (
        isinstance(partitions, list) and all(type(p) is int for p in partitions)
    ):
        raise ProtocolError("SluiceDescribeDelays: 'partitions' must be a list of integers")
    if type(limit) is not int or not 0 <= limit <= LIMIT_MAX:
        raise ProtocolError(f"SluiceDescribeDelays: 'limit' must be 0..{LIMIT_MAX}")
    return topic, partitions, limit


async def handle_describe_delays(
    services: DelaysServices, context: RequestContext, body: dict[str, Any]
) -> dict[str, Any]:
    name, requested, limit = _request_fields(body)
    if not services.authorizer.allows(context, TOPIC_READ, name):
        return {
            "error_code": int(TOPIC_READ.error_code),
            "error_message": f"may not read topic {name!r}",
            "partitions": [],
        }
    topic = services.topics.get(name)
    if topic is None:
        return {
            "error_code": int(ErrorCode.unknown_topic_or_partition),
            "error_message": f"topic {name!r} does not exist",
            "partitions": [],
        }
    indexes = sorted(topic.partitions) if requested is None else requested
    return {
        "error_code": 0,
        "error_message": None,
        "partitions": [
            _describe(services, TopicPartition(name, index), index in topic.partitions, limit)
            for index in indexes
        ],
    }


def _describe(
    services: DelaysServices, tp: TopicPartition, exists: bool, limit: int
) -> dict[str, Any]:
    answer: dict[str, Any] = {"partition": tp.partition, "error_code": 0, "error_message": None}
    partition = services.replicas.find(tp)
    topic = services.topics.get(tp.topic)
    state = None if topic is None else topic.partitions.get(tp.partition)
    if not exists or state is None:
        answer.update(
            error_code=int(ErrorCode.unknown_topic_or_partition),
            error_message=f"{tp} does not exist",
        )
        return answer
    if partition is None or not partition.is_leader:
        answer.update(
            error_code=int(ErrorCode.not_leader_or_follower),
            error_message=f"broker {services.config.node_id} does not lead {tp}",
            leader=state.leader,
        )
        return answer
    delays = partition.log.delays
    counts = delays.counts()
    index = delays.index
    answer.update(
        leader=services.config.node_id,
        pending=counts.pending,
        fired=counts.fired,
        next_due_ms=counts.next_due_ms,
        first=[]
        if index is None
        else [
            {"offset": offset, "due_ms": due_ms, "schedule_id": schedule_id}
            for offset, due_ms, schedule_id in index.pending(limit=limit)
        ],
    )
    return answer
