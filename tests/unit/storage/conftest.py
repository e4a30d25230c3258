"""Fixtures of the storage suite: a manual clock, a small-segment config, and a log
factory that closes what it opened."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from storage_helpers import CODECS

from sluice.common.clock import ManualClock
from sluice.common.config import TopicConfig
from sluice.protocol.records.batch import Compression
from sluice.storage import PartitionLog

OpenLog = Callable[..., PartitionLog]


@pytest.fixture(params=CODECS, ids=[c.name.lower() for c in CODECS])
def codec(request: pytest.FixtureRequest) -> Compression:
    return Compression(request.param)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def config() -> TopicConfig:
    """Small segments and dense indexes, so a few batches exercise rolls and lookups."""
    return TopicConfig(
        segment_bytes=2048,
        segment_index_bytes=4096,
        index_interval_bytes=128,
        retention_ms=-1,
        file_delete_delay_ms=0,
    )


@pytest.fixture
def open_log(tmp_path: Path, clock: ManualClock, config: TopicConfig) -> Iterator[OpenLog]:
    """``open_log(directory=tmp_path/'log', recover=True, **config_changes)``."""
    opened: list[PartitionLog] = []

    def factory(
        directory: Path | None = None, *, recover: bool = True, **changes: Any
    ) -> PartitionLog:
        log = PartitionLog.open(
            directory or tmp_path / "log",
            dataclasses.replace(config, **changes),
            clock,
            recover=recover,
        )
        opened.append(log)
        return log

    yield factory
    for log in opened:
        log.close()


@pytest.fixture
def compact_log(open_log: OpenLog) -> OpenLog:
    """``compact_log(**config_changes)``: ``open_log`` with cleanup.policy=compact."""

    def factory(**changes: Any) -> PartitionLog:
        changes.setdefault("cleanup_policy", "compact")
        return open_log(**changes)

    return factory
