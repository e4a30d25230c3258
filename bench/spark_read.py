"""Spark data source benchmark: rows/s of a batch read and of the archive job.

Starts its own ``python -m sluice serve`` on a free loopback port with a temporary data
directory, fills a topic with confluent-kafka (fast, C producer), then measures, on a
local Spark (``local[N]``):

1. batch read: ``spark.read.format("sluice")...load()`` aggregated in Spark (count and
   sum of value lengths, so every row crosses from the Arrow batches into the JVM);
2. archive: ``sluice.spark.pipelines`` archive with Trigger.AvailableNow into Parquet.

The data source is found by Spark's own discovery of ``pyspark_sluice`` (this script
does not call ``sluice.spark.register``).

    .venv/bin/python bench/spark_read.py                    # 1,000,000 rows of 100 B
    .venv/bin/python bench/spark_read.py --rows 100000      # quick
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from broker_process import BrokerProcess

FILL_TIMEOUT_S = 300.0


def fill(bootstrap: str, topic: str, partitions: int, rows: int, value_bytes: int) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000, "acks": 1}
    )
    value = b"x" * value_bytes
    started = time.perf_counter()
    for i in range(rows):
        while True:
            try:
                producer.produce(topic, value, key=str(i).encode(), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    remaining = producer.flush(FILL_TIMEOUT_S)
    assert remaining == 0, f"{remaining} records not delivered"
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--cores", type=int, default=4)
    arguments = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession, functions  # noqa: PLC0415

    from sluice.spark.pipelines import ArchiveJob, run_archive  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as directory:
        base = Path(directory)
        broker = BrokerProcess(base / "data")
        broker.start()
        try:
            topic = "bench-spark"
            fill_s = fill(
                broker.bootstrap, topic, arguments.partitions, arguments.rows, arguments.value_bytes
            )
            print(f"filled {arguments.rows} rows in {fill_s:.1f}s")
            spark = (
                SparkSession.builder.master(f"local[{arguments.cores}]")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.session.timeZone", "UTC")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            frame = (
                spark.read.format("sluice")
                .option("bootstrap.servers", broker.bootstrap)
                .option("subscribe", topic)
                .load()
            )
            frame.limit(1).collect()  # warm up the JVM and the Python workers
            results = []
            for attempt in range(2):
                started = time.perf_counter()
                row = frame.agg(
                    functions.count("*").alias("n"),
                    functions.sum(functions.length("value")).alias("b"),
                ).collect()[0]
                elapsed = time.perf_counter() - started
                assert row.n == arguments.rows, row
                results.append(elapsed)
                print(f"batch read #{attempt + 1}: {row.n / elapsed:,.0f} rows/s ({elapsed:.2f}s)")
            started = time.perf_counter()
            run_archive(
                spark,
                ArchiveJob(
                    broker.bootstrap,
                    str(base / "archive"),
                    str(base / "checkpoint"),
                    topics=[topic],
                    until_end=True,
                ),
            )
            elapsed = time.perf_counter() - started
            archived = spark.read.parquet(str(base / "archive")).count()
            assert archived == arguments.rows, archived
            print(f"archive: {archived / elapsed:,.0f} rows/s ({elapsed:.2f}s)")
            print(
                f"summary rows={arguments.rows} partitions={arguments.partitions} "
                f"value_bytes={arguments.value_bytes} cores={arguments.cores} "
                f"batch_read_rows_s={arguments.rows / min(results):,.0f} "
                f"archive_rows_s={archived / elapsed:,.0f}"
            )
            spark.stop()
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
