"""The transaction coordinators' runtime: the generic coordinator runtime over
``__transaction_state``, with the transaction operations the broker's handlers call.

One :class:`~sluice.txn.coordinator.TransactionCoordinator` per partition is a shard of
:class:`~sluice.coordinator.runtime.CoordinatorRuntime` (loading, writes, timers,
NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS). This layer routes each request to the
partition of its transactional id, reserves producer ids before an operation that may
need one (the shard is synchronous; reserving is not), and runs the shard's
:class:`~sluice.txn.api.WriteMarkers` tasks through the broker's marker writer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol, TypeVar

from sluice.common.clock import SYSTEM_CLOCK, Clock
from sluice.common.errors import ErrorCode, KafkaError
from sluice.coordinator.api import CoordinatorLog, Task
from sluice.coordinator.placement import partition_for
from sluice.coordinator.runtime import CoordinatorRuntime, Operation
from sluice.txn.api import (
    AddPartitionsRequest,
    AddPartitionsResult,
    EndTxnRequest,
    InitProducerIdRequest,
    ListTransactionsFilter,
    ProducerIdAndEpoch,
    TransactionDescription,
    TransactionListing,
    WriteMarkers,
)
from sluice.txn.config import TransactionConfig
from sluice.txn.coordinator import TransactionCoordinator, epoch_exhausted

_ResponseT = TypeVar("_ResponseT")

MarkerWriter = Callable[[int, WriteMarkers], Awaitable[None]]
"""Writes a decision's markers for the coordinator of ``__transaction_state-<partition>``
and returns once every one is written (retrying meanwhile); it gives up only when that
partition is no longer coordinated here."""


class ProducerIdSource(Protocol):
    async def next_producer_id(self) -> int: ...


class TransactionCoordinatorRuntime(CoordinatorRuntime[TransactionCoordinator]):
    def __init__(
        self,
        state_log: CoordinatorLog,
        producer_ids: ProducerIdSource,
        write_markers: MarkerWriter,
        config: TransactionConfig | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._config = config if config is not None else TransactionConfig()
        self._producer_ids = producer_ids
        self._write_markers = write_markers
        super().__init__(
            state_log, lambda: TransactionCoordinator(self._config), clock, self._run_task
        )

    def coordinator_partition(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.partition_count)

    # ================================================================ operations

    async def init_producer_id(self, request: InitProducerIdRequest) -> ProducerIdAndEpoch:
        partition = self.coordinator_partition(request.transactional_id)
        shard = self.loaded_shard(partition)
        fresh = None
        if shard.needs_producer_id(request.transactional_id, initializing=True):
            fresh = await self._producer_ids.next_producer_id()
        return await self._call(
            ProducerIdAndEpoch,
            partition,
            lambda c, now, token: c.init_producer_id(now, token, request, fresh),
        )

    async def add_partitions(self, request: AddPartitionsRequest) -> AddPartitionsResult:
        return await self._call(
            AddPartitionsResult,
            self.coordinator_partition(request.transactional_id),
            lambda c, now, token: c.add_partitions(now, token, request),
        )

    async def end_txn(self, request: EndTxnRequest) -> ProducerIdAndEpoch:
        partition = self.coordinator_partition(request.transactional_id)
        transaction = self.loaded_shard(partition).transaction(request.transactional_id)
        fresh = None
        if (
            request.bump_epoch
            and transaction is not None
            and epoch_exhausted(transaction.producer_epoch)
        ):
            fresh = await self._producer_ids.next_producer_id()
        return await self._call(
            ProducerIdAndEpoch,
            partition,
            lambda c, now, token: c.end_txn(now, token, request, fresh),
        )

    def describe(self, transactional_ids: Iterable[str]) -> tuple[TransactionDescription, ...]:
        """DescribeTransactions: ids coordinated elsewhere answer NOT_COORDINATOR."""
        described = []
        for transactional_id in transactional_ids:
            try:
                shard = self.loaded_shard(self.coordinator_partition(transactional_id))
            except KafkaError as e:
                described.append(TransactionDescription(transactional_id, e.code))
                continue
            described += shard.describe([transactional_id])
        return tuple(described)

    def list_transactions(
        self, wanted: ListTransactionsFilter
    ) -> tuple[ErrorCode, tuple[TransactionListing, ...]]:
        """ListTransactions over the partitions coordinated here;
        COORDINATOR_LOAD_IN_PROGRESS while one is still loading."""
        if self.is_loading:
            return ErrorCode.coordinator_load_in_progress, ()
        now_ms = self._clock.wall_ms()
        listed: list[TransactionListing] = []
        for partition in self.loaded_partitions():
            listed += self.loaded_shard(partition).list_transactions(now_ms, wanted)
        return ErrorCode.none, tuple(listed)

    # ================================================================== plumbing

    async def _run_task(self, partition: int, task: Task) -> object:
        assert isinstance(task.work, WriteMarkers), f"unknown task {task.work!r}"
        await self._write_markers(partition, task.work)
        return None

    async def _call(
        self,
        kind: type[_ResponseT],
        partition: int,
        operation: Operation[TransactionCoordinator],
    ) -> _ResponseT:
        response = await self.call(partition, operation)
        assert isinstance(response, kind), f"expected {kind.__name__}, got {response!r}"
        return response
