"""Fixtures of the group coordinator suite: a seeded harness. The seed is printed, so a
failure shows it (pytest prints captured output); set SLUICE_TEST_SEED to replay it."""

from __future__ import annotations

import os
import random

import pytest
from group_helpers import Harness


@pytest.fixture
def seed() -> int:
    value = int(os.environ.get("SLUICE_TEST_SEED", random.randrange(2**32)))
    print(f"seed {value} (rerun with SLUICE_TEST_SEED={value})")
    return value


@pytest.fixture
def harness(seed: int) -> Harness:
    return Harness(seed=seed)
