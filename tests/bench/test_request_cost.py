"""bench/request_cost.py against a real broker: a short run of each raw-socket phase gets
every answer without an error (the fetch answers carry records) and measures the broker's
CPU time, and its CPU time with no request."""

import json
from pathlib import Path

import pytest

from request_cost import main

pytestmark = pytest.mark.integration

RATE_PER_S = 100
SECONDS = 0.5


def test_a_short_run_measures_every_phase_without_errors(tmp_path: Path) -> None:
    output = tmp_path / "results.json"

    main(
        [
            *("--systems", "sluice", "--phases", "produce,fetch,metadata"),
            *("--rate", str(RATE_PER_S), "--seconds", str(SECONDS), "--json", str(output)),
        ]
    )

    results = json.loads(output.read_text())["results"]
    assert [r["phase"] for r in results] == ["idle", "produce", "fetch", "metadata"]
    assert results[0]["p50_ms"] is None  # no latency without requests, and strict JSON
    results = results[1:]
    for result in results:
        assert result["system"] == "sluice"
        assert result["requests"] == RATE_PER_S * SECONDS
        assert result["errors"] == 0
        assert result["cpu_us_per_request"] > 0
    produce, fetch, _metadata = results
    assert fetch["received_bytes"] / fetch["requests"] > 1024  # one 1 KiB record each
    assert produce["what"].startswith("Produce v")
