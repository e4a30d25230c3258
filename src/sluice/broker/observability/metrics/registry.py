"""One broker's metrics registry: its instruments, the collectors the broker adds once
its parts exist, and prometheus-client's process and platform collectors.

Never the global default registry: several brokers may run in one process (tests, the
embedded dev cluster), each with a registry of its own.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

from sluice.broker.observability.metrics.requests import RequestMetrics
from sluice.broker.observability.metrics.storage import StorageMetrics
from sluice.broker.observability.metrics.traffic import TopicTraffic

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""The Prometheus text format 0.0.4, what ``generate_latest`` writes and every Prometheus
version reads."""


class BrokerMetrics:
    def __init__(self) -> None:
        # No auto-describe: a collector is read only when scraped, once its parts exist.
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = RequestMetrics()
        self.traffic = TopicTraffic()
        self.storage = StorageMetrics()
        for instrument in (self.requests, self.traffic, self.storage):
            self.registry.register(instrument)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)

    def add(self, collector: Collector) -> None:
        self.registry.register(collector)

    def exposition(self) -> bytes:
        """Every metric in the Prometheus text format."""
        return generate_latest(self.registry)
