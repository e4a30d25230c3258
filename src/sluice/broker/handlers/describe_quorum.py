"""DescribeQuorum v0-2: the KRaft quorum of the cluster metadata log, which Sluice has none of.

Sluice keeps its metadata in ZooKeeper or in a file (see docs/ARCHITECTURE.md), so no
partition is the log of a Raft quorum: not even ``__cluster_metadata``-0, the one a Kafka
quorum describes. Every requested partition is answered UNKNOWN_TOPIC_OR_PARTITION, which
is what a Kafka quorum answers for a partition that is not its log, with a message (v2)
saying why; the response itself carries no error, so admin tools show that answer rather
than fail. The request is served rather than left out of ApiVersions so that a tool
asking it gets this answer, not a missing-feature error about the broker's version.

With the authorizer on it needs DESCRIBE on the cluster, as Kafka's controller asks;
without it the whole response is CLUSTER_AUTHORIZATION_FAILED (31) and lists nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import CLUSTER_DESCRIBE
from sluice.broker.services import UsesAuthorizer
from sluice.common.errors import ErrorCode
from sluice.protocol.messages import make, response_module

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext


class DescribeQuorumServices(UsesAuthorizer, Protocol):
    """What the describe quorum handlers use of the broker."""


NO_QUORUM_MESSAGE = (
    "Sluice keeps the cluster metadata in ZooKeeper or a file: there is no KRaft quorum "
    "and no __cluster_metadata partition"
)


async def handle_describe_quorum(
    services: DescribeQuorumServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    if not services.authorizer.allows(context, CLUSTER_DESCRIBE):
        return make(
            module.DescribeQuorumResponse,
            error_code=CLUSTER_DESCRIBE.error_code,
            error_message=None,
            topics=(),
            nodes=(),
        )
    topics = tuple(
        make(
            module.TopicData,
            topic_name=topic.topic_name,
            partitions=tuple(
                make(
                    module.PartitionData,
                    partition_index=partition.partition_index,
                    error_code=ErrorCode.unknown_topic_or_partition,
                    error_message=NO_QUORUM_MESSAGE,
                    leader_id=-1,
                    leader_epoch=-1,
                    high_watermark=-1,
                    current_voters=(),
                    observers=(),
                )
                for partition in topic.partitions
            ),
        )
        for topic in request.topics
    )
    return make(
        module.DescribeQuorumResponse,
        error_code=ErrorCode.none,
        error_message=None,
        topics=topics,
        nodes=(),
    )
