"""Sending record batches to partition leaders.

:func:`produce_batches` turns each partition's records into one v2 record batch
(``sluice.protocol.records.builder``), groups partitions by leader and sends one Produce
request per leader, all leaders at once. With ``acks=0`` the broker sends no answer, so
nothing is known about where the records landed.

This is the foundation the batching producer (linger, size-bounded accumulators,
retries, idempotence) is built on; it does no batching across calls and no retries.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any

from sluice.client.cluster import Cluster, run_all
from sluice.client.messages import Request
from sluice.common import errors
from sluice.common.clock import SYSTEM_CLOCK, Clock
from sluice.common.errors import ErrorCode
from sluice.common.ids import NodeId, TopicPartition
from sluice.protocol.records.batch import Compression
from sluice.protocol.records.builder import RecordInput, build_batch
from sluice.protocol.versions import ApiKey

PRODUCE_TIMEOUT_MS_DEFAULT = 30_000
"""How long the leader may wait for acks=all replication before answering."""

UNKNOWN_OFFSET = -1
"""Base offset reported for acks=0, where the broker does not answer."""


class Acks(IntEnum):
    """How many replicas must have a batch before the leader answers."""

    NONE = 0
    """No answer at all: fastest, and records may be lost without anyone knowing."""
    LEADER = 1
    """The leader appended it."""
    ALL = -1
    """Every in-sync replica has it (and at least min.insync.replicas)."""


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """Where a batch landed."""

    topic_partition: TopicPartition
    base_offset: int
    """Offset of the batch's first record (:data:`UNKNOWN_OFFSET` for acks=0)."""
    log_append_time_ms: int = -1
    """The broker's timestamp for LogAppendTime topics, else -1."""
    log_start_offset: int = -1


def _time_ms(value: Any) -> int:
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)


def _build(records: Sequence[RecordInput], compression: Compression, now_ms: int) -> bytes:
    """One batch; records without a timestamp are stamped ``now_ms``."""
    if all(record.timestamp_ms is None for record in records):
        return build_batch(records, compression=compression, base_timestamp_ms=now_ms)
    stamped = [
        record if record.timestamp_ms is not None else replace(record, timestamp_ms=now_ms)
        for record in records
    ]
    return build_batch(stamped, compression=compression)


async def produce_batch(
    cluster: Cluster,
    topic_partition: TopicPartition,
    records: Sequence[RecordInput],
    *,
    acks: Acks | int = Acks.ALL,
    compression: Compression = Compression.NONE,
    timeout_ms: int = PRODUCE_TIMEOUT_MS_DEFAULT,
    clock: Clock = SYSTEM_CLOCK,
) -> ProduceResult:
    """Send ``records`` as one batch to ``topic_partition``'s leader."""
    results = await produce_batches(
        cluster,
        {topic_partition: records},
        acks=acks,
        compression=compression,
        timeout_ms=timeout_ms,
        clock=clock,
    )
    return results[topic_partition]


async def produce_batches(
    cluster: Cluster,
    batches: Mapping[TopicPartition, Sequence[RecordInput]],
    *,
    acks: Acks | int = Acks.ALL,
    compression: Compression = Compression.NONE,
    timeout_ms: int = PRODUCE_TIMEOUT_MS_DEFAULT,
    clock: Clock = SYSTEM_CLOCK,
) -> dict[TopicPartition, ProduceResult]:
    """Send one batch per partition, one request per leader, leaders concurrently.

    Records without a timestamp get the clock's time now (CreateTime, as Kafka's
    producer stamps records when they are sent).

    Raises the error of the first partition the broker refused (a
    :class:`~sluice.common.errors.KafkaError`); the other partitions of the same call
    may have been written.
    """
    acks = Acks(acks)
    wanted = [tp for tp, records in batches.items() if records]
    metadata = cluster.cached_metadata
    if metadata is None or any(tp.topic not in metadata.topics for tp in wanted):
        metadata = await cluster.metadata({tp.topic for tp in wanted})
    by_leader: dict[NodeId, list[TopicPartition]] = defaultdict(list)
    for topic_partition in wanted:
        by_leader[metadata.leader(topic_partition)].append(topic_partition)
    now_ms = clock.wall_ms()
    encoded = {tp: _build(batches[tp], compression, now_ms) for tp in wanted}
    results: dict[TopicPartition, ProduceResult] = {}
    await run_all(
        _produce_to(
            cluster=cluster,
            leader=leader,
            batches={tp: encoded[tp] for tp in partitions},
            acks=acks,
            timeout_ms=timeout_ms,
            results=results,
        )
        for leader, partitions in by_leader.items()
    )
    return results


async def _produce_to(
    *,
    cluster: Cluster,
    leader: NodeId,
    batches: Mapping[TopicPartition, bytes],
    acks: Acks,
    timeout_ms: int,
    results: dict[TopicPartition, ProduceResult],
) -> None:
    connection = await cluster.connection(leader)
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for topic_partition, batch in batches.items():
        by_topic[topic_partition.topic].append(
            {"index": topic_partition.partition, "records": batch}
        )
    request = Request(
        ApiKey.PRODUCE,
        {
            "transactional_id": None,
            "acks": int(acks),
            "timeout": datetime.timedelta(milliseconds=timeout_ms),
            "topic_data": [
                {"name": topic, "partition_data": partitions}
                for topic, partitions in by_topic.items()
            ],
        },
    )
    if acks == Acks.NONE:
        await connection.request(request, expect_response=False)
        for topic_partition in batches:
            results[topic_partition] = ProduceResult(topic_partition, UNKNOWN_OFFSET)
        return
    response = await connection.request(
        request, timeout_s=max(connection.request_timeout_s, timeout_ms / 1000 + 5.0)
    )
    for topic in response.responses:
        for partition in topic.partition_responses:
            topic_partition = TopicPartition(topic.name, int(partition.index))
            if partition.error_code != ErrorCode.none:
                detail = getattr(partition, "error_message", None)
                record_errors = [
                    f"record {e.batch_index}: {e.batch_index_error_message}"
                    for e in getattr(partition, "record_errors", ())
                ]
                message = f"producing to {topic_partition}"
                if detail:
                    message += f": {detail}"
                if record_errors:
                    message += " (" + "; ".join(record_errors) + ")"
                raise errors.for_code(partition.error_code)(message)
            results[topic_partition] = ProduceResult(
                topic_partition,
                base_offset=int(partition.base_offset),
                log_append_time_ms=_time_ms(getattr(partition, "log_append_time", None)),
                log_start_offset=int(getattr(partition, "log_start_offset", -1)),
            )
