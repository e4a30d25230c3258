"""Per-topic traffic, counted by the produce and fetch handlers once per partition of a
request (batch bytes and the batch header's record count: no per-record work).

Bytes in and records in count batches clients produced and the log stored (replication
and the broker's own writes are not included); bytes out count the record bytes of fetch
responses, consumers' and followers' apart (label ``fetcher``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

CONSUMER = "consumer"
FOLLOWER = "follower"


class TopicTraffic(Collector):
    def __init__(self) -> None:
        self.bytes_in: defaultdict[str, int] = defaultdict(int)
        self.records_in: defaultdict[str, int] = defaultdict(int)
        self.produce_errors: defaultdict[str, int] = defaultdict(int)
        """Partitions of produce requests refused or failed, by topic."""
        self.bytes_out: defaultdict[tuple[str, str], int] = defaultdict(int)
        """(topic, CONSUMER or FOLLOWER) → record bytes sent."""

    def produced(self, topic: str, size_bytes: int, records: int) -> None:
        self.bytes_in[topic] += size_bytes
        self.records_in[topic] += records

    def collect(self) -> Iterator[Metric]:
        bytes_in = CounterMetricFamily(
            "sluice_topic_bytes_in",
            "Record batch bytes produced by clients and stored, by topic",
            labels=["topic"],
        )
        records_in = CounterMetricFamily(
            "sluice_topic_records_in",
            "Records produced by clients and stored, by topic",
            labels=["topic"],
        )
        for topic, size in sorted(self.bytes_in.items()):
            bytes_in.add_metric([topic], size)
            records_in.add_metric([topic], self.records_in[topic])
        errors = CounterMetricFamily(
            "sluice_topic_produce_errors",
            "Partitions of produce requests refused or failed, by topic",
            labels=["topic"],
        )
        for topic, count in sorted(self.produce_errors.items()):
            errors.add_metric([topic], count)
        bytes_out = CounterMetricFamily(
            "sluice_topic_bytes_out",
            "Record bytes sent in fetch responses, by topic and fetcher (consumer or follower)",
            labels=["topic", "fetcher"],
        )
        for (topic, fetcher), size in sorted(self.bytes_out.items()):
            bytes_out.add_metric([topic, fetcher], size)
        yield from (bytes_in, records_in, errors, bytes_out)
