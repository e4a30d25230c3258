"""Fixtures of the cluster tests: a real private ZooKeeper per test module (the Debian
package's, on a free loopback port) and, for each test, a chroot of its own in it, so
tests never see each other's metadata."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.cli.local_zookeeper import LocalZooKeeper

# The broker-process helpers are shared with the single-node integration tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

import process_leaks


def pytest_configure(config: pytest.Config) -> None:
    process_leaks.register(config)


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalZooKeeper]:
    with LocalZooKeeper(tmp_path_factory.mktemp("zookeeper")) as server:
        yield server


@pytest.fixture
def zookeeper_connect(zookeeper: LocalZooKeeper) -> str:
    """A connection string with a fresh chroot: this test's own namespace."""
    return f"{zookeeper.connect}/test-{uuid.uuid4().hex[:12]}"
