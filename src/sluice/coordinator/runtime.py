"""The asyncio runtime around a coordinator's shards: loading, I/O, timers and ordering.

One shard per partition of the coordinator's topic (Kafka's coordinator shards), each a
:class:`~sluice.coordinator.api.CoordinatorShard`. A coordinator's own runtime layer
(``group.runtime``, …) routes each request to its partition and hands it in as an
operation on the shard::

    layer ──await call(partition, op)──▶ runtime ──op(shard, now, token)──▶ shard
                                            │ ◀──────── [Reply(t, resp), Append(id, records)]
        ◀── resp (its Reply may come now    │ Reply  → resolves the waiting request's future
            or much later)                  │ Append → the partition's writer queue
                                            ▼
                   writer (one task per partition, appends in order, several at once)
                        await log.append(partition, records)      # committed, or KafkaError
                        shard.append_completed(now, id, error) → more effects
                   timer task (one): sleeps until the earliest next_deadline_ms() of all
                        shards (or until woken), then poll(now) → effects
                   Task → a task per effect: await run_task(partition, task), then
                        shard.task_completed(now, id, result) → more effects

Each partition goes through::

    (not here) ──load_partition──▶ loading ──replayed──▶ loaded ──unload_partition──▶ (not here)
                                      │  replay(key, value) for every record, yielding to
                                      │  the loop every REPLAY_RECORDS_PER_YIELD; then
                                      │  load_completed(now) and the writer starts
                                      └──unload_partition──▶ (not here)
    loaded ──the shard returns Reload──▶ dropped, then loading again into a new shard

A request for a partition not here raises NOT_COORDINATOR; for one loading,
COORDINATOR_LOAD_IN_PROGRESS (both retriable: clients look the coordinator up again).
Unloading fails the partition's waiting requests with NOT_COORDINATOR, stopping fails
every waiting request with COORDINATOR_NOT_AVAILABLE, reloading (a shard's
:class:`~sluice.coordinator.api.Reload`) with COORDINATOR_LOAD_IN_PROGRESS.

- Shards are synchronous, so one operation never interleaves with another on the event
  loop; each partition's appends are written and completed in the order the shard
  produced them (what the shard relies on).
- Time comes from the injected clock (wall-clock milliseconds, never going backwards
  as far as the shards can tell); after moving a manual clock, call :meth:`wake`.
- Tasks (the timer and the writers) live in a TaskGroup: the caller's
  (:meth:`start`) or the runtime's own (``async with``). A failing task is a bug and
  takes the TaskGroup down (nothing is fire-and-forget); a failed append is not: the
  shard is told and answers with the right error.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Generic, Self, TypeVar

from sluice.common.clock import SYSTEM_CLOCK, Clock
from sluice.common.errors import ErrorCode, KafkaError, for_code
from sluice.coordinator.api import (
    Append,
    CoordinatorLog,
    CoordinatorShard,
    Effect,
    Reload,
    Reply,
    RequestToken,
    Task,
    TransactionalRecord,
    TransactionMarker,
)

log = logging.getLogger(__name__)

WRITE_BYTES_MAX = 1024 * 1024
"""Several queued appends of one partition go to the log in one write up to this many
bytes of keys and values (an append larger than this goes alone), so a burst of commits
costs one replicated write, not one each."""

REPLAY_RECORDS_PER_YIELD = 1_000
"""Records replayed between two yields to the event loop while loading a partition, so
a long load does not stall everyone else."""

ShardT = TypeVar("ShardT", bound=CoordinatorShard)

TaskRunner = Callable[[int, Task], Awaitable[object]]
"""Runs a shard's :class:`Task` for its partition and returns the result handed to
``task_completed``. It must not raise for operating errors: it returns them."""

Operation = Callable[[ShardT, int, RequestToken], list[Effect]]
"""A request handed to a shard: called with (shard, now_ms, token), returns its effects;
one of them, now or later, is the :class:`Reply` to ``token``."""


def _record_bytes(append: Append) -> int:
    return sum(len(key) + len(value or b"") for key, value in append.records)


class _Partition(Generic[ShardT]):
    """One partition's shard, whether it is loaded yet, and its writer."""

    def __init__(self, partition: int, shard: ShardT) -> None:
        self.partition = partition
        self.shard = shard
        self.loaded = False
        self.appends: collections.deque[Append] = collections.deque()
        self.has_appends = asyncio.Event()
        self.writer: asyncio.Task[None] | None = None


class CoordinatorRuntime(Generic[ShardT]):
    """Runs the shards of the partitions this broker leads over a :class:`CoordinatorLog`.
    ``new_shard`` makes an empty shard each time a partition is loaded."""

    def __init__(
        self,
        coordinator_log: CoordinatorLog,
        new_shard: Callable[[], ShardT],
        clock: Clock = SYSTEM_CLOCK,
        run_task: TaskRunner | None = None,
    ) -> None:
        self._log = coordinator_log
        self._new_shard = new_shard
        self._run_task = run_task
        self._clock = clock
        self._partitions: dict[int, _Partition[ShardT]] = {}
        self._tokens = itertools.count(1)
        self._waiting: dict[RequestToken, tuple[int, asyncio.Future[object]]] = {}
        self._wake_event = asyncio.Event()
        self._timer_target_ms: int | None = None
        self._last_now_ms = 0
        self._tasks: asyncio.TaskGroup | None = None
        self._own_tasks: asyncio.TaskGroup | None = None
        self._timer: asyncio.Task[None] | None = None

    # =============================================================== lifecycle

    async def __aenter__(self) -> Self:
        self._own_tasks = asyncio.TaskGroup()
        await self._own_tasks.__aenter__()
        try:
            await self.start(self._own_tasks)
        except BaseException as e:
            self.stop()
            await self._own_tasks.__aexit__(type(e), e, e.__traceback__)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
        assert self._own_tasks is not None
        await self._own_tasks.__aexit__(exc_type, exc, traceback)

    async def start(
        self, tasks: asyncio.TaskGroup, partitions: Iterable[int] | None = None
    ) -> None:
        """Load ``partitions`` (default: all) and start the timer; tasks go in ``tasks``."""
        assert self._tasks is None, "started once"
        self._tasks = tasks
        self._timer = tasks.create_task(
            self._run_timers(), name=f"coordinator-timers-{self._log.topic}"
        )
        for partition in range(self._log.partition_count) if partitions is None else partitions:
            await self.load_partition(partition)

    def stop(self) -> None:
        """Stop the tasks; waiting requests fail with COORDINATOR_NOT_AVAILABLE."""
        if self._timer is not None:
            self._timer.cancel()
        for partition in list(self._partitions):
            self._drop(partition, ErrorCode.coordinator_not_available)

    async def load_partition(self, partition: int) -> None:
        """Become the partition's coordinator: replay its records into a new shard."""
        assert self._tasks is not None, "start() first"
        assert 0 <= partition < self._log.partition_count
        if partition in self._partitions:
            return
        hosted = self._partitions[partition] = _Partition(partition, self._new_shard())
        replayed = corrupt = 0
        for item in self._log.read(partition):
            try:
                if isinstance(item, TransactionalRecord):
                    hosted.shard.replay_transactional(item.producer_id, item.key, item.value)
                elif isinstance(item, TransactionMarker):
                    hosted.shard.replay_marker(item.producer_id, item.committed)
                else:
                    hosted.shard.replay(*item)
            except KafkaError as e:
                corrupt += 1
                log.warning("%s-%d: skipping a record: %s", self._log.topic, partition, e)
            replayed += 1
            if replayed % REPLAY_RECORDS_PER_YIELD == 0:
                await asyncio.sleep(0)
                if self._partitions.get(partition) is not hosted:
                    return  # unloaded meanwhile
        hosted.shard.load_completed(self._now_ms())
        hosted.loaded = True
        hosted.writer = self._tasks.create_task(
            self._write(hosted), name=f"coordinator-writer-{self._log.topic}-{partition}"
        )
        log.log(
            logging.WARNING if corrupt else logging.DEBUG,
            "%s-%d: loaded %d record(s) (%d unreadable)",
            self._log.topic,
            partition,
            replayed,
            corrupt,
        )
        self._maybe_wake(hosted)

    def unload_partition(self, partition: int) -> None:
        """Stop coordinating the partition (leadership moved away); its waiting requests
        fail with NOT_COORDINATOR."""
        self._drop(partition, ErrorCode.not_coordinator)

    async def _reload(self, hosted: _Partition[ShardT], reason: str) -> None:
        """Replay the partition into a new shard (its shard asked: :class:`Reload`),
        unless it was unloaded or reloaded meanwhile."""
        partition = hosted.partition
        if self._partitions.get(partition) is not hosted:
            return
        log.warning("%s-%d: reloading: %s", self._log.topic, partition, reason)
        self._drop(partition, ErrorCode.coordinator_load_in_progress)
        await self.load_partition(partition)

    def _drop(self, partition: int, error: ErrorCode) -> None:
        hosted = self._partitions.pop(partition, None)
        if hosted is None:
            return
        if hosted.writer is not None:
            hosted.writer.cancel()
        for token, (waiting_partition, future) in list(self._waiting.items()):
            if waiting_partition == partition:
                del self._waiting[token]
                if not future.done():
                    future.set_exception(for_code(error)(f"{self._log.topic}-{partition}"))

    def wake(self) -> None:
        """Make the timer task look at the clock again (tests move a manual clock)."""
        self._wake_event.set()

    # ================================================================ lookups

    @property
    def partition_count(self) -> int:
        return self._log.partition_count

    def loaded_partitions(self) -> list[int]:
        return sorted(p for p, hosted in self._partitions.items() if hosted.loaded)

    def hosted_partitions(self) -> list[int]:
        """The partitions here, loaded or (re)loading."""
        return sorted(self._partitions)

    @property
    def is_loading(self) -> bool:
        """Some partition is still being replayed."""
        return any(not hosted.loaded for hosted in self._partitions.values())

    def shard(self, partition: int) -> ShardT | None:
        """A partition's shard, loaded or not, for diagnostics and tests."""
        hosted = self._partitions.get(partition)
        return hosted.shard if hosted is not None else None

    def loaded_shard(self, partition: int) -> ShardT:
        """The partition's shard, for reads that need no log write. Raises
        NOT_COORDINATOR if the partition is not here, COORDINATOR_LOAD_IN_PROGRESS if it
        is still loading."""
        return self._loaded(partition).shard

    def _loaded(self, partition: int) -> _Partition[ShardT]:
        hosted = self._partitions.get(partition)
        if hosted is None:
            raise for_code(ErrorCode.not_coordinator)(
                f"{self._log.topic}-{partition} is not led here"
            )
        if not hosted.loaded:
            raise for_code(ErrorCode.coordinator_load_in_progress)(
                f"{self._log.topic}-{partition} is loading"
            )
        return hosted

    # ============================================================== operations

    async def call(self, partition: int, operation: Operation[ShardT]) -> object:
        """Hand ``operation`` to the partition's shard and return the response of its
        :class:`Reply` (which may come at once or much later). Raises as
        :meth:`loaded_shard`, and NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE when the
        partition is unloaded or the runtime stops before the reply."""
        hosted = self._loaded(partition)
        token = next(self._tokens)
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._waiting[token] = (partition, future)
        try:
            self._dispatch(hosted, operation(hosted.shard, self._now_ms(), token))
            return await future
        finally:
            self._waiting.pop(token, None)

    # ================================================================ plumbing

    def _now_ms(self) -> int:
        self._last_now_ms = max(self._last_now_ms, self._clock.wall_ms())
        return self._last_now_ms

    def _dispatch(self, hosted: _Partition[ShardT], effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Reply):
                entry = self._waiting.pop(effect.token, None)
                if entry is not None and not entry[1].done():
                    entry[1].set_result(effect.response)
            elif isinstance(effect, Task):
                assert self._run_task is not None, "a shard with tasks needs a task runner"
                assert self._tasks is not None
                self._tasks.create_task(
                    self._complete_task(hosted, effect),
                    name=f"coordinator-task-{self._log.topic}-{hosted.partition}",
                )
            elif isinstance(effect, Reload):
                assert self._tasks is not None
                self._tasks.create_task(
                    self._reload(hosted, effect.reason),
                    name=f"coordinator-reload-{self._log.topic}-{hosted.partition}",
                )
            else:
                assert effect.records, "appends carry records"
                hosted.appends.append(effect)
                hosted.has_appends.set()
        self._maybe_wake(hosted)

    def _maybe_wake(self, hosted: _Partition[ShardT]) -> None:
        deadline = hosted.shard.next_deadline_ms()
        if deadline is not None and (
            self._timer_target_ms is None or deadline < self._timer_target_ms
        ):
            self._wake_event.set()

    async def _complete_task(self, hosted: _Partition[ShardT], task: Task) -> None:
        assert self._run_task is not None
        result = await self._run_task(hosted.partition, task)
        if self._partitions.get(hosted.partition) is hosted:
            now_ms = self._now_ms()
            self._dispatch(hosted, hosted.shard.task_completed(now_ms, task.task_id, result))

    async def _write(self, hosted: _Partition[ShardT]) -> None:
        """Write the partition's appends in order, several per log write (a
        transactional append goes alone: its batch carries its producer)."""
        while True:
            await hosted.has_appends.wait()
            batch = [hosted.appends.popleft()]
            size = _record_bytes(batch[0])
            while (
                batch[0].transaction is None
                and hosted.appends
                and hosted.appends[0].transaction is None
                and size + _record_bytes(hosted.appends[0]) <= WRITE_BYTES_MAX
            ):
                size += _record_bytes(hosted.appends[0])
                batch.append(hosted.appends.popleft())
            if not hosted.appends:
                hosted.has_appends.clear()
            error: ErrorCode | None = None
            try:
                await self._log.append(
                    hosted.partition,
                    [record for append in batch for record in append.records],
                    batch[0].transaction,
                )
            except KafkaError as e:
                log.warning("%s-%d: append failed: %s", self._log.topic, hosted.partition, e)
                error = e.code
            if self._partitions.get(hosted.partition) is not hosted:
                return
            now_ms = self._now_ms()
            for append in batch:
                self._dispatch(
                    hosted, hosted.shard.append_completed(now_ms, append.append_id, error)
                )

    async def _run_timers(self) -> None:
        while True:
            self._wake_event.clear()
            now_ms = self._now_ms()
            target: int | None = None
            for hosted in list(self._partitions.values()):
                if not hosted.loaded:
                    continue
                deadline = hosted.shard.next_deadline_ms()
                if deadline is not None and deadline <= now_ms:
                    self._dispatch(hosted, hosted.shard.poll(now_ms))
                    deadline = hosted.shard.next_deadline_ms()
                if deadline is not None and (target is None or deadline < target):
                    target = deadline
            self._timer_target_ms = target
            if self._wake_event.is_set():
                continue
            timeout_s = None if target is None else max(0, target - now_ms) / 1000
            # asyncio.timeout, not wait_for, which on Python 3.11 can lose a cancellation
            # that comes as the event is set: then this loop never ends (cpython#86296).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._wake_event.wait()
