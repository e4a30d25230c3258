"""Spark's discovery hook for the ``sluice`` data source.

Spark 4 looks, on first use of a Python data source, for installed top-level modules
whose name starts with ``pyspark_`` and registers their ``DefaultSource`` under its
``name()``. With Sluice installed in the driver's Python, ``format("sluice")`` works
without calling :func:`sluice.spark.register`.
"""

from sluice.spark.source import SluiceDataSource as DefaultSource

__all__ = ["DefaultSource"]
