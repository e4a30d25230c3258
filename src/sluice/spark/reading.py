"""Reading one offset range inside a Spark task, as Arrow record batches.

A task gets an :class:`~sluice.spark.planning.OffsetRange` (plain data) and opens its
own :class:`~sluice.client.cluster.Cluster` on a fresh event loop: sockets are never
pickled and never shared between tasks. Each Fetch answer becomes one
``pyarrow.RecordBatch`` in the schema Spark asked for, built column by column (no
per-row Python objects cross into the JVM)::

    fetch [position, ...) ─► records with offset < end ─► RecordBatch ─► yield
          └─ next_offset (past control batches and compaction gaps) ─► position

A range whose records were deleted by retention raises (``failOnDataLoss=true``, the
default) or skips to the log start offset.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from sluice.client.admin import Admin, OffsetSpec
from sluice.client.cluster import Cluster
from sluice.client.consumer import ConsumedRecord, fetch_partitions
from sluice.common import errors
from sluice.common.ids import TopicPartition
from sluice.spark.options import SourceOptions
from sluice.spark.planning import OffsetRange, data_loss
from sluice.spark.registry_values import DECODE_ERROR_COLUMN, RecordDecoder, RegistryPlan

CLIENT_ID = "sluice-spark"

_ALL_COLUMNS = (
    "key",
    "value",
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestampType",
    "headers",
    DECODE_ERROR_COLUMN,
)


def records_to_batch(
    records: Sequence[ConsumedRecord],
    schema: pa.Schema,
    decoded: Mapping[str, pa.Array] | None = None,
) -> pa.RecordBatch:
    """The records as one batch with exactly ``schema``'s columns, types and order;
    ``decoded`` holds the columns decoded with registry schemas, by name."""
    columns: dict[str, Any] = {}
    for name in schema.names:
        field_type = schema.field(name).type
        if decoded is not None and name in decoded:
            columns[name] = decoded[name]
            continue
        if name == "key":
            values: list[Any] = [r.key for r in records]
        elif name == "value":
            values = [r.value for r in records]
        elif name == "topic":
            values = [r.topic for r in records]
        elif name == "partition":
            values = [r.partition for r in records]
        elif name == "offset":
            values = [r.offset for r in records]
        elif name == "timestamp":
            values = [r.timestamp_ms * 1000 for r in records]
            columns[name] = pa.array(values, type=pa.int64()).cast(field_type)
            continue
        elif name == "timestampType":
            values = [r.timestamp_type for r in records]
        elif name == "headers":
            values = [[{"key": k, "value": v} for k, v in r.headers] for r in records]
        else:
            raise AssertionError(f"column {name!r} is not one of {_ALL_COLUMNS}")
        columns[name] = pa.array(values, type=field_type)
    return pa.RecordBatch.from_arrays([columns[n] for n in schema.names], schema=schema)


def read_range(
    options: SourceOptions,
    offset_range: OffsetRange,
    schema: pa.Schema,
    registry_plan: RegistryPlan | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``offset_range`` as Arrow batches (one per Fetch answer),
    keys and values decoded with registry schemas when ``registry_plan`` is given."""
    if offset_range.size <= 0:
        return
    loop = asyncio.new_event_loop()
    cluster = Cluster(options.bootstrap_servers, client_id=CLIENT_ID)
    decoder = RecordDecoder(registry_plan) if registry_plan is not None else None
    try:
        topic_partition = offset_range.topic_partition
        position = offset_range.start
        while position < offset_range.end:
            records, next_position = loop.run_until_complete(
                _fetch_once(cluster, options, topic_partition, position)
            )
            if next_position is None:
                # The broker answered OffsetOutOfRange: the range starts before the log.
                log_start = loop.run_until_complete(_log_start(cluster, topic_partition))
                data_loss(
                    f"{topic_partition.topic}-{topic_partition.partition}: offsets "
                    f"{position}-{log_start - 1} are no longer in the log "
                    f"(its start offset is {log_start})",
                    fail_on_data_loss=options.fail_on_data_loss,
                )
                if log_start <= position:
                    break  # the log was truncated below the range: nothing more to read
                position = log_start
                continue
            wanted = [r for r in records if r.offset < offset_range.end]
            if wanted:
                decoded = None
                if decoder is not None:
                    decoded = loop.run_until_complete(decoder.columns(wanted, schema))
                yield records_to_batch(wanted, schema, decoded)
            if next_position <= position:
                data_loss(
                    f"{topic_partition.topic}-{topic_partition.partition}: offsets "
                    f"{position}-{offset_range.end - 1} were planned but the log ends "
                    "before them",
                    fail_on_data_loss=options.fail_on_data_loss,
                )
                break
            position = next_position
    finally:
        if decoder is not None:
            loop.run_until_complete(decoder.close())
        loop.run_until_complete(cluster.close())
        loop.close()


async def _fetch_once(
    cluster: Cluster, options: SourceOptions, topic_partition: TopicPartition, position: int
) -> tuple[tuple[ConsumedRecord, ...], int | None]:
    try:
        fetched = await fetch_partitions(
            cluster,
            {topic_partition: position},
            max_wait_ms=options.fetch_wait_ms,
            partition_max_bytes=options.partition_bytes_max,
        )
    except errors.OffsetOutOfRange:
        return (), None
    result = fetched.get(topic_partition)
    if result is None:
        return (), position
    return result.records, result.next_offset


async def _log_start(cluster: Cluster, topic_partition: TopicPartition) -> int:
    listed = await Admin(cluster).list_offsets([topic_partition], OffsetSpec.EARLIEST)
    return listed[topic_partition].offset
