"""The README's two commands, as make plans them (``make -n -B``: every step printed,
none run): `make serve` sets up only what serving needs, `make test` everything else."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST_LAB = ("apt-get", "npm", "[dev]", "openjdk", "zookeeper", "chromium", "nftables")
"""What belongs to the test lab (and `make dev-cluster`'s ZooKeeper), never to serving."""


def _plan(*arguments: str) -> str:
    # Run as from a shell: under `make test` the parent make's MAKEFLAGS and MAKELEVEL
    # would make this one print "Entering directory" lines around the plan.
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")
    }
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", *arguments],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return result.stdout


def test_make_serve_sets_up_only_what_serving_needs() -> None:
    plan = _plan("serve")
    assert "pip install -q -e ." in plan
    for part in TEST_LAB:
        assert part not in plan, f"`make serve` would run {part!r}:\n{plan}"
    assert plan.strip().splitlines()[-1].startswith(".venv/bin/sluice serve ")


def test_make_serve_passes_options_through() -> None:
    plan = _plan("serve", "ARGS=-o http.port=8081", "PORT=9093")
    assert plan.strip().splitlines()[-1].endswith("--port 9093 --data-dir ./data -o http.port=8081")


def test_make_test_sets_up_the_rest() -> None:
    plan = _plan("test")
    for part in ("[dev]", "npm ci", "openjdk", "zookeeper", "chromium", "nftables"):
        assert part in plan, f"`make test` would not set up {part!r}"
    assert "pytest" in plan
