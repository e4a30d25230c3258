"""High watermarks of partitions led by another broker, asked of their leader.

The share-group offsets handler (one partition's lag) and the consumer-lag metrics (every
partition a group coordinated here has committed) both need the high watermark of a
partition this broker does not lead: a ListOffsets to the leader, latest offset, read
uncommitted (which Kafka answers with the high watermark), as a consumer would ask.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from sluice.broker.network.peers import Peers
from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.protocol.messages import make, request_module
from sluice.protocol.versions import ApiKey

LATEST_TIMESTAMP = -1
"""ListOffsets' timestamp for "the latest offset"."""


async def leader_high_watermarks(
    peers: Peers, leader: int, partitions: Iterable[TopicPartition], timeout_s: float
) -> dict[TopicPartition, int]:
    """The high watermark of each of ``partitions`` (all led by ``leader``) that its
    leader answered without an error. Raises what :meth:`Peers.request` raises
    (PeerUnavailable, ProtocolError, KafkaError) when the request fails as a whole."""
    by_topic: defaultdict[str, list[int]] = defaultdict(list)
    for topic_partition in partitions:
        by_topic[topic_partition.topic].append(topic_partition.partition)

    def build(version: int) -> Any:
        module = request_module(ApiKey.LIST_OFFSETS, version)
        return make(
            module.ListOffsetsRequest,
            replica_id=-1,
            isolation_level=0,
            timeout=int(timeout_s * 1000),
            topics=tuple(
                make(
                    module.ListOffsetsTopic,
                    name=topic,
                    partitions=tuple(
                        make(
                            module.ListOffsetsPartition,
                            partition_index=index,
                            current_leader_epoch=-1,
                            timestamp=LATEST_TIMESTAMP,
                        )
                        for index in indexes
                    ),
                )
                for topic, indexes in by_topic.items()
            ),
        )

    response = await peers.request(leader, ApiKey.LIST_OFFSETS, build, timeout_s)
    return {
        TopicPartition(str(topic.name), int(partition.partition_index)): int(partition.offset)
        for topic in response.topics
        for partition in topic.partitions
        if partition.error_code == ErrorCode.none
    }
