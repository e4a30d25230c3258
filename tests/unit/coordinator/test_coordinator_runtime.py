"""The generic coordinator runtime, driven through a tiny shard of its own: named counters
whose additions are visible only once their record is in the log, and wake-up calls for
the timer. Real asyncio, a manual clock and an in-memory log: loading and replay,
NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS, append order and batching, replies only
after the append, failed appends, timers, unloading and stopping."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable

import pytest
from coordinator_helpers import MemoryCoordinatorLog, run, settle, until_done

from sluice.common.clock import ManualClock
from sluice.common.errors import (
    CorruptMessage,
    ErrorCode,
    KafkaError,
    NotLeaderOrFollower,
    for_code,
)
from sluice.coordinator.api import Append, Effect, Reply, RequestToken
from sluice.coordinator.runtime import (
    REPLAY_RECORDS_PER_YIELD,
    WRITE_BYTES_MAX,
    CoordinatorRuntime,
)


class CounterShard:
    """Counters by name. ``add`` writes the new value and answers it once committed (the
    error code if the write failed); ``read`` answers at once with committed values;
    ``wake_at`` answers when the clock reaches its deadline."""

    def __init__(self) -> None:
        self.counts: dict[bytes, int] = {}
        self.replayed: list[tuple[bytes, bytes | None]] = []
        self.loaded_at_ms: int | None = None
        self.completed: list[tuple[int, ErrorCode | None]] = []
        self._pending: dict[bytes, int] = {}
        self._in_flight: dict[int, tuple[RequestToken, bytes, int]] = {}
        self._append_ids = itertools.count(1)
        self._wake_ups: list[tuple[int, RequestToken]] = []

    def replay(self, key: bytes, value: bytes | None) -> None:
        if value is not None and not value.isdigit():
            raise CorruptMessage(f"not a count: {value!r}")
        self.replayed.append((key, value))
        if value is None:
            self.counts.pop(key, None)
        else:
            self.counts[key] = int(value)

    def load_completed(self, now_ms: int) -> None:
        self.loaded_at_ms = now_ms

    def next_deadline_ms(self) -> int | None:
        return self._wake_ups[0][0] if self._wake_ups else None

    def poll(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        while self._wake_ups and self._wake_ups[0][0] <= now_ms:
            _, token = heapq.heappop(self._wake_ups)
            effects.append(Reply(token, now_ms))
        return effects

    def append_completed(
        self, now_ms: int, append_id: int, error: ErrorCode | None
    ) -> list[Effect]:
        self.completed.append((append_id, error))
        token, name, value = self._in_flight.pop(append_id)
        if error is not None:
            self._pending.pop(name, None)
            return [Reply(token, error)]
        self.counts[name] = value
        return [Reply(token, value)]

    # ------------------------------------------------------------- operations

    def add(self, now_ms: int, token: RequestToken, name: bytes, amount: int) -> list[Effect]:
        value = self._pending.get(name, self.counts.get(name, 0)) + amount
        self._pending[name] = value
        append_id = next(self._append_ids)
        self._in_flight[append_id] = (token, name, value)
        return [Append(append_id, ((name, str(value).encode()),))]

    def read(self, now_ms: int, token: RequestToken, name: bytes) -> list[Effect]:
        return [Reply(token, self.counts.get(name, 0))]

    def wake_at(self, now_ms: int, token: RequestToken, deadline_ms: int) -> list[Effect]:
        heapq.heappush(self._wake_ups, (deadline_ms, token))
        return []


Runtime = CoordinatorRuntime[CounterShard]
Operation = Callable[[CounterShard, int, RequestToken], list[Effect]]


def new_runtime(coordinator_log: MemoryCoordinatorLog, clock: ManualClock) -> Runtime:
    return CoordinatorRuntime(coordinator_log, CounterShard, clock)


def add(name: bytes, amount: int = 1) -> Operation:
    return lambda shard, now, token: shard.add(now, token, name, amount)


def read(name: bytes) -> Operation:
    return lambda shard, now, token: shard.read(now, token, name)


def wake_at(deadline_ms: int) -> Operation:
    return lambda shard, now, token: shard.wake_at(now, token, deadline_ms)


def loaded(runtime: Runtime, partition: int) -> CounterShard:
    shard = runtime.shard(partition)
    assert shard is not None
    return shard


def test_loading_replays_every_record_and_skips_unreadable_ones() -> None:
    async def scenario() -> None:
        coordinator_log, clock = MemoryCoordinatorLog(), ManualClock()
        coordinator_log.partitions[2] += [(b"a", b"5"), (b"b", b"1"), (b"a", b"junk")]
        coordinator_log.partitions[2] += [(b"b", None), (b"a", b"7")]
        async with new_runtime(coordinator_log, clock) as runtime:
            assert runtime.loaded_partitions() == [0, 1, 2, 3]
            shard = loaded(runtime, 2)
            assert shard.replayed == [(b"a", b"5"), (b"b", b"1"), (b"b", None), (b"a", b"7")]
            assert shard.loaded_at_ms == clock.wall_ms()
            assert await runtime.call(2, read(b"a")) == 7
            assert await runtime.call(2, read(b"b")) == 0
            assert await runtime.call(1, read(b"a")) == 0

    run(scenario)


def test_partitions_not_here_answer_not_coordinator_and_loading_ones_load_in_progress() -> None:
    async def scenario() -> None:
        coordinator_log, clock = MemoryCoordinatorLog(), ManualClock()
        coordinator_log.partitions[1] = [(b"a", b"1")] * (REPLAY_RECORDS_PER_YIELD * 3)
        runtime = new_runtime(coordinator_log, clock)
        async with asyncio.TaskGroup() as tasks:
            await runtime.start(tasks, partitions=[])
            with pytest.raises(KafkaError) as raised:
                await runtime.call(1, read(b"a"))
            assert raised.value.code is ErrorCode.not_coordinator
            loading = asyncio.ensure_future(runtime.load_partition(1))
            await asyncio.sleep(0)
            assert runtime.is_loading and runtime.loaded_partitions() == []
            with pytest.raises(KafkaError) as raised:
                await runtime.call(1, add(b"a"))
            assert raised.value.code is ErrorCode.coordinator_load_in_progress
            with pytest.raises(KafkaError) as raised:
                runtime.loaded_shard(1)
            assert raised.value.code is ErrorCode.coordinator_load_in_progress
            await until_done(loading)
            assert not runtime.is_loading and runtime.loaded_partitions() == [1]
            assert await runtime.call(1, read(b"a")) == 1
            runtime.stop()

    run(scenario)


def test_unloading_during_the_load_abandons_it() -> None:
    async def scenario() -> None:
        coordinator_log, clock = MemoryCoordinatorLog(), ManualClock()
        coordinator_log.partitions[0] = [(b"a", b"1")] * (REPLAY_RECORDS_PER_YIELD * 3)
        runtime = new_runtime(coordinator_log, clock)
        async with asyncio.TaskGroup() as tasks:
            await runtime.start(tasks, partitions=[])
            loading = asyncio.ensure_future(runtime.load_partition(0))
            await asyncio.sleep(0)
            shard = loaded(runtime, 0)
            runtime.unload_partition(0)
            await until_done(loading)
            assert runtime.shard(0) is None and shard.loaded_at_ms is None
            runtime.stop()

    run(scenario)


def test_replies_wait_for_the_append_and_appends_are_written_in_order_batched() -> None:
    async def scenario() -> None:
        coordinator_log, clock = MemoryCoordinatorLog(partition_count=1), ManualClock()
        async with new_runtime(coordinator_log, clock) as runtime:
            coordinator_log.gate = asyncio.Event()
            first = asyncio.ensure_future(runtime.call(0, add(b"a")))
            await until_done(coordinator_log.writing.wait())
            later = [
                asyncio.ensure_future(runtime.call(0, add(name, 10))) for name in [b"b", b"a", b"a"]
            ]
            await settle()
            assert not first.done() and not any(f.done() for f in later)
            assert await runtime.call(0, read(b"a")) == 0  # not committed yet
            coordinator_log.gate.set()
            assert [await until_done(f) for f in [first, *later]] == [1, 10, 11, 21]
            assert coordinator_log.writes == [
                (0, [(b"a", b"1")]),
                (0, [(b"b", b"10"), (b"a", b"11"), (b"a", b"21")]),
            ]
            assert loaded(runtime, 0).completed == [(n, None) for n in [1, 2, 3, 4]]
            assert await runtime.call(0, read(b"a")) == 21

    run(scenario)


def test_one_write_holds_appends_up_to_the_byte_limit() -> None:
    async def scenario() -> None:
        coordinator_log, clock = MemoryCoordinatorLog(partition_count=1), ManualClock()
        name = b"n" * (WRITE_BYTES_MAX // 3)  # three such records exceed the limit
        async with new_runtime(coordinator_log, clock) as runtime:
            coordinator_log.gate = asyncio.Event()
            first = asyncio.ensure_future(runtime.call(0, add(b"a")))
            await until_done(coordinator_log.writing.wait())
            later = [asyncio.ensure_future(runtime.call(0, add(name))) for _ in range(5)]
            await settle()
            coordinator_log.gate.set()
            await until_done(asyncio.gather(first, *later))
            assert [len(records) for _, records in coordinator_log.writes] == [1, 2, 2, 1]

    run(scenario)


def test_a_failed_append_reaches_the_shard_and_the_writer_carries_on() -> None:
    async def scenario() -> None:
        coordinator_log, clock = MemoryCoordinatorLog(), ManualClock()
        async with new_runtime(coordinator_log, clock) as runtime:
            coordinator_log.fail_with = NotLeaderOrFollower("moved")
            assert await until_done(runtime.call(3, add(b"a"))) is ErrorCode.not_leader_or_follower
            assert loaded(runtime, 3).completed == [(1, ErrorCode.not_leader_or_follower)]
            assert await runtime.call(3, read(b"a")) == 0
            coordinator_log.fail_with = None
            assert await until_done(runtime.call(3, add(b"a"))) == 1
            assert coordinator_log.partitions[3] == [(b"a", b"1")]

    run(scenario)


def test_the_timer_fires_when_the_manual_clock_reaches_the_deadline() -> None:
    async def scenario() -> None:
        coordinator_log, clock = MemoryCoordinatorLog(), ManualClock()
        start_ms = clock.wall_ms()
        async with new_runtime(coordinator_log, clock) as runtime:
            late = asyncio.ensure_future(runtime.call(0, wake_at(start_ms + 2_000)))
            early = asyncio.ensure_future(runtime.call(1, wake_at(start_ms + 1_000)))
            await settle()
            clock.advance(999)
            runtime.wake()
            await settle()
            assert not early.done() and not late.done()
            clock.advance(1)
            runtime.wake()
            assert await until_done(early) == start_ms + 1_000
            await settle()
            assert not late.done()
            clock.advance(5_000)
            runtime.wake()
            assert await until_done(late) == start_ms + 6_000

    run(scenario)


def test_unload_fails_waiting_requests_with_not_coordinator_and_stop_with_not_available() -> None:
    async def scenario() -> None:
        coordinator_log, clock = MemoryCoordinatorLog(), ManualClock()
        runtime = new_runtime(coordinator_log, clock)
        async with runtime:
            waiting = asyncio.ensure_future(runtime.call(1, wake_at(clock.wall_ms() + 60_000)))
            other = asyncio.ensure_future(runtime.call(2, wake_at(clock.wall_ms() + 60_000)))
            coordinator_log.gate = asyncio.Event()
            writing = asyncio.ensure_future(runtime.call(1, add(b"a")))
            await settle()
            shard = loaded(runtime, 1)
            runtime.unload_partition(1)
            for future in [waiting, writing]:
                with pytest.raises(KafkaError) as raised:
                    await until_done(future)
                assert raised.value.code is ErrorCode.not_coordinator
            assert not other.done()
            coordinator_log.gate.set()
            await settle()
            assert shard.completed == [] and coordinator_log.writes == []  # the writer stopped
            await runtime.load_partition(1)
            assert await runtime.call(1, read(b"a")) == 0
        with pytest.raises(KafkaError) as raised:
            await until_done(other)
        assert raised.value.code is ErrorCode.coordinator_not_available

    run(scenario)


def test_a_cancelled_request_does_not_disturb_the_others() -> None:
    async def scenario() -> None:
        coordinator_log, clock = MemoryCoordinatorLog(), ManualClock()
        async with new_runtime(coordinator_log, clock) as runtime:
            gone = asyncio.ensure_future(runtime.call(0, wake_at(clock.wall_ms() + 1_000)))
            stays = asyncio.ensure_future(runtime.call(0, wake_at(clock.wall_ms() + 1_000)))
            await settle()
            gone.cancel()
            clock.advance(1_000)
            runtime.wake()
            assert await until_done(stays) == clock.wall_ms()
            assert gone.cancelled()

    run(scenario)


def test_the_runtimes_errors_are_retriable() -> None:
    for code in [ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress]:
        assert for_code(code)("x").retriable
