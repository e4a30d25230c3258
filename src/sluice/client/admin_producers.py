"""Producers as an administrator sees them, and the hanging transactions among them:
what ``kafka-transactions.sh describe-producers``, ``find-hanging`` and ``abort`` ask.

- :func:`describe_producers`: DescribeProducers at each partition's leader, the active
  producers of its producer state (id, epoch, last sequence and timestamp, the
  coordinator epoch of its last marker, the first offset of its open transaction).
- :func:`find_hanging_transactions`: the open transactions (a producer with a
  transaction start offset) whose producer's last write is older than the longest
  transaction timeout allowed, and that the transaction coordinator will not finish:
  no transactional id is listed for the producer id (ListTransactions), the id is
  unknown to its coordinator, or its transaction (DescribeTransactions) does not hold
  the partition. These keep the partition's last stable offset back, so read_committed
  consumers stop there until the transaction is aborted.
- :func:`abort_transaction`: WriteTxnMarkers to the partition's leader, an abort marker
  for the producer id and epoch, with the coordinator epoch of the producer's last marker
  (0 when it has none, which no coordinator epoch is below).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sluice.client.admin_transactions import describe_transactions, list_transactions
from sluice.client.cluster import Cluster, run_all
from sluice.client.messages import Request
from sluice.common import errors
from sluice.common.errors import ErrorCode
from sluice.common.ids import NodeId, TopicPartition
from sluice.protocol.versions import ApiKey

NO_TRANSACTION = -1
"""A producer's transaction start offset when it has no open transaction."""

PARTITIONS_PER_REQUEST_MAX = 500
"""Partitions one DescribeProducers asks about at most (a broker's worth is split)."""


@dataclass(frozen=True)
class ProducerState:
    """One active producer of a partition, as DescribeProducers reports it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int
    """Of the producer's last transaction marker; -1 when it has none."""
    transaction_start_offset: int
    """First offset of its open transaction; NO_TRANSACTION when none is open."""


@dataclass(frozen=True)
class OpenTransaction:
    topic_partition: TopicPartition
    producer: ProducerState


async def describe_producers(
    cluster: Cluster, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, list[ProducerState]]:
    """The active producers of each partition, asking its leader; raises the error of
    the first partition refused (e.g. UnknownTopicOrPartition)."""
    wanted = sorted(set(partitions))
    metadata = await cluster.metadata(sorted({tp.topic for tp in wanted}))
    by_leader: dict[NodeId, list[TopicPartition]] = defaultdict(list)
    for topic_partition in wanted:
        by_leader[metadata.leader(topic_partition)].append(topic_partition)
    found: dict[TopicPartition, list[ProducerState]] = {}

    async def ask(leader: NodeId, leader_partitions: Sequence[TopicPartition]) -> None:
        connection = await cluster.connection(leader)
        for start in range(0, len(leader_partitions), PARTITIONS_PER_REQUEST_MAX):
            batch = leader_partitions[start : start + PARTITIONS_PER_REQUEST_MAX]
            by_topic: dict[str, list[int]] = defaultdict(list)
            for topic_partition in batch:
                by_topic[topic_partition.topic].append(topic_partition.partition)
            response = await connection.request(
                Request(
                    ApiKey.DESCRIBE_PRODUCERS,
                    {
                        "topics": [
                            {"name": name, "partition_indexes": indexes}
                            for name, indexes in by_topic.items()
                        ]
                    },
                )
            )
            for topic in response.topics:
                for partition in topic.partitions:
                    topic_partition = TopicPartition(topic.name, int(partition.partition_index))
                    if partition.error_code != ErrorCode.none:
                        detail = partition.error_message or f"partition {topic_partition}"
                        raise errors.for_code(partition.error_code)(detail)
                    found[topic_partition] = [
                        ProducerState(
                            int(p.producer_id),
                            int(p.producer_epoch),
                            int(p.last_sequence),
                            int(p.last_timestamp),
                            int(p.coordinator_epoch),
                            int(p.current_txn_start_offset),
                        )
                        for p in partition.active_producers
                    ]

    await run_all(ask(leader, group) for leader, group in by_leader.items())
    return found


def open_transactions_older_than(
    producers: Mapping[TopicPartition, Sequence[ProducerState]], now_ms: int, age_ms: int
) -> list[OpenTransaction]:
    """The open transactions whose producer last wrote more than ``age_ms`` before
    ``now_ms`` (candidates for hanging: younger ones may still be finished)."""
    return [
        OpenTransaction(topic_partition, producer)
        for topic_partition, states in sorted(producers.items())
        for producer in states
        if producer.transaction_start_offset != NO_TRANSACTION
        and now_ms - producer.last_timestamp_ms > age_ms
    ]


def hanging_among(
    candidates: Sequence[OpenTransaction],
    transactional_ids: Mapping[int, str],
    coordinator_partitions: Mapping[str, frozenset[TopicPartition] | None],
) -> list[OpenTransaction]:
    """The candidates the coordinator will not finish: their producer id has no
    transactional id, the id is unknown to its coordinator (None), or the coordinator's
    transaction does not hold the partition (its markers will never be written there)."""
    hanging = []
    for candidate in candidates:
        transactional_id = transactional_ids.get(candidate.producer.producer_id)
        held = None if transactional_id is None else coordinator_partitions.get(transactional_id)
        if held is None or candidate.topic_partition not in held:
            hanging.append(candidate)
    return hanging


async def find_hanging_transactions(
    cluster: Cluster, partitions: Iterable[TopicPartition], *, now_ms: int, age_ms: int
) -> list[OpenTransaction]:
    """The hanging transactions of ``partitions`` (see the module docstring)."""
    candidates = open_transactions_older_than(
        await describe_producers(cluster, partitions), now_ms, age_ms
    )
    if not candidates:
        return []
    producer_ids = sorted({c.producer.producer_id for c in candidates})
    listings = await list_transactions(cluster, producer_ids=producer_ids)
    transactional_ids = {
        listing.producer_id: listing.transactional_id
        for listing in listings
        if listing.producer_id in producer_ids
    }
    held: dict[str, frozenset[TopicPartition] | None] = {}
    for transactional_id in sorted(set(transactional_ids.values())):
        try:
            (description,) = await describe_transactions(cluster, [transactional_id])
        except errors.KafkaError as e:
            if e.code != ErrorCode.transactional_id_not_found:
                raise
            held[transactional_id] = None
            continue
        held[transactional_id] = frozenset(description.partitions)
    return hanging_among(candidates, transactional_ids, held)


async def abort_transaction(
    cluster: Cluster,
    topic_partition: TopicPartition,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
) -> None:
    """Write an abort marker for the producer's open transaction into
    ``topic_partition`` (WriteTxnMarkers to its leader); raises the partition's error."""
    connection = await cluster.leader_connection(topic_partition)
    response = await connection.request(
        Request(
            ApiKey.WRITE_TXN_MARKERS,
            {
                "markers": [
                    {
                        "producer_id": producer_id,
                        "producer_epoch": producer_epoch,
                        "transaction_result": False,
                        "topics": [
                            {
                                "name": topic_partition.topic,
                                "partition_indexes": [topic_partition.partition],
                            }
                        ],
                        "coordinator_epoch": max(0, coordinator_epoch),
                    }
                ]
            },
        )
    )
    for marker in response.markers:
        for topic in marker.topics:
            for partition in topic.partitions:
                if partition.error_code != ErrorCode.none:
                    raise errors.for_code(partition.error_code)(
                        f"aborting producer {producer_id}'s transaction in {topic_partition}"
                    )
