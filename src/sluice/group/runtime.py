"""The asyncio runtime around the group coordinators: I/O, timers, and ordering.

One :class:`~sluice.group.coordinator.GroupCoordinator` per ``__consumer_offsets``
partition (Kafka's coordinator shards). The runtime::

    handler ──await join_group(req)──▶ runtime ──join_group(now, token, req)──▶ coordinator
                                          │ ◀──────── [Reply(t, resp), Append(id, records)]
        ◀── resp (its Reply may come now  │ Reply  → resolves the waiting request's future
            or much later)                │ Append → the partition's writer queue
                                          ▼
                   writer (one task per partition, appends in order, several at once)
                        await log.append(partition, records)      # committed, or KafkaError
                        coordinator.append_completed(now, id, error) → more effects
                   timer task (one): sleeps until the earliest next_deadline_ms() of all
                        coordinators (or until woken), then poll(now) → effects

- The coordinators are synchronous, so one operation never interleaves with another
  on the event loop; each partition's appends are written and completed in the order
  the coordinator produced them (what the coordinator relies on).
- Time comes from the injected clock (wall-clock milliseconds, never going backwards
  as far as the coordinators can tell); after moving a manual clock, call :meth:`wake`.
- Tasks (the timer and the writers) live in a TaskGroup: the caller's
  (:meth:`start`) or the runtime's own (``async with``). A failing task is a bug and
  takes the TaskGroup down (nothing is fire-and-forget); a failed append is not: the coordinator is
  told and answers with the right error.

Requests for a partition this broker has not loaded raise NOT_COORDINATOR; while one
is loading, COORDINATOR_LOAD_IN_PROGRESS (both retriable: clients look the coordinator
up again).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from random import Random
from types import TracebackType
from typing import Protocol, Self, TypeVar

from sluice.common.clock import SYSTEM_CLOCK, Clock
from sluice.common.errors import ErrorCode, KafkaError, for_code
from sluice.common.ids import TopicPartition
from sluice.group.api import (
    Append,
    DeleteGroupsResponse,
    Effect,
    GroupDescription,
    GroupListing,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    Record,
    Reply,
    RequestToken,
    Response,
    SyncGroupRequest,
    SyncGroupResponse,
)
from sluice.group.config import GroupConfig
from sluice.group.coordinator import GroupCoordinator
from sluice.group.placement import partition_for

log = logging.getLogger(__name__)

WRITE_BYTES_MAX = 1024 * 1024
"""Several queued appends of one partition go to the log in one write up to this many
bytes of keys and values (an append larger than this goes alone), so a burst of commits
costs one replicated write, not one each."""

REPLAY_RECORDS_PER_YIELD = 1_000
"""Records replayed between two yields to the event loop while loading a partition, so
a long load does not stall everyone else."""

Operation = Callable[[GroupCoordinator, int, RequestToken], list[Effect]]


_ResponseT = TypeVar("_ResponseT")


class OffsetsLog(Protocol):
    """The ``__consumer_offsets`` partitions, as the broker provides them."""

    @property
    def partition_count(self) -> int:
        """Partitions of the topic; fixed for the life of the cluster."""
        ...

    async def append(self, partition: int, records: Sequence[Record]) -> None:
        """Append the records (key, value or None for a tombstone) as one batch and
        return once they are committed (the high watermark is past them). Raise a
        KafkaError (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, …)
        if they were not; the coordinator maps it to the error clients expect."""
        ...

    def read(self, partition: int) -> Iterable[Record]:
        """Every record now in the partition, in offset order (for loading)."""
        ...


def _record_bytes(append: Append) -> int:
    return sum(len(key) + len(value or b"") for key, value in append.records)


class _Shard:
    """One partition's coordinator and its writer."""

    def __init__(self, partition: int, coordinator: GroupCoordinator) -> None:
        self.partition = partition
        self.coordinator = coordinator
        self.loaded = False
        self.appends: collections.deque[Append] = collections.deque()
        self.has_appends = asyncio.Event()
        self.writer: asyncio.Task[None] | None = None


class GroupCoordinatorRuntime:
    """Runs the group coordinators of this broker over an :class:`OffsetsLog`."""

    def __init__(
        self,
        offsets_log: OffsetsLog,
        config: GroupConfig | None = None,
        clock: Clock = SYSTEM_CLOCK,
        random: Random | None = None,
    ) -> None:
        self._log = offsets_log
        self._config = config if config is not None else GroupConfig()
        self._clock = clock
        self._random = random if random is not None else Random()
        self._shards: dict[int, _Shard] = {}
        self._tokens = itertools.count(1)
        self._waiting: dict[RequestToken, tuple[int, asyncio.Future[Response]]] = {}
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
        self._timer = tasks.create_task(self._run_timers(), name="group-coordinator-timers")
        loaded = list(range(self._log.partition_count) if partitions is None else partitions)
        for partition in loaded:
            await self.load_partition(partition)
        shards = [self._shards[p] for p in loaded if p in self._shards]
        log.info(
            "group coordinator loaded %d group(s) from %d __consumer_offsets partition(s)",
            sum(len(shard.coordinator.list_groups()) for shard in shards),
            len(shards),
        )

    def stop(self) -> None:
        """Stop the tasks; waiting requests fail with COORDINATOR_NOT_AVAILABLE."""
        if self._timer is not None:
            self._timer.cancel()
        for partition in list(self._shards):
            self._drop_shard(partition, ErrorCode.coordinator_not_available)

    async def load_partition(self, partition: int) -> None:
        """Become the coordinator of the partition's groups: replay its records."""
        assert self._tasks is not None, "start() first"
        assert 0 <= partition < self._log.partition_count
        if partition in self._shards:
            return
        coordinator = GroupCoordinator(self._config, Random(self._random.getrandbits(64)))
        shard = self._shards[partition] = _Shard(partition, coordinator)
        replayed = corrupt = 0
        for key, value in self._log.read(partition):
            try:
                coordinator.replay(key, value)
            except KafkaError as e:
                corrupt += 1
                log.warning("__consumer_offsets-%d: skipping a record: %s", partition, e)
            replayed += 1
            if replayed % REPLAY_RECORDS_PER_YIELD == 0:
                await asyncio.sleep(0)
                if self._shards.get(partition) is not shard:
                    return  # unloaded meanwhile
        coordinator.load_completed(self._now_ms())
        shard.loaded = True
        shard.writer = self._tasks.create_task(
            self._write(shard), name=f"group-coordinator-writer-{partition}"
        )
        log.log(
            logging.WARNING if corrupt else logging.DEBUG,
            "__consumer_offsets-%d: loaded %d record(s) (%d unreadable)",
            partition,
            replayed,
            corrupt,
        )
        self._maybe_wake(shard)

    def unload_partition(self, partition: int) -> None:
        """Stop coordinating the partition's groups (leadership moved away); their
        waiting requests fail with NOT_COORDINATOR."""
        self._drop_shard(partition, ErrorCode.not_coordinator)

    def _drop_shard(self, partition: int, error: ErrorCode) -> None:
        shard = self._shards.pop(partition, None)
        if shard is None:
            return
        if shard.writer is not None:
            shard.writer.cancel()
        for token, (waiting_partition, future) in list(self._waiting.items()):
            if waiting_partition == partition:
                del self._waiting[token]
                if not future.done():
                    future.set_exception(for_code(error)(f"__consumer_offsets-{partition}"))

    def wake(self) -> None:
        """Make the timer task look at the clock again (tests move a manual clock)."""
        self._wake_event.set()

    # ================================================================ lookups

    @property
    def partition_count(self) -> int:
        return self._log.partition_count

    def coordinator_partition(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition whose leader coordinates ``group_id``."""
        return partition_for(group_id, self._log.partition_count)

    def loaded_partitions(self) -> list[int]:
        return sorted(p for p, shard in self._shards.items() if shard.loaded)

    def coordinator(self, partition: int) -> GroupCoordinator | None:
        """A partition's state machine, for diagnostics and tests."""
        shard = self._shards.get(partition)
        return shard.coordinator if shard is not None else None

    def _shard_for(self, group_id: str) -> _Shard:
        partition = self.coordinator_partition(group_id)
        shard = self._shards.get(partition)
        if shard is None:
            raise for_code(ErrorCode.not_coordinator)(
                f"group {group_id!r} belongs to __consumer_offsets-{partition}, not led here"
            )
        if not shard.loaded:
            raise for_code(ErrorCode.coordinator_load_in_progress)(
                f"__consumer_offsets-{partition} is loading"
            )
        return shard

    # ============================================================== operations

    async def join_group(self, request: JoinGroupRequest) -> JoinGroupResponse:
        return await self._call_for(
            JoinGroupResponse,
            request.group_id,
            lambda c, now, token: c.join_group(now, token, request),
        )

    async def sync_group(self, request: SyncGroupRequest) -> SyncGroupResponse:
        return await self._call_for(
            SyncGroupResponse,
            request.group_id,
            lambda c, now, token: c.sync_group(now, token, request),
        )

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        return await self._call_for(
            HeartbeatResponse,
            request.group_id,
            lambda c, now, token: c.heartbeat(now, token, request),
        )

    async def leave_group(self, request: LeaveGroupRequest) -> LeaveGroupResponse:
        return await self._call_for(
            LeaveGroupResponse,
            request.group_id,
            lambda c, now, token: c.leave_group(now, token, request),
        )

    async def commit_offsets(self, request: OffsetCommitRequest) -> OffsetCommitResponse:
        return await self._call_for(
            OffsetCommitResponse,
            request.group_id,
            lambda c, now, token: c.commit_offsets(now, token, request),
        )

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> OffsetDeleteResponse:
        return await self._call_for(
            OffsetDeleteResponse,
            group_id,
            lambda c, now, token: c.delete_offsets(now, token, group_id, partitions),
        )

    async def fetch_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition] | None
    ) -> OffsetFetchResponse:
        """Committed offsets; ``partitions`` None means every partition of the group."""
        return self._shard_for(group_id).coordinator.fetch_offsets(group_id, partitions)

    async def describe_groups(self, group_ids: Sequence[str]) -> tuple[GroupDescription, ...]:
        descriptions = []
        for group_id in group_ids:
            try:
                shard = self._shard_for(group_id)
            except KafkaError as e:
                descriptions.append(GroupDescription(group_id, e.code, ""))
                continue
            descriptions.extend(shard.coordinator.describe_groups([group_id]))
        return tuple(descriptions)

    async def list_groups(self, states: Iterable[str] | None = None) -> ListGroupsResponse:
        """Groups of every loaded partition, sorted by id."""
        wanted = None if states is None else list(states)
        groups: list[GroupListing] = []
        loading = False
        for shard in self._shards.values():
            if not shard.loaded:
                loading = True
                continue
            groups.extend(shard.coordinator.list_groups(wanted))
        error = ErrorCode.coordinator_load_in_progress if loading else ErrorCode.none
        return ListGroupsResponse(error, tuple(sorted(groups, key=lambda g: g.group_id)))

    async def delete_groups(self, group_ids: Sequence[str]) -> DeleteGroupsResponse:
        """Each group on its own coordinator; the answer lists each group once, in
        request order."""
        requested = list(dict.fromkeys(group_ids))
        errors: dict[str, ErrorCode] = {}
        by_partition: dict[int, list[str]] = {}
        for group_id in requested:
            try:
                shard = self._shard_for(group_id)
            except KafkaError as e:
                errors[group_id] = e.code
                continue
            by_partition.setdefault(shard.partition, []).append(group_id)

        async def delete_on(partition: int, ids: list[str]) -> Response:
            shard = self._shards[partition]
            return await self._call_shard(
                shard, lambda c, now, token: c.delete_groups(now, token, ids)
            )

        responses = await asyncio.gather(
            *(delete_on(partition, ids) for partition, ids in by_partition.items())
        )
        for response in responses:
            assert isinstance(response, DeleteGroupsResponse)
            errors.update(response.errors)
        return DeleteGroupsResponse(tuple((group_id, errors[group_id]) for group_id in requested))

    # ================================================================ plumbing

    def _now_ms(self) -> int:
        self._last_now_ms = max(self._last_now_ms, self._clock.wall_ms())
        return self._last_now_ms

    async def _call_for(
        self, kind: type[_ResponseT], group_id: str, operation: Operation
    ) -> _ResponseT:
        """Run ``operation`` on the group's coordinator; its reply is a ``kind``."""
        response = await self._call_shard(self._shard_for(group_id), operation)
        assert isinstance(response, kind), f"expected {kind.__name__}, got {response!r}"
        return response

    async def _call_shard(self, shard: _Shard, operation: Operation) -> Response:
        token = next(self._tokens)
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._waiting[token] = (shard.partition, future)
        try:
            self._dispatch(shard, operation(shard.coordinator, self._now_ms(), token))
            return await future
        finally:
            self._waiting.pop(token, None)

    def _dispatch(self, shard: _Shard, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Reply):
                entry = self._waiting.pop(effect.token, None)
                if entry is not None and not entry[1].done():
                    entry[1].set_result(effect.response)
            else:
                assert effect.records, "appends carry records"
                shard.appends.append(effect)
                shard.has_appends.set()
        self._maybe_wake(shard)

    def _maybe_wake(self, shard: _Shard) -> None:
        deadline = shard.coordinator.next_deadline_ms()
        if deadline is not None and (
            self._timer_target_ms is None or deadline < self._timer_target_ms
        ):
            self._wake_event.set()

    async def _write(self, shard: _Shard) -> None:
        """Write the partition's appends in order, several per log write."""
        while True:
            await shard.has_appends.wait()
            batch = [shard.appends.popleft()]
            size = _record_bytes(batch[0])
            while shard.appends and size + _record_bytes(shard.appends[0]) <= WRITE_BYTES_MAX:
                size += _record_bytes(shard.appends[0])
                batch.append(shard.appends.popleft())
            if not shard.appends:
                shard.has_appends.clear()
            error: ErrorCode | None = None
            try:
                await self._log.append(
                    shard.partition, [record for append in batch for record in append.records]
                )
            except KafkaError as e:
                log.warning("__consumer_offsets-%d: append failed: %s", shard.partition, e)
                error = e.code
            if self._shards.get(shard.partition) is not shard:
                return
            now_ms = self._now_ms()
            for append in batch:
                self._dispatch(
                    shard, shard.coordinator.append_completed(now_ms, append.append_id, error)
                )

    async def _run_timers(self) -> None:
        while True:
            self._wake_event.clear()
            now_ms = self._now_ms()
            target: int | None = None
            for shard in list(self._shards.values()):
                if not shard.loaded:
                    continue
                deadline = shard.coordinator.next_deadline_ms()
                if deadline is not None and deadline <= now_ms:
                    self._dispatch(shard, shard.coordinator.poll(now_ms))
                    deadline = shard.coordinator.next_deadline_ms()
                if deadline is not None and (target is None or deadline < target):
                    target = deadline
            self._timer_target_ms = target
            if self._wake_event.is_set():
                continue
            timeout_s = None if target is None else max(0, target - now_ms) / 1000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake_event.wait(), timeout_s)
