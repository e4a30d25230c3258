"""The share coordinator on the generic coordinator runtime, over an in-memory
``__share_group_state`` (that can hold or fail writes): keys routed by Kafka's hash,
answers only once the record is committed, refusals raised as KafkaErrors, and the state
rebuilt by a new runtime from the same log. The broker's real log and the wire are
tested in the integration suite."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from coordinator_helpers import MemoryCoordinatorLog, run, settle, until_done

from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.coordinator.placement import partition_for
from sluice.share.config import SHARE_STATE_TOPIC
from sluice.share.state import DeliveryState, ShareState, ShareStateKey, StateBatch
from sluice.share.state_coordinator import ShareStateSummary
from sluice.share.state_runtime import ShareStateCoordinatorRuntime

PARTITIONS = 5
KEYS = [ShareStateKey("queue-a", uuid.UUID(int=7), p) for p in range(6)]


def test_state_is_routed_written_and_rebuilt_after_a_restart() -> None:
    async def scenario() -> None:
        state_log = MemoryCoordinatorLog(PARTITIONS, SHARE_STATE_TOPIC)
        batches = (StateBatch(10, 12, DeliveryState.ARCHIVED, 5),)
        async with ShareStateCoordinatorRuntime(state_log) as runtime:
            for key in KEYS:
                # Kafka's key: the topic id in its URL-safe base64 form.
                assert runtime.coordinator_partition(key) == partition_for(
                    f"queue-a:AAAAAAAAAAAAAAAAAAAABw:{key.partition}", PARTITIONS
                )
                assert await runtime.read(key, 2) is None
                assert await runtime.initialize(key, 10) == ShareState(0, 10, (), 2)
                await runtime.write(key, ShareState(0, 10, batches, 2))
            await runtime.delete(KEYS[0])
            assert (
                sorted(await runtime.group_keys("queue-a"), key=lambda k: k.partition) == (KEYS[1:])
            )
        partitions_used = {runtime.coordinator_partition(key) for key in KEYS}
        assert len(partitions_used) > 1, "the keys spread over the topic's partitions"
        for partition in partitions_used:
            assert state_log.partitions[partition], f"records in partition {partition}"
        async with ShareStateCoordinatorRuntime(state_log) as restarted:
            assert await restarted.read(KEYS[0], 2) is None
            for key in KEYS[1:]:
                assert await restarted.summary(key) == ShareStateSummary(0, 2, 10)
                assert await restarted.read(key, 2) == ShareState(0, 10, batches, 2)
            with pytest.raises(errors.for_code(ErrorCode.fenced_leader_epoch)):
                await restarted.write(KEYS[1], ShareState(0, 10, (), 1))

    run(scenario)


def test_a_write_is_answered_only_once_committed() -> None:
    async def scenario() -> None:
        state_log = MemoryCoordinatorLog(PARTITIONS, SHARE_STATE_TOPIC)
        async with ShareStateCoordinatorRuntime(state_log) as runtime:
            key = KEYS[0]
            await runtime.initialize(key, 0)
            state_log.gate = asyncio.Event()
            write = asyncio.create_task(runtime.write(key, ShareState(0, 5)))
            await settle()
            assert not write.done()
            state_log.gate.set()
            await until_done(write)
            assert await runtime.read(key, -1) == ShareState(0, 5)
            state_log.fail_with = errors.NotEnoughReplicas("one replica")
            with pytest.raises(KafkaError) as failed:
                await until_done(runtime.write(key, ShareState(0, 6)))
            assert failed.value.code is ErrorCode.coordinator_not_available
            state_log.fail_with = None
            assert await runtime.read(key, -1) == ShareState(0, 5)

    run(scenario)


def test_a_partition_not_loaded_here_is_not_coordinated_here() -> None:
    async def scenario() -> None:
        state_log = MemoryCoordinatorLog(PARTITIONS, SHARE_STATE_TOPIC)
        runtime = ShareStateCoordinatorRuntime(state_log)
        key = KEYS[0]
        loaded = [p for p in range(PARTITIONS) if p != runtime.coordinator_partition(key)]
        async with asyncio.TaskGroup() as tasks:
            await runtime.start(tasks, loaded)
            with pytest.raises(errors.for_code(ErrorCode.not_coordinator)):
                await runtime.read(key, 0)
            with pytest.raises(errors.for_code(ErrorCode.not_coordinator)):
                await runtime.summary(key)
            runtime.stop()

    run(scenario)
