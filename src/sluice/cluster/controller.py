"""Controller decisions: where a new topic's or partition's replicas go, and who leads.

Pure functions over the metadata model; the broker applies their results through the
metadata store. Replicas are spread round-robin over the live brokers starting at a
per-topic offset, and the first replica is the preferred leader, as in Kafka.

A client may instead name each partition's replicas (CreateTopics and CreatePartitions
``assignments``). Such an assignment is checked as Kafka's controller checks it
(``validateManualPartitionAssignment``), and refused with INVALID_REPLICA_ASSIGNMENT when
a partition has no replicas, names a broker that is not registered or one broker twice,
has a replication factor unlike the other partitions', when a partition index repeats or
the indexes are not 0, 1, 2, ..., or when no replica of a partition is live. The replicas
are stored in the order given; the first live one leads.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from sluice.cluster.model import BrokerInfo, PartitionState, TopicMetadata, new_topic_id
from sluice.common import errors
from sluice.common.errors import ErrorCode
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


InvalidReplicaAssignment = errors.for_code(ErrorCode.invalid_replica_assignment)


def _assigned_partition(
    replicas: Sequence[int], brokers: list[BrokerInfo], replication_factor: int | None
) -> PartitionState:
    """One partition from a client's replica list, checked as Kafka does."""
    if not replicas:
        raise InvalidReplicaAssignment(
            "The manual partition assignment includes an empty replica list."
        )
    live = {b.node_id for b in brokers}
    previous: int | None = None
    for node_id in sorted(replicas):
        if node_id not in live:
            raise InvalidReplicaAssignment(
                f"The manual partition assignment includes broker {node_id}, but no such "
                "broker is registered."
            )
        if node_id == previous:
            raise InvalidReplicaAssignment(
                f"The manual partition assignment includes the broker {node_id} more than once."
            )
        previous = node_id
    if replication_factor is not None and len(replicas) != replication_factor:
        raise InvalidReplicaAssignment(
            f"The manual partition assignment includes a partition with {len(replicas)} "
            "replica(s), but this is not consistent with previous partitions, which have "
            f"{replication_factor} replica(s)."
        )
    # Every registered broker is live on a single node; a cluster store will keep
    # registered and live apart, and the ISR is the live replicas, as in Kafka.
    isr = tuple(r for r in replicas if r in live)
    return PartitionState(tuple(replicas), isr[0], 0, isr)


def assigned_topic(
    name: str,
    assignments: Sequence[tuple[int, Sequence[int]]],
    configs: dict[str, str],
    brokers: list[BrokerInfo],
) -> TopicMetadata:
    """A new topic whose replicas the client chose: (partition index, replicas) in
    request order (CreateTopics with num_partitions and replication_factor -1)."""
    partitions: dict[int, PartitionState] = {}
    replication_factor: int | None = None
    for index, replicas in assignments:
        if index in partitions:
            raise InvalidReplicaAssignment(
                f"Found multiple manual partition assignments for partition {index}"
            )
        partitions[index] = _assigned_partition(replicas, brokers, replication_factor)
        replication_factor = len(replicas)
    if set(partitions) != set(range(len(partitions))):
        raise InvalidReplicaAssignment(
            "partitions should be a consecutive 0-based integer sequence"
        )
    check_partition_count(len(partitions))
    for state in partitions.values():
        if len(state.replicas) > REPLICATION_FACTOR_MAX:
            raise errors.InvalidReplicationFactor(
                f"replication factor {len(state.replicas)} is outside [1, {REPLICATION_FACTOR_MAX}]"
            )
    return TopicMetadata(name, new_topic_id(), partitions, dict(configs))


def with_assigned_partitions(
    topic: TopicMetadata,
    new_count: int,
    assignments: Sequence[Sequence[int]],
    brokers: list[BrokerInfo],
) -> TopicMetadata:
    """``topic`` grown to ``new_count`` partitions whose replicas the client chose, one
    list per added partition (CreatePartitions with assignments)."""
    _check_growth(topic, new_count)
    added = new_count - topic.partition_count
    if len(assignments) != added:
        raise InvalidReplicaAssignment(
            f"Attempted to add {added} additional partition(s), but only "
            f"{len(assignments)} assignment(s) were specified."
        )
    replication_factor = len(topic.partitions[0].replicas)
    partitions = dict(topic.partitions)
    for offset, replicas in enumerate(assignments):
        state = _assigned_partition(replicas, brokers, replication_factor)
        partitions[topic.partition_count + offset] = state
    return TopicMetadata(topic.name, topic.topic_id, partitions, topic.configs, topic.version)


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


def _check_growth(topic: TopicMetadata, new_count: int) -> None:
    check_partition_count(new_count)
    if new_count <= topic.partition_count:
        raise errors.InvalidPartitions(
            f"topic {topic.name!r} has {topic.partition_count} partitions; the new count "
            f"{new_count} must be larger"
        )


def with_partitions(
    topic: TopicMetadata, new_count: int, brokers: list[BrokerInfo]
) -> TopicMetadata:
    """``topic`` grown to ``new_count`` partitions (never shrunk)."""
    _check_growth(topic, new_count)
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
