"""Fixtures of the group coordinator suite: a seeded harness. The seed is printed, so a
failure shows it (pytest prints captured output); set SLUICE_TEST_SEED to replay it.

The runtime tests share the coordinator suite's in-memory log: ``tests/unit/coordinator``
is not a package, so its directory is put on ``sys.path``; nothing there is changed."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest
from group_helpers import Harness

_COORDINATOR_TESTS = Path(__file__).resolve().parents[1] / "coordinator"
if str(_COORDINATOR_TESTS) not in sys.path:
    sys.path.insert(0, str(_COORDINATOR_TESTS))


@pytest.fixture
def seed() -> int:
    value = int(os.environ.get("SLUICE_TEST_SEED", random.randrange(2**32)))
    print(f"seed {value} (rerun with SLUICE_TEST_SEED={value})")
    return value


@pytest.fixture
def harness(seed: int) -> Harness:
    return Harness(seed=seed)
