"""The group runtime on the generic coordinator runtime: each group routed to its
``__consumer_offsets`` partition, group operations through the runtime's loading, timers
and writer, and NOT_COORDINATOR per group. The runtime's own scheduling is tested with a
shard of its own (``test_coordinator_runtime``). The offsets log is an in-memory fake
here; the broker's real ``__consumer_offsets`` path is tested with real clients in the
integration suite."""

from __future__ import annotations

import asyncio
from random import Random
from typing import Any

import pytest
from coordinator_helpers import PARTITIONS, MemoryCoordinatorLog, run, settle, until_done

from sluice.common.clock import ManualClock
from sluice.common.errors import ErrorCode, KafkaError, NotLeaderOrFollower
from sluice.common.ids import TopicPartition
from sluice.coordinator.api import TransactionalRecord
from sluice.coordinator.placement import partition_for
from sluice.coordinator.runtime import REPLAY_RECORDS_PER_YIELD
from sluice.group.api import (
    HeartbeatRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetToCommit,
    SyncGroupRequest,
)
from sluice.group.config import OFFSETS_TOPIC, GroupConfig
from sluice.group.records import OffsetCommitKey, OffsetCommitValue, encode_key
from sluice.group.records import encode_offset_commit_value as encode_value
from sluice.group.runtime import GroupCoordinatorRuntime

T0 = TopicPartition("orders", 0)


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


def new_offsets_log(partition_count: int = PARTITIONS) -> MemoryCoordinatorLog:
    return MemoryCoordinatorLog(partition_count, OFFSETS_TOPIC)


def new_runtime(
    offsets_log: MemoryCoordinatorLog, clock: ManualClock, **config: Any
) -> GroupCoordinatorRuntime:
    settings = {"initial_rebalance_delay_ms": 0, **config}
    return GroupCoordinatorRuntime(offsets_log, GroupConfig(**settings), clock, Random(7))


def test_join_sync_heartbeat_through_the_runtime() -> None:
    async def scenario() -> None:
        offsets_log, clock = new_offsets_log(), ManualClock()
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
        offsets_log, clock = new_offsets_log(), ManualClock()
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
            coordinator = runtime.shard(runtime.coordinator_partition("g"))
            assert coordinator is not None
            group = coordinator.group("g")
            assert group is not None and group.state.value == "Empty"

    run(scenario)


def test_commit_answers_after_the_append_and_appends_are_batched_in_order() -> None:
    async def scenario() -> None:
        offsets_log, clock = new_offsets_log(partition_count=1), ManualClock()
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
        offsets_log, clock = new_offsets_log(), ManualClock()
        async with new_runtime(offsets_log, clock) as runtime:
            offsets_log.fail_with = NotLeaderOrFollower("moved")
            response = await until_done(runtime.commit_offsets(commit_request("a", 1)))
            assert [e for _, e in response.errors] == [ErrorCode.not_coordinator]
            assert (await runtime.fetch_offsets("a", None)).offsets == ()

    run(scenario)


def test_loading_replays_the_log_and_skips_unreadable_records() -> None:
    async def scenario() -> None:
        offsets_log, clock = new_offsets_log(), ManualClock()
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
        offsets_log, clock = new_offsets_log(), ManualClock()
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


def test_transactional_offsets_through_the_runtime_and_a_reload() -> None:
    """TxnOffsetCommit is written as the producer's transactional batch and stays
    pending until its marker; a coordinator that loads the partition rebuilds the same
    state from the batches and markers in the log."""

    async def scenario() -> None:
        offsets_log, clock = new_offsets_log(), ManualClock()
        partition = partition_for("g", PARTITIONS)

        async def stable_offset(runtime: GroupCoordinatorRuntime) -> tuple[int, ErrorCode]:
            (f,) = (await runtime.fetch_offsets("g", [T0], require_stable=True)).offsets
            return f.offset, f.error

        async with new_runtime(offsets_log, clock) as runtime:
            for producer_id, offset in ((7, 10), (8, 20)):
                response = await until_done(
                    runtime.commit_transactional_offsets(
                        commit_request("g", offset), producer_id, 0
                    )
                )
                assert [e for _, e in response.errors] == [ErrorCode.none]
            logged = offsets_log.read(partition)
            assert [r.producer_id for r in logged if isinstance(r, TransactionalRecord)] == [7, 8]
            assert await stable_offset(runtime) == (-1, ErrorCode.unstable_offset_commit)
            offsets_log.write_marker(partition, 7, committed=True)
            await until_done(runtime.complete_transaction(partition, 7, True))
            assert await stable_offset(runtime) == (-1, ErrorCode.unstable_offset_commit)
            (f,) = (await runtime.fetch_offsets("g", [T0])).offsets
            assert f.offset == 10, "producer 7's offset is committed; 8's still pending"
        async with new_runtime(offsets_log, clock) as reloaded:
            assert await stable_offset(reloaded) == (-1, ErrorCode.unstable_offset_commit)
            offsets_log.write_marker(partition, 8, committed=False)
            await until_done(reloaded.complete_transaction(partition, 8, False))
            assert await stable_offset(reloaded) == (10, ErrorCode.none)
        async with new_runtime(offsets_log, clock) as again:
            assert await stable_offset(again) == (10, ErrorCode.none)

    run(scenario)
