"""The archive and replay jobs: topics to Parquet and back, on Spark.

Archive is a Structured Streaming query::

    readStream.format("sluice") ─► + date column ─► writeStream.parquet(output)
        offsets in <checkpoint>/offsets          partitioned topic=<t>/date=<yyyy-mm-dd>
                                                 files committed in output/_spark_metadata

Spark's checkpoint plus its file sink make it exactly once: a restarted job resumes
from the offsets of the last committed micro-batch, and files of an uncommitted batch
are not in ``_spark_metadata``, so readers of the archive never see them twice.
``until_end`` runs ``Trigger.AvailableNow`` (stop at the ends seen at start),
otherwise the query keeps running.

Replay reads the archive back (a time or offset range, some topics) and produces it
into a topic, preserving keys, headers, timestamps and the order within each source
partition: rows are repartitioned by source (topic, partition), sorted by offset within
each Spark partition, and each source partition keeps its partition number unless
``keep_partitions`` is off (then keys are hashed, and order is per key).
"""

from __future__ import annotations

import datetime
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

ARCHIVE_COLUMNS = (
    "key",
    "value",
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestampType",
    "headers",
)


@dataclass(frozen=True, slots=True)
class ArchiveJob:
    bootstrap_servers: str
    output: str
    checkpoint: str
    topics: Sequence[str] = ()
    pattern: str | None = None
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    until_end: bool = False
    trigger_interval_s: float = 10.0
    fail_on_data_loss: bool = True


@dataclass(frozen=True, slots=True)
class ReplayJob:
    bootstrap_servers: str
    archive: str
    topic: str
    source_topics: Sequence[str] = ()
    from_time: datetime.datetime | None = None
    to_time: datetime.datetime | None = None
    """Exclusive."""
    from_offset: int | None = None
    to_offset: int | None = None
    """Exclusive."""
    keep_partitions: bool = True


def spark_session(master: str, app_name: str) -> Any:
    """A SparkSession whose Python workers run this interpreter, with ``sluice``
    registered. On a cluster, pass the master of that cluster (and see docs/spark.md)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession  # noqa: PLC0415

    from sluice.spark import register  # noqa: PLC0415

    session = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    register(session)
    return session


def start_archive(spark: Any, job: ArchiveJob) -> Any:
    """Start the archive query and return its ``StreamingQuery``."""
    from pyspark.sql import functions  # noqa: PLC0415

    reader = (
        spark.readStream.format("sluice")
        .option("bootstrap.servers", job.bootstrap_servers)
        .option("includeHeaders", "true")
        .option("startingOffsets", job.starting_offsets)
        .option("failOnDataLoss", str(job.fail_on_data_loss).lower())
    )
    if job.pattern is not None:
        reader = reader.option("subscribePattern", job.pattern)
    else:
        reader = reader.option("subscribe", ",".join(job.topics))
    if job.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(job.max_offsets_per_trigger))
    frame = reader.load().withColumn("date", functions.to_date(functions.col("timestamp")))
    writer = (
        frame.writeStream.format("parquet")
        .option("path", job.output)
        .option("checkpointLocation", job.checkpoint)
        .partitionBy("topic", "date")
        .outputMode("append")
    )
    if job.until_end:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{job.trigger_interval_s} seconds")
    return writer.start()


def run_archive(spark: Any, job: ArchiveJob) -> None:
    """Run the archive until it stops (``until_end``) or forever."""
    query = start_archive(spark, job)
    query.awaitTermination()


def replay_frame(spark: Any, job: ReplayJob) -> Any:
    """The archived rows to replay, one Spark partition per source partition, in
    offset order within it."""
    from pyspark.sql import functions  # noqa: PLC0415

    frame = spark.read.parquet(job.archive)
    column = functions.col
    if job.source_topics:
        frame = frame.where(column("topic").isin(list(job.source_topics)))
    if job.from_time is not None:
        frame = frame.where(column("timestamp") >= functions.lit(job.from_time))
    if job.to_time is not None:
        frame = frame.where(column("timestamp") < functions.lit(job.to_time))
    if job.from_offset is not None:
        frame = frame.where(column("offset") >= job.from_offset)
    if job.to_offset is not None:
        frame = frame.where(column("offset") < job.to_offset)
    sources = frame.select("topic", "partition").distinct().count()
    ordered = frame.repartition(max(1, sources), "topic", "partition").sortWithinPartitions(
        "topic", "partition", "offset"
    )
    columns = ["key", "value", "headers", "timestamp"]
    if job.keep_partitions:
        columns.append("partition")
    return ordered.select(*columns)


def run_replay(spark: Any, job: ReplayJob) -> None:
    """Produce the selected archive rows into ``job.topic`` (at-least-once)."""
    write_replay(replay_frame(spark, job), job)


def write_replay(frame: Any, job: ReplayJob) -> None:
    """Produce the rows of :func:`replay_frame` into ``job.topic``."""
    (
        frame.write.format("sluice")
        .option("bootstrap.servers", job.bootstrap_servers)
        .option("topic", job.topic)
        .mode("append")
        .save()
    )
