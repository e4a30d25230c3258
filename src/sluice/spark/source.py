"""The ``sluice`` Spark data source: batch and streaming readers.

::

    spark.read.format("sluice")                  driver: SluiceBatchReader.partitions()
        .option("bootstrap.servers", ...)            plan OffsetRanges (planning.py)
        .option("subscribe", "orders").load()    executors: read(range) ─► Arrow batches
                                                     (reading.py, one Cluster per task)

    spark.readStream.format("sluice")            driver: initialOffset / latestOffset
        ...load()                                    (JSON offsets, kept in Spark's
                                                     checkpoint) / partitions(start, end)
                                                 executors: read(range), as above

Streaming offsets live only in Spark's checkpoint, never in a consumer group, so a
query writing to a file sink is exactly once. ``latestOffset`` honours the engine's
``ReadLimit`` (``maxOffsetsPerTrigger`` becomes ``ReadMaxRows``), and the reader
implements ``SupportsTriggerAvailableNow``: ``Trigger.AvailableNow`` reads up to the
ends recorded when the query starts, in rate-limited micro-batches, then stops.
Partitions added to a subscribed topic (or topics matching a pattern) are read from
their earliest offset from the next micro-batch on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sluice.client.cluster import Cluster
from sluice.common.ids import TopicPartition
from sluice.spark.options import (
    LATEST,
    SourceOptions,
    parse_sink_options,
    parse_source_options,
    parse_source_registry_options,
)
from sluice.spark.planning import (
    OffsetRange,
    PartitionBounds,
    StreamOffset,
    check_named_partitions,
    data_loss,
    from_stream_offset,
    offsets_for_timestamp,
    partition_bounds,
    rate_limited_end,
    resolve_offset,
    split_for_min_partitions,
    subscribed_partitions,
    to_stream_offset,
)
from sluice.spark.reading import CLIENT_ID, read_range
from sluice.spark.registry_values import RegistryPlan, decoded_schema, plan_read

FORMAT_NAME = "sluice"

T = TypeVar("T")

HEADERS_TYPE = ArrayType(
    StructType(
        [
            StructField("key", StringType(), nullable=True),
            StructField("value", BinaryType(), nullable=True),
        ]
    ),
    containsNull=True,
)


def source_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (``headers`` last, only with includeHeaders)."""
    fields = [
        StructField("key", BinaryType(), nullable=True),
        StructField("value", BinaryType(), nullable=True),
        StructField("topic", StringType(), nullable=True),
        StructField("partition", IntegerType(), nullable=True),
        StructField("offset", LongType(), nullable=True),
        StructField("timestamp", TimestampType(), nullable=True),
        StructField("timestampType", IntegerType(), nullable=True),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE, nullable=True))
    return StructType(fields)


def _run(options: SourceOptions, work: Any) -> Any:
    """Run ``work(cluster)`` on a fresh event loop with a fresh cluster (driver side)."""

    async def main() -> Any:
        async with Cluster(options.bootstrap_servers, client_id=CLIENT_ID) as cluster:
            coroutine: Coroutine[Any, Any, Any] = work(cluster)
            return await coroutine

    return asyncio.run(main())


class RangePartition(InputPartition):
    """One Spark task's work: an :class:`OffsetRange` (plain, picklable data)."""

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)
        self.offset_range = offset_range


class SluiceDataSource(DataSource):
    """``format("sluice")``: read topics into DataFrames and write DataFrames to topics."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        include = str(self._option("includeHeaders") or "false").strip().lower() == "true"
        base = source_schema(include)
        plan = self._registry_plan()
        return base if plan is None else decoded_schema(base, plan)

    def _registry_plan(self) -> RegistryPlan | None:
        """The registry schemas the columns were planned with: asked once, when Spark
        asks for the schema, and kept (this object is pickled after that), so every
        task reads into the same schema even if the subject gains a version meanwhile."""
        planned: RegistryPlan | None = getattr(self, "_planned_registry", None)
        if planned is None:
            registry_options = parse_source_registry_options(dict(self.options))
            if registry_options is None:
                return None
            planned = plan_read(registry_options)
            self._planned_registry = planned
        return planned

    def _option(self, name: str) -> str | None:
        for key, value in self.options.items():
            if str(key).lower() == name.lower():
                return str(value)
        return None

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_source_options(dict(self.options), streaming=False)
        return SluiceBatchReader(options, schema, self._registry_plan())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = parse_source_options(dict(self.options), streaming=True)
        return SluiceStreamReader(options, schema, self._registry_plan())

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from sluice.spark.sink import SluiceBatchWriter  # noqa: PLC0415

        return SluiceBatchWriter(parse_sink_options(dict(self.options)), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from sluice.spark.sink import SluiceStreamWriter  # noqa: PLC0415

        return SluiceStreamWriter(parse_sink_options(dict(self.options), streaming=True), schema)


class _RangeReading:
    """What batch and streaming readers share: reading a RangePartition on an executor."""

    options: SourceOptions
    spark_schema: StructType
    registry_plan: RegistryPlan | None

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition), f"unexpected partition {partition!r}"
        arrow_schema = to_arrow_schema(self.spark_schema, timezone="UTC")
        yield from read_range(
            self.options, partition.offset_range, arrow_schema, self.registry_plan
        )


class SluiceBatchReader(_RangeReading, DataSourceReader):
    """Batch read: ``[startingOffsets, endingOffsets)`` of every subscribed partition."""

    def __init__(
        self, options: SourceOptions, schema: StructType, registry_plan: RegistryPlan | None = None
    ) -> None:
        self.options = options
        self.spark_schema = schema
        self.registry_plan = registry_plan

    def partitions(self) -> Sequence[InputPartition]:
        ranges = _run(self.options, self._plan)
        return [RangePartition(r) for r in ranges]

    async def _plan(self, cluster: Cluster) -> list[OffsetRange]:
        options = self.options
        partitions = await subscribed_partitions(cluster, options.subscription)
        check_named_partitions(options.starting, partitions, "startingOffsets")
        check_named_partitions(options.ending, partitions, "endingOffsets")
        bounds = await partition_bounds(cluster, partitions)
        by_time: dict[TopicPartition, int] = {}
        if options.starting_timestamp_ms is not None:
            by_time = await offsets_for_timestamp(
                cluster, partitions, options.starting_timestamp_ms
            )
        ranges: list[OffsetRange] = []
        for tp in partitions:
            bound = bounds[tp]
            start_choice = by_time.get(tp, options.starting.for_partition(tp))
            start = resolve_offset(start_choice, bound, tp, option="startingOffsets")
            end = resolve_offset(
                options.ending.for_partition(tp), bound, tp, option="endingOffsets"
            )
            if start < bound.log_start_offset:
                data_loss(
                    f"startingOffsets {start} of {tp.topic}-{tp.partition} is before its log "
                    f"start offset {bound.log_start_offset}",
                    fail_on_data_loss=options.fail_on_data_loss,
                )
                start = bound.log_start_offset
            if end < start:
                raise ValueError(
                    f"{tp.topic}-{tp.partition}: endingOffsets {end} is before "
                    f"startingOffsets {start}"
                )
            ranges.append(OffsetRange(tp.topic, tp.partition, start, end))
        return split_for_min_partitions(ranges, options.min_partitions)


class SluiceStreamReader(_RangeReading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming read with offsets ``{"topic": {"partition": next offset}}``."""

    def __init__(
        self, options: SourceOptions, schema: StructType, registry_plan: RegistryPlan | None = None
    ) -> None:
        self.options = options
        self.spark_schema = schema
        self.registry_plan = registry_plan
        self._available_now_end: dict[TopicPartition, int] | None = None

    # ── offsets (driver) ─────────────────────────────────────────────────────────────

    def initialOffset(self) -> StreamOffset:
        return to_stream_offset(_run(self.options, self._initial))

    async def _initial(self, cluster: Cluster) -> dict[TopicPartition, int]:
        options = self.options
        partitions = await subscribed_partitions(cluster, options.subscription)
        check_named_partitions(options.starting, partitions, "startingOffsets")
        bounds = await partition_bounds(cluster, partitions)
        by_time: dict[TopicPartition, int] = {}
        if options.starting_timestamp_ms is not None:
            by_time = await offsets_for_timestamp(
                cluster, partitions, options.starting_timestamp_ms
            )
        return {
            tp: resolve_offset(
                by_time.get(tp, options.starting.for_partition(tp)),
                bounds[tp],
                tp,
                option="startingOffsets",
            )
            for tp in partitions
        }

    async def _latest(self, cluster: Cluster) -> dict[TopicPartition, PartitionBounds]:
        partitions = await subscribed_partitions(cluster, self.options.subscription)
        return await partition_bounds(cluster, partitions)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        bounds: dict[TopicPartition, PartitionBounds] = _run(self.options, self._latest)
        self._available_now_end = {tp: b.high_watermark for tp, b in bounds.items()}

    def latestOffset(self, start: StreamOffset, limit: ReadLimit) -> StreamOffset:
        start_offsets = from_stream_offset(start)
        bounds: dict[TopicPartition, PartitionBounds] = _run(self.options, self._latest)
        latest = {tp: b.high_watermark for tp, b in bounds.items()}
        if self._available_now_end is not None:
            # Trigger.AvailableNow: nothing past the ends seen when the query started.
            latest = {
                tp: min(end, self._available_now_end[tp])
                for tp, end in latest.items()
                if tp in self._available_now_end
            }
        # Partitions new since `start` begin at their log start offset.
        effective_start = {tp: start_offsets.get(tp, bounds[tp].log_start_offset) for tp in latest}
        for tp, offset in start_offsets.items():
            if tp not in latest:
                latest[tp] = offset  # a deleted topic: keep its position
                effective_start[tp] = offset
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        # A partition whose start is past its end (log truncated) does not move back.
        latest = {tp: max(end, effective_start[tp]) for tp, end in latest.items()}
        end = rate_limited_end(effective_start, latest, max_rows)
        return to_stream_offset(end)

    def reportLatestOffset(self) -> StreamOffset | None:
        bounds: dict[TopicPartition, PartitionBounds] = _run(self.options, self._latest)
        return to_stream_offset({tp: b.high_watermark for tp, b in bounds.items()})

    def partitions(self, start: StreamOffset, end: StreamOffset) -> Sequence[InputPartition]:
        start_offsets = from_stream_offset(start)
        end_offsets = from_stream_offset(end)
        new_partitions = [tp for tp in end_offsets if tp not in start_offsets]
        if new_partitions:
            bounds: dict[TopicPartition, PartitionBounds] = _run(
                self.options, lambda cluster: partition_bounds(cluster, new_partitions)
            )
            for tp in new_partitions:
                start_offsets[tp] = bounds[tp].log_start_offset if tp in bounds else end_offsets[tp]
        ranges = []
        for tp in sorted(end_offsets):
            begin = start_offsets[tp]
            if begin == LATEST:
                begin = end_offsets[tp]
            ranges.append(OffsetRange(tp.topic, tp.partition, begin, end_offsets[tp]))
        split = split_for_min_partitions(ranges, self.options.min_partitions)
        return [RangePartition(r) for r in split]

    def commit(self, end: StreamOffset) -> None:
        """Offsets are kept by Spark's checkpoint only; nothing to tell the broker."""

    def stop(self) -> None:
        """Each call opens and closes its own connections: nothing is left open."""
