"""Writing DataFrames to topics: the batch and streaming sinks.

Columns (as Spark's Kafka sink): ``value`` (binary or string, required), ``key``
(binary or string), ``headers`` (array<struct<key string, value binary>>), ``topic``
(string; the ``topic`` option, when set, overrides it, as in Spark's Kafka sink),
``partition`` (int; else the key's murmur2 hash, or a sticky partition for keyless
rows) and ``timestamp`` (timestamp; else now).

Each Spark task opens one :class:`sluice.Producer` (acks=all, idempotent, batching,
retrying), sends its rows in order, flushes, and returns how many it delivered. A
task that fails is retried by Spark and sends its rows again: **at-least-once**.

``deliveryGuarantee=exactly-once`` (streaming) commits each micro-batch in
transactions that the driver decides::

    task p (any attempt)                         driver, commit(messages, batch N)
    ──────────────────────                       ────────────────────────────────────
    Producer(transactional_id=<prefix>-p)        for each task's prepared transaction:
      (fences an earlier attempt of p and          progress = committed offset of group
       aborts what it left open)                    <prefix>-p (what batch p last committed)
    begin; send the rows; flush                    progress > N: this batch was committed
    prepare_transaction() ─ left open ──────────▶    before a crash: abort (no duplicate)
    → WriteResult(rows, prepared, progress topic)  else: commit it, with group <prefix>-p's
                                                     offset N + 1 in the same transaction
    abort(messages, N): abort them all

The prefix comes from the query's checkpoint location, so a restarted query fences and
replaces its own earlier tasks. The progress offset lives in ``__consumer_offsets``
(group ``<prefix>-<task>``, on partition 0 of the task's first topic) and is written in
the task's transaction, so data and progress commit together: a driver that dies while
committing leaves some tasks committed, and when Spark runs the batch again the driver
aborts exactly those tasks' new transactions. This relies on what Spark's exactly-once
sinks rely on: a batch run again reads the same offsets and splits them into the same
tasks. Readers see each row once with ``isolation.level=read_committed``. The progress
offset carries :data:`~sluice.common.bookkeeping_groups.BOOKKEEPING_METADATA` as its
metadata, so tools know the group records progress and has no lag to show.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructType,
    TimestampType,
)

from sluice.client.cluster import Cluster
from sluice.client.groups import GroupCoordinators
from sluice.client.membership import fetch_committed
from sluice.client.producer_api import Producer
from sluice.client.transactions import GroupMetadata, PreparedTransaction, end_prepared
from sluice.common.bookkeeping_groups import BOOKKEEPING_METADATA
from sluice.common.ids import TopicPartition
from sluice.spark.options import SinkOptions, SluiceOptionError
from sluice.spark.registry_values import RegistryPlan, RowEncoder, plan_write

PENDING_DELIVERIES_MAX = 20_000
"""Futures a task holds before waiting for them, bounding a task's memory."""


@dataclass
class WriteResult(WriterCommitMessage):
    """What one task reports to the driver."""

    rows_delivered: int
    task: int = -1
    prepared: PreparedTransaction | None = None
    """Exactly-once: the task's open transaction, for the driver to end."""
    progress_topic: str | None = None
    """Exactly-once: the topic whose partition 0 keys the task's progress offset."""


def check_sink_schema(schema: StructType, options: SinkOptions) -> None:
    """Reject, on the driver, a DataFrame the sink cannot write."""
    types: dict[str, DataType] = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise SluiceOptionError(
            f"the DataFrame to write needs a value column (it has {list(types)})"
        )
    encoded = set()
    if options.registry is not None:
        encoded = {
            part
            for part, subject in (
                ("key", options.registry.key_subject),
                ("value", options.registry.value_subject),
            )
            if subject is not None
        }
    for name in ("key", "value"):
        if name in encoded:
            continue  # any type: encoded with the subject's schema
        if name in types and not isinstance(types[name], BinaryType | StringType):
            raise SluiceOptionError(f"column {name} must be binary or string, not {types[name]}")
    if "topic" not in types and options.topic is None:
        raise SluiceOptionError("set the topic option or give the DataFrame a topic column")
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise SluiceOptionError(f"column topic must be a string, not {types['topic']}")
    if "partition" in types and not isinstance(types["partition"], IntegerType | LongType):
        raise SluiceOptionError(f"column partition must be an int, not {types['partition']}")
    if "timestamp" in types and not isinstance(types["timestamp"], TimestampType):
        raise SluiceOptionError(f"column timestamp must be a timestamp, not {types['timestamp']}")
    if "headers" in types:
        headers = types["headers"]
        element = headers.elementType if isinstance(headers, ArrayType) else None
        if not (
            isinstance(element, StructType) and {f.name for f in element.fields} >= {"key", "value"}
        ):
            raise SluiceOptionError(
                f"column headers must be array<struct<key string, value binary>>, not {headers}"
            )


def _bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def _timestamp_ms(value: datetime.datetime | None) -> int | None:
    if value is None:
        return None
    if value.tzinfo is None:
        # Spark hands timestamps to Python as naive local times.
        value = value.astimezone()
    return int(value.timestamp() * 1000)


async def _produce(
    options: SinkOptions, rows: Iterator[Any], task: int, encoder: RowEncoder | None
) -> WriteResult:
    exactly_once = options.exactly_once
    producer = Producer(
        options.bootstrap_servers,
        client_id="sluice-spark-writer",
        acks="all" if options.acks in {"all", "-1"} else int(options.acks),
        linger_ms=options.linger_ms,
        compression_type=options.compression_type,
        transactional_id=f"{options.transactional_id_prefix}-{task}" if exactly_once else None,
        transaction_timeout_ms=options.transaction_timeout_ms,
    )
    delivered = 0
    first_topic: str | None = None
    async with producer:
        if exactly_once:
            await producer.begin_transaction()
        pending: list[asyncio.Future[Any]] = []
        for row in rows:
            fields = row.asDict(recursive=False)
            topic = options.topic or fields.get("topic")
            if topic is None:
                raise ValueError("a row has a null topic and the topic option is not set")
            first_topic = first_topic or topic
            headers = fields.get("headers") or ()
            partition = fields.get("partition")
            value, key = fields.get("value"), fields.get("key")
            if encoder is not None:
                value = encoder.encode("value", value) if encoder.encodes("value") else value
                key = encoder.encode("key", key) if encoder.encodes("key") else key
            pending.append(
                await producer.send(
                    topic,
                    _bytes(value),
                    key=_bytes(key),
                    headers=[(h["key"], _bytes(h["value"])) for h in headers],
                    partition=None if partition is None else int(partition),
                    timestamp_ms=_timestamp_ms(fields.get("timestamp")),
                )
            )
            if len(pending) >= PENDING_DELIVERIES_MAX:
                delivered += await _settle(pending)
                pending = []
        await producer.flush()
        delivered += await _settle(pending)
        if not exactly_once or first_topic is None:
            return WriteResult(delivered, task)
        prepared = await producer.prepare_transaction()
        return WriteResult(delivered, task, prepared, first_topic)


async def _settle(pending: list[asyncio.Future[Any]]) -> int:
    for future in pending:
        await future  # raises the first delivery failure: Spark retries the task
    return len(pending)


def write_rows(
    options: SinkOptions,
    rows: Iterator[Any],
    registry: tuple[RegistryPlan, StructType] | None = None,
) -> WriteResult:
    """Produce ``rows`` (one Spark task's share) on a fresh event loop, keys and values
    encoded with registry schemas when ``registry`` (the plan and the rows' schema)."""
    context = TaskContext.get()
    task = context.partitionId() if context is not None else 0
    encoder = RowEncoder(*registry) if registry is not None else None
    return asyncio.run(_produce(options, rows, task, encoder))


def _plan_registry(
    options: SinkOptions, schema: StructType
) -> tuple[RegistryPlan, StructType] | None:
    if options.registry is None:
        return None
    return plan_write(options.registry, schema), schema


def progress_group(options: SinkOptions, task: int) -> str:
    """The group whose committed offset says which micro-batch task ``task`` of the
    query committed last (the batch id plus one)."""
    return f"{options.transactional_id_prefix}-{task}"


async def _end_batch(
    options: SinkOptions, messages: list[WriterCommitMessage | None], batch_id: int | None
) -> None:
    """Exactly-once: commit (``batch_id`` given) or abort every task's transaction."""
    prepared = [m for m in messages if isinstance(m, WriteResult) and m.prepared is not None]
    if not prepared:
        return
    async with Cluster(options.bootstrap_servers, client_id="sluice-spark-driver") as cluster:
        coordinators = GroupCoordinators(cluster)
        for message in prepared:
            assert message.prepared is not None and message.progress_topic is not None
            if batch_id is None:
                await end_prepared(cluster, message.prepared, commit=False)
                continue
            group = progress_group(options, message.task)
            key = TopicPartition(message.progress_topic, 0)
            committed = (await fetch_committed(coordinators, group, [key])).get(key)
            if committed is not None and committed.offset > batch_id:
                # Committed by an earlier run of this batch, before the driver stopped.
                await end_prepared(cluster, message.prepared, commit=False)
                continue
            await end_prepared(
                cluster,
                message.prepared,
                commit=True,
                offsets=(GroupMetadata(group), {key: batch_id + 1}),
                offsets_metadata=BOOKKEEPING_METADATA,
            )


class SluiceBatchWriter(DataSourceWriter):
    """``df.write.format("sluice")``: at-least-once into topics."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, options)
        self.options = options
        self.registry = _plan_registry(options, schema)

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        return write_rows(self.options, iterator, self.registry)


class SluiceStreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("sluice")``: each micro-batch at-least-once into topics,
    or exactly once (see the module docstring)."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, options)
        self.options = options
        self.registry = _plan_registry(options, schema)

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        return write_rows(self.options, iterator, self.registry)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.options.exactly_once:
            asyncio.run(_end_batch(self.options, messages, batchId))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.options.exactly_once:
            asyncio.run(_end_batch(self.options, messages, None))
