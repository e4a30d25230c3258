"""The transaction coordinator on the generic coordinator runtime: its appends through
the runtime's writer (an in-memory ``__transaction_state`` that can fail on purpose),
its marker tasks through a marker writer the test holds, its periodic check on a manual
clock. The broker's real log and markers are tested with real clients in the
integration suite."""

from __future__ import annotations

import asyncio

from coordinator_helpers import MemoryCoordinatorLog, run, settle, until_done

from sluice.common.clock import ManualClock
from sluice.common.errors import ErrorCode, NotEnoughReplicas
from sluice.common.ids import TopicPartition
from sluice.coordinator.api import TransactionalRecord, TransactionMarker
from sluice.txn.api import (
    AddPartitionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProducerIdAndEpoch,
    WriteMarkers,
)
from sluice.txn.config import TRANSACTION_STATE_TOPIC, TransactionConfig
from sluice.txn.records import TransactionState, decode_value
from sluice.txn.runtime import TransactionCoordinatorRuntime

T = "app-1"
P0 = TopicPartition("orders", 0)
CHECK_MS = 1_000
PARTITIONS = 2


class ProducerIds:
    def __init__(self) -> None:
        self.next = 1000

    async def next_producer_id(self) -> int:
        self.next += 1
        return self.next


class Markers:
    """The marker writer: records each decision's markers; held while ``gate`` is."""

    def __init__(self) -> None:
        self.written: list[WriteMarkers] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, partition: int, work: WriteMarkers) -> None:
        await self.gate.wait()
        self.written.append(work)


def states_written(state_log: MemoryCoordinatorLog, partition: int) -> list[TransactionState]:
    states = []
    for item in state_log.read(partition):
        assert not isinstance(item, TransactionalRecord | TransactionMarker)
        _key, value = item
        assert value is not None
        states.append(decode_value(value).state)
    return states


def test_a_completion_whose_write_failed_is_written_at_the_next_check() -> None:
    async def scenario() -> None:
        state_log = MemoryCoordinatorLog(PARTITIONS, TRANSACTION_STATE_TOPIC)
        clock, markers = ManualClock(), Markers()
        config = TransactionConfig(abort_check_interval_ms=CHECK_MS)
        runtime = TransactionCoordinatorRuntime(state_log, ProducerIds(), markers, config, clock)
        async with runtime:
            partition = runtime.coordinator_partition(T)
            producer = await until_done(runtime.init_producer_id(InitProducerIdRequest(T, 60_000)))
            assert producer == ProducerIdAndEpoch(ErrorCode.none, 1001, 0)
            added = await runtime.add_partitions(AddPartitionsRequest(T, 1001, 0, (P0,)))
            assert added.errors == {P0: ErrorCode.none}
            markers.gate.clear()
            committed = await until_done(runtime.end_txn(EndTxnRequest(T, 1001, 0, True)))
            assert committed.error is ErrorCode.none
            # The markers go in while the log refuses writes: Complete* fails.
            state_log.fail_with = NotEnoughReplicas("one in-sync replica")
            markers.gate.set()
            await settle()
            assert [m.partitions for m in markers.written] == [(P0,)]
            shard = runtime.loaded_shard(partition)
            transaction = shard.transaction(T)
            assert transaction is not None
            assert (transaction.state, transaction.pending) == (
                TransactionState.PREPARE_COMMIT,
                False,
            )
            retried = await until_done(runtime.end_txn(EndTxnRequest(T, 1001, 0, True)))
            assert retried.error is ErrorCode.concurrent_transactions
            # The replicas are back; the next check writes Complete*, no markers again.
            state_log.fail_with = None
            clock.advance(CHECK_MS)
            runtime.wake()
            await settle()
            assert transaction.state is TransactionState.COMPLETE_COMMIT
            assert len(markers.written) == 1
            assert states_written(state_log, partition) == [
                TransactionState.EMPTY,
                TransactionState.ONGOING,
                TransactionState.PREPARE_COMMIT,
                TransactionState.COMPLETE_COMMIT,
            ]
            done = await until_done(runtime.end_txn(EndTxnRequest(T, 1001, 0, True)))
            assert done == ProducerIdAndEpoch(ErrorCode.none, 1001, 0)

    run(scenario)
