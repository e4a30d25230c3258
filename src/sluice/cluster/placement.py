"""Placement decisions: where a new topic's or partition's replicas go, and who leads.

Pure functions over the metadata model (randomness is passed in); the broker writes their
results through the metadata store. Replicas are spread over the live brokers as Kafka
spreads them: leaders round-robin from a random broker, racks alternating, followers at
a shifting distance and on other racks where there are any; the first replica is the
preferred leader. Three brokers on racks a, a, b and six partitions of replication
factor 2 give::

    arranged brokers (racks alternate):  1(a) 3(b) 2(a)
    partition   0     1     2     3     4     5
    replicas   1,3   3,2   2,3   1,3   3,1   2,3      (start 0, shift 0)

Every partition has a replica on rack b, the rack with one broker: a follower goes to a
rack without a replica of its partition while there is one.

A client may instead name each partition's replicas (CreateTopics and CreatePartitions
``assignments``). Such an assignment is checked as Kafka's controller checks it
(``validateManualPartitionAssignment``), and refused with INVALID_REPLICA_ASSIGNMENT when
a partition has no replicas, names a broker that is not registered or one broker twice,
has a replication factor unlike the other partitions', when a partition index repeats or
the indexes are not 0, 1, 2, ..., or when no replica of a partition is live. The replicas
are stored in the order given; the first live one leads.
"""

from __future__ import annotations

from collections.abc import Sequence
from random import Random

from sluice.cluster.model import BrokerInfo, PartitionState, TopicMetadata, new_topic_id
from sluice.common import errors
from sluice.common.errors import ErrorCode
from sluice.common.limits import PARTITIONS_PER_TOPIC_MAX, REPLICATION_FACTOR_MAX


def _rack_alternated(brokers: Sequence[BrokerInfo]) -> list[int]:
    """Node ids ordered so that racks take turns (the first broker of each rack, then
    the second of each, ...), racks and brokers in id order: consecutive entries sit on
    different racks wherever the racks allow it."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(brokers, key=lambda b: b.node_id):
        by_rack.setdefault(broker.rack or "", []).append(broker.node_id)
    racks = [by_rack[rack] for rack in sorted(by_rack)]
    return [
        rack_brokers[i]
        for i in range(max(len(r) for r in racks))
        for rack_brokers in racks
        if i < len(rack_brokers)
    ]


def _follower_index(first: int, shift: int, replica: int, broker_count: int) -> int:
    """Where the ``replica``-th follower of a partition whose leader sits at ``first``
    goes: a shift that changes each time the partitions wrap round the brokers, so
    followers do not always trail the same leader."""
    return (first + 1 + (shift + replica) % (broker_count - 1)) % broker_count


def _assign(
    first_partition: int,
    count: int,
    replication_factor: int,
    brokers: Sequence[BrokerInfo],
    random: Random,
    start: int | None = None,
) -> dict[int, PartitionState]:
    """Kafka's placement: leaders round-robin over the brokers (racks alternating) from
    ``start`` (random for a new topic; the position of partition 0's first replica when
    a topic grows); each follower at a shifting distance from its leader, skipping a
    broker whose rack already holds a replica of the partition until every rack holds
    one, and a broker already holding one until every broker does."""
    if not 1 <= replication_factor <= REPLICATION_FACTOR_MAX:
        raise errors.InvalidReplicationFactor(
            f"replication factor {replication_factor} is outside [1, {REPLICATION_FACTOR_MAX}]"
        )
    if replication_factor > len(brokers):
        raise errors.InvalidReplicationFactor(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(brokers)}."
        )
    arranged = _rack_alternated(brokers)
    rack_of = {b.node_id: b.rack or "" for b in brokers}
    rack_count = len(set(rack_of.values()))
    broker_count = len(arranged)
    start_index = random.randrange(broker_count) if start is None else start % broker_count
    shift = random.randrange(broker_count) if start is None else start_index
    partitions: dict[int, PartitionState] = {}
    for index in range(first_partition, first_partition + count):
        if index > 0 and index % broker_count == 0:
            shift += 1
        first = (index + start_index) % broker_count
        replicas = [arranged[first]]
        racks = {rack_of[arranged[first]]}
        k = 0
        while len(replicas) < replication_factor:
            candidate = arranged[_follower_index(first, shift, k, broker_count)]
            k += 1
            rack = rack_of[candidate]
            rack_taken = rack in racks and len(racks) < rack_count
            if candidate in replicas or (rack_taken and k < broker_count):
                continue
            replicas.append(candidate)
            racks.add(rack)
        chosen = tuple(replicas)
        partitions[index] = PartitionState(chosen, chosen[0], 0, chosen)
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
    brokers: Sequence[BrokerInfo],
    random: Random,
) -> TopicMetadata:
    check_partition_count(partition_count)
    partitions = _assign(0, partition_count, replication_factor, brokers, random)
    return TopicMetadata(name, new_topic_id(), partitions, dict(configs))


def _check_growth(topic: TopicMetadata, new_count: int) -> None:
    check_partition_count(new_count)
    if new_count <= topic.partition_count:
        raise errors.InvalidPartitions(
            f"topic {topic.name!r} has {topic.partition_count} partitions; the new count "
            f"{new_count} must be larger"
        )


def with_partitions(
    topic: TopicMetadata, new_count: int, brokers: Sequence[BrokerInfo], random: Random
) -> TopicMetadata:
    """``topic`` grown to ``new_count`` partitions (never shrunk), placed from where
    partition 0's first replica sits, as Kafka does."""
    _check_growth(topic, new_count)
    first_replicas = topic.partitions[0].replicas
    arranged = _rack_alternated(brokers)
    start = arranged.index(first_replicas[0]) if first_replicas[0] in arranged else 0
    added = _assign(
        topic.partition_count,
        new_count - topic.partition_count,
        len(first_replicas),
        brokers,
        random,
        start,
    )
    return TopicMetadata(
        topic.name, topic.topic_id, {**topic.partitions, **added}, topic.configs, topic.version
    )
