"""Spark pipelines on Sluice: a PySpark (Spark 4) Python data source and the jobs on it.

What belongs here: everything that runs inside Spark. It reads and writes topics only
through :mod:`sluice.client` (never the broker or storage), and opens sockets inside
Spark tasks, never on objects that get pickled.

    options     the data source options, parsed and checked on the driver
    planning    partitions, offset ranges, rate limits (driver)
    reading     one offset range → Arrow record batches (executors)
    source      the DataSource and its batch and streaming readers
    sink        the batch and streaming writers (at-least-once; streaming exactly-once
                through transactions the driver commits)
    pipelines   the archive (topics → Parquet) and replay (Parquet → topic) jobs
    registry_values   keys and values framed with Schema Registry ids: the schemas
                planned on the driver, decoded (executors) into columns, rows encoded
    schema_columns    a registry schema's Spark type and value conversions (pure)

Use it with ``sluice.spark.register(spark)``, or rely on Spark's own discovery of the
installed top-level module ``pyspark_sluice``, then ``spark.read.format("sluice")``.
"""

from __future__ import annotations

from typing import Any

from sluice.spark.options import SluiceOptionError
from sluice.spark.source import FORMAT_NAME, SluiceDataSource, source_schema

__all__ = ["FORMAT_NAME", "SluiceDataSource", "SluiceOptionError", "register", "source_schema"]


def register(spark: Any) -> None:
    """Register ``format("sluice")`` on a SparkSession (idempotent)."""
    spark.dataSource.register(SluiceDataSource)
