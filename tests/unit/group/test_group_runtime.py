"""The runtime's own scheduling: loading, timers on a manual clock, the per-partition
writer (order, batching, failures), routing and NOT_COORDINATOR. The offsets log is an
in-memory fake here; the broker's real ``__consumer_offsets`` path is tested with real
clients in the integration suite."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from random import Random
from typing import Any, TypeVar

import pytest

from sluice.common.clock import ManualClock
from sluice.common.errors import ErrorCode, KafkaError, NotLeaderOrFollower, for_code
from sluice.common.ids import TopicPartition
from sluice.group.api import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitRequest,
    OffsetToCommit,
    Record,
    SyncGroupRequest,
)
from sluice.group.config import GroupConfig
from sluice.group.placement import partition_for
from sluice.group.records import OffsetCommitKey, OffsetCommitValue, encode_key
from sluice.group.records import encode_offset_commit_value as encode_value
from sluice.group.runtime import REPLAY_RECORDS_PER_YIELD, GroupCoordinatorRuntime

T = TypeVar("T")
T0 = TopicPartition("orders", 0)
PARTITIONS = 4


class MemoryOffsetsLog:
    """Partitions as lists; ``append`` can be held (``gate``) or made to fail."""

    def __init__(self, partition_count: int = PARTITIONS) -> None:
        self._partition_count = partition_count
        self.partitions: dict[int, list[Record]] = {p: [] for p in range(partition_count)}
        self.writes: list[tuple[int, list[Record]]] = []
        self.gate: asyncio.Event | None = None
        self.fail_with: KafkaError | None = None
        self.writing = asyncio.Event()

    @property
    def partition_count(self) -> int:
        return self._partition_count

    async def append(self, partition: int, records: Sequence[Record]) -> None:
        self.writing.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_with is not None:
            raise self.fail_with
        self.writes.append((partition, list(records)))
        self.partitions[partition].extend(records)

    def read(self, partition: int) -> Iterable[Record]:
        return list(self.partitions[partition])


def run(scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(scenario(), 10)

    return asyncio.run(bounded())


def join_request(
    group_id: str = "g", member_id: str = "", client_id: str = "c"
) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group_id,
        member_id=member_id,
        group_instance_id=None,
        client_id=client_id,
        client_host="",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=30_000,
        protocol_type="consumer",
        protocols=(("range", b""),),
        require_known_member_id=False,
    )


def commit_request(group_id: str, offset: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(group_id, -1, "", None, ((T0, OffsetToCommit(offset)),))


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def until_done(awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, 5)


def new_runtime(
    offsets_log: MemoryOffsetsLog, clock: ManualClock, **config: Any
) -> GroupCoordinatorRuntime:
    settings = {"initial_rebalance_delay_ms": 0, **config}
    return GroupCoordinatorRuntime(offsets_log, GroupConfig(**settings), clock, Random(7))


def test_join_sync_heartbeat_through_the_runtime() -> None:
    async def scenario() -> None:
        offsets_log, clock = MemoryOffsetsLog(), ManualClock()
        async with new_runtime(offsets_log, clock) as runtime:
            joined = await until_done(runtime.join_group(join_request()))
            assert joined.error is ErrorCode.none and joined.generation_id == 1
            synced = await until_done(
                runtime.sync_group(
                    SyncGroupRequest("g", 1, joined.member_id, None, ((joined.member_id, b"a"),))
                )
            )
            assert synced.assignment == b"a"
            partition = runtime.coordinator_partition("g")
            assert partition == partition_for("g", PARTITIONS)
            assert [p for p, _ in offsets_log.writes] == [partition]
            beat = await runtime.heartbeat(HeartbeatRequest("g", 1, joined.member_id, None))
            assert beat.error is ErrorCode.none

    run(scenario)


def test_initial_delay_and_session_expiry_follow_the_manual_clock() -> None:
    async def scenario() -> None:
        offsets_log, clock = MemoryOffsetsLog(), ManualClock()
        async with new_runtime(offsets_log, clock, initial_rebalance_delay_ms=3_000) as runtime:
            join = asyncio.ensure_future(runtime.join_group(join_request()))
            await settle()
            assert not join.done()
            clock.advance(3_000)
            runtime.wake()
            joined = await until_done(join)
            await runtime.sync_group(SyncGroupRequest("g", 1, joined.member_id, None, ()))
            clock.advance(10_000)
            runtime.wake()
            await settle()
            coordinator = runtime.coordinator(runtime.coordinator_partition("g"))
            assert coordinator is not None
            group = coordinator.group("g")
            assert group is not None and group.state.value == "Empty"

    run(scenario)


def test_commit_answers_after_the_append_and_appends_are_batched_in_order() -> None:
    async def scenario() -> None:
        offsets_log, clock = MemoryOffsetsLog(partition_count=1), ManualClock()
        async with new_runtime(offsets_log, clock) as runtime:
            offsets_log.gate = asyncio.Event()
            first = asyncio.ensure_future(runtime.commit_offsets(commit_request("a", 1)))
            await until_done(offsets_log.writing.wait())
            later = [
                asyncio.ensure_future(runtime.commit_offsets(commit_request(g, n)))
                for n, g in enumerate(["b", "c", "a"], start=2)
            ]
            await settle()
            assert not first.done()
            assert (await runtime.fetch_offsets("a", [T0])).offsets[0].offset == -1
            offsets_log.gate.set()
            for commit in [first, *later]:
                assert [e for _, e in (await until_done(commit)).errors] == [ErrorCode.none]
            assert [len(records) for _, records in offsets_log.writes] == [1, 3]
            assert (await runtime.fetch_offsets("a", [T0])).offsets[0].offset == 4
            assert (await runtime.fetch_offsets("b", None)).offsets[0].offset == 2

    run(scenario)


def test_failed_append_is_answered_with_kafkas_error() -> None:
    async def scenario() -> None:
        offsets_log, clock = MemoryOffsetsLog(), ManualClock()
        async with new_runtime(offsets_log, clock) as runtime:
            offsets_log.fail_with = NotLeaderOrFollower("moved")
            response = await until_done(runtime.commit_offsets(commit_request("a", 1)))
            assert [e for _, e in response.errors] == [ErrorCode.not_coordinator]
            assert (await runtime.fetch_offsets("a", None)).offsets == ()

    run(scenario)


def test_loading_replays_the_log_and_skips_unreadable_records() -> None:
    async def scenario() -> None:
        offsets_log, clock = MemoryOffsetsLog(), ManualClock()
        partition = partition_for("g", PARTITIONS)
        offsets_log.partitions[partition] += [
            (encode_key(OffsetCommitKey("g", "orders", 0)), encode_value(OffsetCommitValue(5))),
            (b"\x00\x09junk", b""),
            (encode_key(OffsetCommitKey("g", "orders", 0)), encode_value(OffsetCommitValue(6))),
        ]
        async with new_runtime(offsets_log, clock) as runtime:
            fetched = await runtime.fetch_offsets("g", None)
            assert [(f.partition, f.offset) for f in fetched.offsets] == [(T0, 6)]
            listed = await runtime.list_groups()
            assert [g.group_id for g in listed.groups] == ["g"]

    run(scenario)


def test_partitions_not_loaded_answer_not_coordinator_and_loading_ones_load_in_progress() -> None:
    async def scenario() -> None:
        offsets_log, clock = MemoryOffsetsLog(), ManualClock()
        slow = partition_for("slow", PARTITIONS)
        away = partition_for("away", PARTITIONS)
        assert slow != away
        record = (encode_key(OffsetCommitKey("slow", "t", 0)), encode_value(OffsetCommitValue(1)))
        offsets_log.partitions[slow] = [record] * (REPLAY_RECORDS_PER_YIELD * 3)
        runtime = new_runtime(offsets_log, clock)
        async with asyncio.TaskGroup() as tasks:
            await runtime.start(tasks, partitions=[])
            with pytest.raises(KafkaError) as raised:
                await runtime.fetch_offsets("away", None)
            assert raised.value.code is ErrorCode.not_coordinator
            loading = asyncio.ensure_future(runtime.load_partition(slow))
            await asyncio.sleep(0)
            with pytest.raises(KafkaError) as raised:
                await runtime.join_group(join_request("slow"))
            assert raised.value.code is ErrorCode.coordinator_load_in_progress
            assert (await runtime.list_groups()).error is ErrorCode.coordinator_load_in_progress
            await until_done(loading)
            assert (await runtime.fetch_offsets("slow", None)).offsets[0].offset == 1
            (described,) = await runtime.describe_groups(["away"])
            assert described.error is ErrorCode.not_coordinator
            deleted = await runtime.delete_groups(["away", "slow", "away"])
            assert deleted.errors == (("away", ErrorCode.not_coordinator), ("slow", ErrorCode.none))
            runtime.stop()

    run(scenario)


def test_unload_and_stop_fail_waiting_requests() -> None:
    async def scenario() -> None:
        offsets_log, clock = MemoryOffsetsLog(), ManualClock()
        runtime = new_runtime(offsets_log, clock, initial_rebalance_delay_ms=60_000)
        async with runtime:
            waiting = asyncio.ensure_future(runtime.join_group(join_request("g")))
            await settle()
            runtime.unload_partition(runtime.coordinator_partition("g"))
            with pytest.raises(KafkaError) as raised:
                await until_done(waiting)
            assert raised.value.code is ErrorCode.not_coordinator
            await runtime.load_partition(runtime.coordinator_partition("g"))
            waiting = asyncio.ensure_future(runtime.join_group(join_request("g")))
            await settle()
        with pytest.raises(KafkaError) as raised:
            await until_done(waiting)
        assert raised.value.code is ErrorCode.coordinator_not_available

    run(scenario)


def test_a_cancelled_request_does_not_disturb_the_others() -> None:
    async def scenario() -> None:
        offsets_log, clock = MemoryOffsetsLog(), ManualClock()
        async with new_runtime(offsets_log, clock, initial_rebalance_delay_ms=1_000) as runtime:
            gone = asyncio.ensure_future(runtime.join_group(join_request(client_id="gone")))
            stays = asyncio.ensure_future(runtime.join_group(join_request(client_id="stays")))
            await settle()
            gone.cancel()
            for _ in range(2):  # a second member joined: the delay is extended once
                clock.advance(1_000)
                runtime.wake()
                await settle()
            answer: JoinGroupResponse = await until_done(stays)
            assert answer.error is ErrorCode.none
            assert len(answer.members) in (0, 2)

    run(scenario)


def test_errors_come_from_the_error_table() -> None:
    assert for_code(ErrorCode.not_coordinator)("x").retriable
