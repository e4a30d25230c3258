"""A streaming query copying a topic into another exactly once: what the Spark
exactly-once test runs in its own process and kills.

    python exactly_once_query.py BOOTSTRAP SOURCE SINK CHECKPOINT (run|until-end)

``run`` keeps going (micro-batches of at most 40 records, one every 200 ms) until
killed; ``until-end`` stops once everything there is now is copied, in micro-batches of
at most 200 records (after replaying the batch the killed run had planned, if any).
The test restarts the query with :func:`start_query` in its own Spark session.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from sluice.spark import register

RUN_OFFSETS_PER_TRIGGER = 40
"""``run``'s micro-batches: small, so that a kill lands inside one of many."""
UNTIL_END_OFFSETS_PER_TRIGGER = 200
"""``until-end``'s micro-batches: larger, so that finishing takes few (a restart still
runs more than one after the replayed batch)."""


def start_query(
    spark: SparkSession, bootstrap: str, source: str, sink: str, checkpoint: str, mode: str
) -> StreamingQuery:
    """The query, started in ``spark``: copying ``source`` to ``sink`` exactly once."""
    register(spark)
    cap = RUN_OFFSETS_PER_TRIGGER if mode == "run" else UNTIL_END_OFFSETS_PER_TRIGGER
    writer = (
        spark.readStream.format("sluice")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(cap))
        .load()
        .select("key", "value", "partition")
        .writeStream.format("sluice")
        .option("bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("deliveryGuarantee", "exactly-once")
        .option("checkpointLocation", checkpoint)
    )
    if mode == "until-end":
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime="200 milliseconds").start()


def main(bootstrap: str, source: str, sink: str, checkpoint: str, mode: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("sluice-exactly-once")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    query = start_query(spark, bootstrap, source, sink, checkpoint, mode)
    print("started", flush=True)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
