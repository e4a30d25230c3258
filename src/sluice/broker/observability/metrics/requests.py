"""Request instruments, counted by the dispatcher once per request.

Counts are plain integers in dictionaries keyed by label values, and the duration
histogram is a list of bucket counts per API found by bisection: a few dictionary and
list updates per request, no locks (the event loop is the only writer). They become
Prometheus families only when scraped. Every label is bounded: API names come from the
protocol's table, listener names from the configuration, error names from Kafka's error
table.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from sluice.broker.observability.metrics.errors import error_name

REQUEST_DURATION_BUCKETS_S = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
"""From a cached Metadata answer to a long-polling fetch (up to its max wait)."""


class RequestMetrics(Collector):
    """Requests by API and listener, the errors their responses carry, how long they
    took (from the dispatcher receiving the frame to the response being ready: a
    long-polling fetch counts its wait) and how many are being handled now."""

    def __init__(self) -> None:
        self.requests: defaultdict[tuple[str, str], int] = defaultdict(int)
        """(api, listener) → requests."""
        self.errors: defaultdict[tuple[str, int], int] = defaultdict(int)
        """(api, error code) → errors found in responses."""
        self.in_flight = 0
        self._durations: dict[str, list[float]] = {}
        """api → [count in each bucket (not cumulative; the last is +Inf)..., sum]."""

    def finished(self, api: str, listener: str, seconds: float) -> None:
        """One request of ``api`` on ``listener`` answered after ``seconds``."""
        self.requests[api, listener] += 1
        histogram = self._durations.get(api)
        if histogram is None:
            histogram = self._durations[api] = [0.0] * (len(REQUEST_DURATION_BUCKETS_S) + 2)
        histogram[bisect_left(REQUEST_DURATION_BUCKETS_S, seconds)] += 1
        histogram[-1] += seconds

    def count_errors(self, api: str, codes: Iterable[int]) -> None:
        for code in codes:
            self.errors[api, code] += 1

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "sluice_requests", "Requests answered, by API and listener", labels=["api", "listener"]
        )
        for (api, listener), count in sorted(self.requests.items()):
            requests.add_metric([api, listener], count)
        yield requests
        errors = CounterMetricFamily(
            "sluice_request_errors",
            "Kafka errors in responses (top level and per topic or partition), by API and "
            "error name",
            labels=["api", "error"],
        )
        for (api, code), count in sorted(self.errors.items()):
            errors.add_metric([api, error_name(code)], count)
        yield errors
        durations = HistogramMetricFamily(
            "sluice_request_duration_seconds",
            "Time from a request's frame reaching the dispatcher to its response being "
            "ready, by API",
            labels=["api"],
        )
        for api, histogram in sorted(self._durations.items()):
            buckets = []
            cumulative = 0.0
            for bound, in_bucket in zip(
                (*(str(b) for b in REQUEST_DURATION_BUCKETS_S), "+Inf"), histogram, strict=False
            ):
                cumulative += in_bucket
                buckets.append((bound, cumulative))
            durations.add_metric([api], buckets, histogram[-1])
        yield durations
        yield GaugeMetricFamily(
            "sluice_requests_in_flight", "Requests being handled now", value=self.in_flight
        )
