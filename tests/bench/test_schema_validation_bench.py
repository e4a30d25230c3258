"""bench/schema_validation.py, run briefly as the script it is against its own broker:
both topics take every record (validation on accepts what Confluent's serializer wrote)
and it reports throughput, broker CPU per record and latency for each."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import schema_validation

RUN_TIMEOUT_S = 300


@pytest.mark.integration
def test_a_small_run_reports_both_topics(tmp_path: Path) -> None:
    output = tmp_path / "results.json"

    finished = subprocess.run(
        [
            sys.executable,
            str(Path(schema_validation.__file__)),
            *("--records", "20000", "--latency-records", "20", "--runs", "1"),
            *("--json", str(output)),
        ],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr[-4000:]

    runs = json.loads(output.read_text())
    assert [run["validation"] for run in runs] == [False, True]
    for run in runs:
        assert run["records"] == 20000
        assert run["seconds"] > 0 and run["broker_cpu_s"] >= 0  # CPU time ticks are coarse
        assert 0 < run["p50_ms"] <= run["p99_ms"]
    assert "| on |" in finished.stdout and "| off |" in finished.stdout
