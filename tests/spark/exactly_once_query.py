"""A streaming query copying a topic into another exactly once: what the Spark
exactly-once test runs in its own process and kills.

    python exactly_once_query.py BOOTSTRAP SOURCE SINK CHECKPOINT (run|until-end)

``run`` keeps going (micro-batches of at most 40 records, one every 200 ms) until
killed; ``until-end`` stops once everything there is now is copied.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from sluice.spark import register


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
    register(spark)
    writer = (
        spark.readStream.format("sluice")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "40")
        .load()
        .select("key", "value", "partition")
        .writeStream.format("sluice")
        .option("bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("deliveryGuarantee", "exactly-once")
        .option("checkpointLocation", checkpoint)
    )
    if mode == "until-end":
        query = writer.trigger(availableNow=True).start()
    else:
        query = writer.trigger(processingTime="200 milliseconds").start()
    print("started", flush=True)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
