"""An in-memory coordinator log and the asyncio helpers the runtime tests share (the
coordinator runtime's own tests, and the group runtime's)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any, TypeVar

from sluice.common.errors import KafkaError
from sluice.coordinator.api import (
    LoggedRecord,
    Record,
    TransactionalRecord,
    TransactionMarker,
)

T = TypeVar("T")
PARTITIONS = 4
SCENARIO_TIMEOUT_S = 10
STEP_TIMEOUT_S = 5


class MemoryCoordinatorLog:
    """Partitions as lists; ``append`` can be held (``gate``) or made to fail."""

    def __init__(self, partition_count: int = PARTITIONS, topic: str = "__test_state") -> None:
        self._topic = topic
        self._partition_count = partition_count
        self.partitions: dict[int, list[LoggedRecord]] = {p: [] for p in range(partition_count)}
        self.writes: list[tuple[int, list[Record]]] = []
        self.gate: asyncio.Event | None = None
        self.fail_with: KafkaError | None = None
        self.writing = asyncio.Event()

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def partition_count(self) -> int:
        return self._partition_count

    async def append(
        self,
        partition: int,
        records: Sequence[Record],
        transaction: tuple[int, int] | None = None,
    ) -> None:
        self.writing.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_with is not None:
            raise self.fail_with
        self.writes.append((partition, list(records)))
        if transaction is None:
            self.partitions[partition].extend(records)
        else:
            self.partitions[partition].extend(
                TransactionalRecord(transaction[0], key, value) for key, value in records
            )

    def write_marker(self, partition: int, producer_id: int, committed: bool) -> None:
        self.partitions[partition].append(TransactionMarker(producer_id, committed))

    def read(self, partition: int) -> Iterable[LoggedRecord]:
        return list(self.partitions[partition])


def run(scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(scenario(), SCENARIO_TIMEOUT_S)

    return asyncio.run(bounded())


async def settle() -> None:
    """Let every ready task run (a few rounds of the event loop)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def until_done(awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, STEP_TIMEOUT_S)
