"""Reading a broker's ``/metrics`` in tests: parsed with prometheus-client's own parser,
samples looked up by name and labels, and waiting (with a deadline) for a value."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

WAIT_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.1


def get(url: str, timeout_s: float = 10.0) -> tuple[int, str]:
    """(status, body) of a GET, error statuses included."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def get_json(url: str) -> tuple[int, dict[str, object]]:
    status, body = get(url)
    parsed = json.loads(body)
    assert isinstance(parsed, dict), body
    return status, parsed


def scrape(base_url: str) -> Samples:
    status, text = get(f"{base_url}/metrics")
    assert status == 200, text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str | int) -> float | None:
    return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())))


def total(samples: Samples, name: str, **labels: str | int) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    wanted = {(k, str(v)) for k, v in labels.items()}
    return sum(v for (n, have), v in samples.items() if n == name and wanted <= have)


def wait_for(
    base_url: str,
    condition: Callable[[Samples], bool],
    what: str,
    timeout_s: float = WAIT_TIMEOUT_S,
) -> Samples:
    """Scrape until ``condition`` holds; fail with the last scrape's relevant lines."""
    deadline = time.monotonic() + timeout_s
    while True:
        samples = scrape(base_url)
        if condition(samples):
            return samples
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(POLL_INTERVAL_S)  # polling interval between scrapes, not a sync
