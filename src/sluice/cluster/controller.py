"""Controller decisions: where a new topic's or partition's replicas go, and who leads.

Pure functions over the metadata model; the broker applies their results through the
metadata store. Replicas are spread round-robin over the live brokers starting at a
per-topic offset, and the first replica is the preferred leader, as in Kafka.
"""

from __future__ import annotations

import zlib

from sluice.cluster.model import BrokerInfo, PartitionState, TopicMetadata, new_topic_id
from sluice.common import errors
from sluice.common.limits import PARTITIONS_PER_TOPIC_MAX, REPLICATION_FACTOR_MAX


def _assign(
    name: str, first: int, count: int, replication_factor: int, brokers: list[BrokerInfo]
) -> dict[int, PartitionState]:
    if not 1 <= replication_factor <= REPLICATION_FACTOR_MAX:
        raise errors.InvalidReplicationFactor(
            f"replication factor {replication_factor} is outside [1, {REPLICATION_FACTOR_MAX}]"
        )
    if replication_factor > len(brokers):
        raise errors.InvalidReplicationFactor(
            f"replication factor {replication_factor} is larger than the "
            f"{len(brokers)} live broker(s)"
        )
    node_ids = sorted(b.node_id for b in brokers)
    start = zlib.crc32(name.encode()) % len(node_ids)
    partitions: dict[int, PartitionState] = {}
    for index in range(first, first + count):
        replicas = tuple(
            node_ids[(start + index + r) % len(node_ids)] for r in range(replication_factor)
        )
        partitions[index] = PartitionState(replicas, replicas[0], 0, replicas)
    return partitions


def check_partition_count(count: int) -> None:
    if not 1 <= count <= PARTITIONS_PER_TOPIC_MAX:
        raise errors.InvalidPartitions(
            f"partition count {count} is outside [1, {PARTITIONS_PER_TOPIC_MAX}]"
        )


def new_topic(
    name: str,
    partition_count: int,
    replication_factor: int,
    configs: dict[str, str],
    brokers: list[BrokerInfo],
) -> TopicMetadata:
    check_partition_count(partition_count)
    partitions = _assign(name, 0, partition_count, replication_factor, brokers)
    return TopicMetadata(name, new_topic_id(), partitions, dict(configs))


def with_partitions(
    topic: TopicMetadata, new_count: int, brokers: list[BrokerInfo]
) -> TopicMetadata:
    """``topic`` grown to ``new_count`` partitions (never shrunk)."""
    check_partition_count(new_count)
    if new_count <= topic.partition_count:
        raise errors.InvalidPartitions(
            f"topic {topic.name!r} has {topic.partition_count} partitions; the new count "
            f"{new_count} must be larger"
        )
    replication_factor = len(topic.partitions[0].replicas)
    added = _assign(
        topic.name,
        topic.partition_count,
        new_count - topic.partition_count,
        replication_factor,
        brokers,
    )
    return TopicMetadata(
        topic.name, topic.topic_id, {**topic.partitions, **added}, topic.configs, topic.version
    )
