"""OffsetForLeaderEpoch v2–4: where a leader epoch ends in this leader's log.

For each partition the request names an epoch; the answer is the largest epoch here not
above it and the offset where that epoch ends (the start of the next newer one, or the
log end offset for the latest epoch), or -1/-1 when this log has no epoch that old
(``storage.leader_epoch``). Followers ask it to truncate after a leader change
(``broker.replication.replica_fetcher``); clients ask it to check that their position still exists
after one (librdkafka, KIP-320). Only the leader answers (NOT_LEADER_OR_FOLLOWER
otherwise), and ``current_leader_epoch`` is checked as Fetch checks it
(FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH). Kafka's "debug" replica id -2 (what v0–2
imply) is treated as a client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import CLUSTER_ACTION, TOPIC_DESCRIBE
from sluice.broker.services import UsesAuthorizer, UsesReplicas, UsesTopics
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition
from sluice.protocol.messages import make, response_module
from sluice.protocol.versions import ApiKey

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext


class OffsetForLeaderEpochServices(UsesAuthorizer, UsesReplicas, UsesTopics, Protocol):
    """What the offset for leader epoch handlers use of the broker."""


UNDEFINED = -1


def _end_of_epoch(
    services: OffsetForLeaderEpochServices, topic: str, wanted: Any
) -> tuple[int, int, int]:
    """(error code, epoch, end offset) for one requested partition."""
    try:
        source, _ = services.topics.resolve(TopicPartition(topic, wanted.partition))
        partition = services.replicas.get(source)
        partition.check_leader(int(wanted.current_leader_epoch))
    except KafkaError as e:
        return e.code, UNDEFINED, UNDEFINED
    epoch, end_offset = partition.log.end_offset_for_epoch(int(wanted.leader_epoch))
    return ErrorCode.none, epoch, end_offset


async def handle_offset_for_leader_epoch(
    services: OffsetForLeaderEpochServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, context.header.api_version)
    authorizer = services.authorizer
    names = {str(t.topic) for t in request.topics}
    refused: dict[str, int] = {}
    if int(getattr(request, "replica_id", -1)) >= 0:  # a follower (v3+)
        if not authorizer.allows(context, CLUSTER_ACTION):
            refused = dict.fromkeys(names, CLUSTER_ACTION.error_code)
    else:
        allowed = authorizer.allowed(context, TOPIC_DESCRIBE, names)
        refused = {n: TOPIC_DESCRIBE.error_code for n in names - allowed}
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            if str(topic.topic) in refused:
                code, epoch, end_offset = refused[str(topic.topic)], -1, -1
            else:
                code, epoch, end_offset = _end_of_epoch(services, str(topic.topic), wanted)
            partitions.append(
                make(
                    module.EpochEndOffset,
                    error_code=code,
                    partition=wanted.partition,
                    leader_epoch=epoch,
                    end_offset=end_offset,
                )
            )
        topics.append(
            make(module.OffsetForLeaderTopicResult, topic=topic.topic, partitions=tuple(partitions))
        )
    return make(module.OffsetForLeaderEpochResponse, throttle_time=0, topics=tuple(topics))
