"""Writing DataFrames to topics: the batch and streaming sinks.

Columns (as Spark's Kafka sink): ``value`` (binary or string, required), ``key``
(binary or string), ``headers`` (array<struct<key string, value binary>>), ``topic``
(string; the ``topic`` option, when set, overrides it, as in Spark's Kafka sink),
``partition`` (int; else the key's murmur2 hash, or a sticky partition for keyless
rows) and ``timestamp`` (timestamp; else now).

Each Spark task opens one :class:`sluice.Producer` (acks=all, idempotent, batching,
retrying), sends its rows in order, flushes, and returns how many it delivered. A
task that fails is retried by Spark and sends its rows again: **at-least-once**.

Exactly-once needs transactions, which the broker does not have yet. The seam is
:class:`TransactionSeam`: a task would open a transactional producer
(``transactional.id`` derived from query, batch and task ids) in ``begin``, send, and
``prepare`` would return the open transaction in the commit message; the driver's
``commit`` would commit every task's transaction and ``abort`` abort them. Today
``begin``/``prepare``/``commit``/``abort`` do nothing beyond the plain producer.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

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

from sluice.client.producer_api import Producer
from sluice.spark.options import SinkOptions, SluiceOptionError

PENDING_DELIVERIES_MAX = 20_000
"""Futures a task holds before waiting for them, bounding a task's memory."""


@dataclass
class WriteResult(WriterCommitMessage):
    """What one task reports to the driver."""

    rows_delivered: int


def check_sink_schema(schema: StructType, options: SinkOptions) -> None:
    """Reject, on the driver, a DataFrame the sink cannot write."""
    types: dict[str, DataType] = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise SluiceOptionError(
            f"the DataFrame to write needs a value column (it has {list(types)})"
        )
    for name in ("key", "value"):
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


class TransactionSeam:
    """Where exactly-once delivery will plug in (see the module docstring)."""

    def begin(self, producer: Producer) -> None:
        """Exactly-once: begin a transaction. At-least-once: nothing."""

    def prepare(self, producer: Producer, rows_delivered: int) -> WriteResult:
        """Exactly-once: flush and hand the open transaction to the driver."""
        return WriteResult(rows_delivered)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Exactly-once: commit every task's transaction. At-least-once: nothing."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Exactly-once: abort them. At-least-once: delivered rows stay delivered."""


async def _produce(options: SinkOptions, rows: Iterator[Any], seam: TransactionSeam) -> WriteResult:
    producer = Producer(
        options.bootstrap_servers,
        client_id="sluice-spark-writer",
        acks="all" if options.acks in {"all", "-1"} else int(options.acks),
        linger_ms=options.linger_ms,
        compression_type=options.compression_type,
    )
    delivered = 0
    async with producer:
        seam.begin(producer)
        pending: list[asyncio.Future[Any]] = []
        for row in rows:
            fields = row.asDict(recursive=False)
            topic = options.topic or fields.get("topic")
            if topic is None:
                raise ValueError("a row has a null topic and the topic option is not set")
            headers = fields.get("headers") or ()
            partition = fields.get("partition")
            pending.append(
                await producer.send(
                    topic,
                    _bytes(fields.get("value")),
                    key=_bytes(fields.get("key")),
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
        return seam.prepare(producer, delivered)


async def _settle(pending: list[asyncio.Future[Any]]) -> int:
    for future in pending:
        await future  # raises the first delivery failure: Spark retries the task
    return len(pending)


def write_rows(options: SinkOptions, rows: Iterator[Any], seam: TransactionSeam) -> WriteResult:
    """Produce ``rows`` (one Spark task's share) on a fresh event loop."""
    return asyncio.run(_produce(options, rows, seam))


class SluiceBatchWriter(DataSourceWriter):
    """``df.write.format("sluice")``: at-least-once into topics."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, options)
        self.options = options
        self.seam = TransactionSeam()

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        return write_rows(self.options, iterator, self.seam)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.seam.commit(messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.seam.abort(messages)


class SluiceStreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("sluice")``: each micro-batch at-least-once into topics."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, options)
        self.options = options
        self.seam = TransactionSeam()

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        return write_rows(self.options, iterator, self.seam)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.seam.commit(messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.seam.abort(messages)
