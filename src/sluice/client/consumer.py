"""Fetching records from partition offsets.

:func:`fetch_partitions` sends one Fetch per leader for the partitions it leads (all
leaders at once) and decodes the record batches of each answer into
:class:`ConsumedRecord` s. It returns, per partition, the records at or after the
requested offset and the offset to fetch next, which moves past control batches
(transaction markers) and over gaps left by compaction even when they hold no record
for the caller.

This is the foundation the group consumer (assignment, position tracking, commits) is
built on; it keeps no state between calls.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Final

from sluice.client.cluster import Cluster, run_all
from sluice.client.messages import Request
from sluice.common import errors
from sluice.common.errors import ErrorCode
from sluice.common.ids import NodeId, TopicPartition
from sluice.common.limits import FETCH_WAIT_MS_MAX
from sluice.protocol.records.batch import BatchHeader
from sluice.protocol.records.builder import decode_batches_made
from sluice.protocol.records.record import Header, RecordFactory
from sluice.protocol.versions import ApiKey

FETCH_BYTES_MAX_DEFAULT = 50 * 1024 * 1024
"""Bytes one Fetch answer may hold across partitions (Kafka's fetch.max.bytes)."""

PARTITION_FETCH_BYTES_MAX_DEFAULT = 1024 * 1024
"""Bytes one partition contributes to a Fetch answer (max.partition.fetch.bytes). The
first batch is returned whole even when larger, so progress never stops."""

FETCH_WAIT_MS_DEFAULT = 500
"""How long the broker holds a Fetch open waiting for min_bytes (Kafka's
fetch.max.wait.ms)."""


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """A record read from a partition."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    timestamp_type: int = 0
    """0: the producer's CreateTime; 1: the broker's LogAppendTime
    (message.timestamp.type of the topic when the batch was written)."""


def _consumed_record_factory(
    topic: str, partition: int, timestamp_type: int
) -> RecordFactory[ConsumedRecord]:
    """Makes the records of one batch: as ``ConsumedRecord(topic, partition, …)`` but
    about twice as fast (the slots set directly, not through a frozen ``__init__``'s
    ``object.__setattr__``), which is most of a large fetch's decoding."""
    new = object.__new__
    set_topic, set_partition, set_offset, set_timestamp, set_key, set_value = _SLOT_SETTERS[:6]
    set_headers, set_timestamp_type = _SLOT_SETTERS[6:]

    def make(
        offset: int,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[Header, ...],
    ) -> ConsumedRecord:
        record = new(ConsumedRecord)
        set_topic(record, topic)
        set_partition(record, partition)
        set_offset(record, offset)
        set_timestamp(record, timestamp_ms)
        set_key(record, key)
        set_value(record, value)
        set_headers(record, headers)
        set_timestamp_type(record, timestamp_type)
        return record

    return make


_SLOT_SETTERS: Final = tuple(
    getattr(ConsumedRecord, f.name).__set__ for f in fields(ConsumedRecord)
)
"""The slot descriptors' setters of :class:`ConsumedRecord`, in field order."""


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """What one partition returned to one fetch."""

    topic_partition: TopicPartition
    records: tuple[ConsumedRecord, ...]
    next_offset: int
    """Where the next fetch of this partition starts."""
    high_watermark: int
    """Offset after the last record consumers may read."""
    log_start_offset: int
    last_stable_offset: int = -1


async def fetch_partitions(
    cluster: Cluster,
    positions: Mapping[TopicPartition, int],
    *,
    max_wait_ms: int = FETCH_WAIT_MS_DEFAULT,
    min_bytes: int = 1,
    max_bytes: int = FETCH_BYTES_MAX_DEFAULT,
    partition_max_bytes: int = PARTITION_FETCH_BYTES_MAX_DEFAULT,
) -> dict[TopicPartition, FetchedPartition]:
    """Fetch each partition from its offset in ``positions``, asking each leader once.

    The broker answers as soon as ``min_bytes`` are available in total, or after
    ``max_wait_ms`` (a long poll). Raises the error of the first partition the broker
    refused, e.g. ``OffsetOutOfRange`` for an offset outside the log.
    """
    if not 0 <= max_wait_ms <= FETCH_WAIT_MS_MAX:
        raise ValueError(f"max_wait_ms {max_wait_ms} is outside [0, {FETCH_WAIT_MS_MAX}]")
    metadata = cluster.cached_metadata
    if metadata is None or any(tp.topic not in metadata.topics for tp in positions):
        metadata = await cluster.metadata({tp.topic for tp in positions})
    by_leader: dict[NodeId, list[TopicPartition]] = defaultdict(list)
    for topic_partition in positions:
        by_leader[metadata.leader(topic_partition)].append(topic_partition)
    results: dict[TopicPartition, FetchedPartition] = {}
    await run_all(
        _fetch_from(
            cluster,
            leader,
            {tp: positions[tp] for tp in partitions},
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            partition_max_bytes=partition_max_bytes,
            results=results,
        )
        for leader, partitions in by_leader.items()
    )
    return results


async def _fetch_from(
    cluster: Cluster,
    leader: NodeId,
    positions: Mapping[TopicPartition, int],
    *,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    partition_max_bytes: int,
    results: dict[TopicPartition, FetchedPartition],
) -> None:
    connection = await cluster.connection(leader)
    by_topic: dict[str, list[TopicPartition]] = defaultdict(list)
    for topic_partition in positions:
        by_topic[topic_partition.topic].append(topic_partition)
    response = await connection.request(
        Request(
            ApiKey.FETCH,
            {
                "replica_id": -1,
                "max_wait": datetime.timedelta(milliseconds=max_wait_ms),
                "min_bytes": min_bytes,
                "max_bytes": max_bytes,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {
                                "partition": tp.partition,
                                "fetch_offset": positions[tp],
                                "partition_max_bytes": partition_max_bytes,
                            }
                            for tp in partitions
                        ],
                    }
                    for topic, partitions in by_topic.items()
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
        ),
        timeout_s=connection.request_timeout_s + max_wait_ms / 1000,
    )
    if response.error_code != ErrorCode.none:
        raise errors.for_code(response.error_code)(f"fetch from broker at {connection.address}")
    for topic in response.responses:
        for partition in topic.partitions:
            topic_partition = TopicPartition(topic.topic, int(partition.partition_index))
            fetch_offset = positions.get(topic_partition)
            if fetch_offset is None:
                continue  # not asked for; a broker bug, harmless to skip
            if partition.error_code != ErrorCode.none:
                raise errors.for_code(partition.error_code)(
                    f"fetching {topic_partition} from offset {fetch_offset}"
                )
            results[topic_partition] = _decode_partition(
                topic_partition,
                fetch_offset,
                partition.records or b"",
                high_watermark=int(partition.high_watermark),
                log_start_offset=int(getattr(partition, "log_start_offset", -1)),
                last_stable_offset=int(getattr(partition, "last_stable_offset", -1)),
            )


def _decode_partition(
    topic_partition: TopicPartition,
    fetch_offset: int,
    data: bytes,
    *,
    high_watermark: int,
    log_start_offset: int,
    last_stable_offset: int,
) -> FetchedPartition:
    records: list[ConsumedRecord] = []
    next_offset = fetch_offset
    topic, partition = topic_partition

    def make_for(header: BatchHeader) -> RecordFactory[ConsumedRecord]:
        return _consumed_record_factory(topic, partition, int(header.timestamp_type))

    for header, batch_records in decode_batches_made(data, make_for):
        next_offset = max(next_offset, header.next_offset)
        if header.is_control:
            continue
        if batch_records and batch_records[0].offset < fetch_offset:
            # The first batch may start before the offset asked for.
            records.extend(r for r in batch_records if r.offset >= fetch_offset)
        else:
            records.extend(batch_records)
    return FetchedPartition(
        topic_partition,
        tuple(records),
        next_offset=next_offset,
        high_watermark=high_watermark,
        log_start_offset=log_start_offset,
        last_stable_offset=last_stable_offset,
    )
