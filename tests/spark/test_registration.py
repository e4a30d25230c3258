"""Spark's discovery of installed ``pyspark_*`` modules finds the sluice source."""

from __future__ import annotations

import pkgutil

from pyspark.sql.datasource import DataSource


def test_pyspark_sluice_exports_the_default_source() -> None:
    import pyspark_sluice  # noqa: PLC0415

    assert issubclass(pyspark_sluice.DefaultSource, DataSource)
    assert pyspark_sluice.DefaultSource.name() == "sluice"
    # What pyspark.sql.worker.lookup_data_sources scans.
    assert "pyspark_sluice" in {m.name for m in pkgutil.iter_modules()}
