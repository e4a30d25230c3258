"""Storage instruments the log maintenance loops feed: how long the flusher's fsyncs
take, and what the log cleaner did (counted per cleaning pass)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

FLUSH_DURATION_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class StorageMetrics(Collector):
    def __init__(self) -> None:
        self.flush_duration = Histogram(
            "sluice_log_flush_duration_seconds",
            "Time of one partition's fsync by the flusher (data, then the log's files)",
            registry=None,
            buckets=FLUSH_DURATION_BUCKETS_S,
        )
        self.cleaner_passes = 0
        self.cleaner_bytes_read = 0
        self.cleaner_bytes_written = 0
        self.cleaner_records_removed = 0
        self.cleaner_partitions_due = 0
        """Compacted partitions the cleaner's last pass found dirty enough to clean."""
        self.cleaner_last_clean_s = 0.0
        """Wall-clock time (seconds since the epoch) of the last cleaning pass; 0: none."""

    def cleaned(
        self, bytes_read: int, bytes_written: int, records_removed: int, now_s: float
    ) -> None:
        self.cleaner_passes += 1
        self.cleaner_bytes_read += bytes_read
        self.cleaner_bytes_written += bytes_written
        self.cleaner_records_removed += records_removed
        self.cleaner_last_clean_s = now_s

    def collect(self) -> Iterator[Metric]:
        yield from self.flush_duration.collect()
        for name, documentation, value in (
            ("sluice_log_cleaner_passes", "Compaction passes swapped in", self.cleaner_passes),
            (
                "sluice_log_cleaner_bytes_read",
                "Segment bytes the log cleaner read",
                self.cleaner_bytes_read,
            ),
            (
                "sluice_log_cleaner_bytes_written",
                "Cleaned segment bytes the log cleaner wrote",
                self.cleaner_bytes_written,
            ),
            (
                "sluice_log_cleaner_records_removed",
                "Records (and tombstones and markers) compaction removed",
                self.cleaner_records_removed,
            ),
        ):
            yield CounterMetricFamily(name, documentation, value=value)
        yield GaugeMetricFamily(
            "sluice_log_cleaner_partitions_due",
            "Compacted partitions the cleaner's last pass found dirty enough to clean "
            "(min.cleanable.dirty.ratio reached, or a tombstone's delete horizon passed)",
            value=self.cleaner_partitions_due,
        )
        yield GaugeMetricFamily(
            "sluice_log_cleaner_last_clean_timestamp_seconds",
            "When the log cleaner last swapped a cleaned pass in (0: never since start)",
            value=self.cleaner_last_clean_s,
        )
