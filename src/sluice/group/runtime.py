"""The group coordinators' runtime: the generic coordinator runtime over
``__consumer_offsets``, with the group operations the broker's handlers call.

One :class:`~sluice.group.coordinator.GroupCoordinator` per ``__consumer_offsets``
partition is a shard of :class:`~sluice.coordinator.runtime.CoordinatorRuntime`, which
does the loading, the writes, the timers and NOT_COORDINATOR /
COORDINATOR_LOAD_IN_PROGRESS (see there); this subclass only adds the group operations,
each routed to its partition::

    handler ──await join_group(req)──▶ GroupCoordinatorRuntime
                                          │ partition_for(group_id)
                                          ▼
              call(partition, lambda c, now, token: c.join_group(now, token, req))
        ◀── JoinGroupResponse       (the generic runtime, when the coordinator replies)

Reads that write nothing (OffsetFetch, DescribeGroups, ListGroups) go straight to the
loaded coordinator; DeleteGroups is split by partition and answered in request order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from random import Random
from typing import TypeVar

from sluice.common.clock import SYSTEM_CLOCK, Clock
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition
from sluice.coordinator.api import CoordinatorLog
from sluice.coordinator.placement import partition_for
from sluice.coordinator.runtime import CoordinatorRuntime, Operation
from sluice.group.api import (
    DeleteGroupsResponse,
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
    ShareGroupDescription,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from sluice.group.config import GroupConfig
from sluice.group.consumer_coordinator import ConsumerGroupDescription
from sluice.group.consumer_group import MetadataView
from sluice.group.consumer_heartbeat_api import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from sluice.group.coordinator import GroupCoordinator

log = logging.getLogger(__name__)

_ResponseT = TypeVar("_ResponseT")
_Described = TypeVar("_Described")
"""A group description of one kind (classic, consumer, share)."""


class GroupCoordinatorRuntime(CoordinatorRuntime[GroupCoordinator]):
    """Runs the group coordinators of this broker over the ``__consumer_offsets`` log."""

    def __init__(
        self,
        offsets_log: CoordinatorLog,
        config: GroupConfig | None = None,
        clock: Clock = SYSTEM_CLOCK,
        random: Random | None = None,
    ) -> None:
        self._config = config if config is not None else GroupConfig()
        self._random = random if random is not None else Random()
        super().__init__(offsets_log, self._new_coordinator, clock)

    def _new_coordinator(self) -> GroupCoordinator:
        return GroupCoordinator(self._config, Random(self._random.getrandbits(64)))

    async def start(
        self, tasks: asyncio.TaskGroup, partitions: Iterable[int] | None = None
    ) -> None:
        await super().start(tasks, partitions)
        loaded = self.loaded_partitions()
        log.info(
            "group coordinator loaded %d group(s) from %d __consumer_offsets partition(s)",
            sum(len(self.loaded_shard(p).list_groups()) for p in loaded),
            len(loaded),
        )

    # ================================================================ lookups

    def coordinator_partition(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition whose leader coordinates ``group_id``."""
        return partition_for(group_id, self.partition_count)

    def _coordinator_for(self, group_id: str) -> GroupCoordinator:
        return self.loaded_shard(self.coordinator_partition(group_id))

    # ============================================================== operations

    async def join_group(
        self, request: JoinGroupRequest, topics: MetadataView | None = None
    ) -> JoinGroupResponse:
        """``topics``: the broker's topics, for a JoinGroup to a consumer group."""
        return await self._call_for(
            JoinGroupResponse,
            request.group_id,
            lambda c, now, token: c.join_group(now, token, request, topics),
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

    async def commit_transactional_offsets(
        self, request: OffsetCommitRequest, producer_id: int, producer_epoch: int
    ) -> OffsetCommitResponse:
        """TxnOffsetCommit: offsets pending in the producer's transaction."""
        return await self._call_for(
            OffsetCommitResponse,
            request.group_id,
            lambda c, now, token: c.commit_transactional_offsets(
                now, token, request, producer_id, producer_epoch
            ),
        )

    async def complete_transaction(self, partition: int, producer_id: int, committed: bool) -> None:
        """A marker for ``producer_id`` was written to ``__consumer_offsets-<partition>``
        here; the producer's pending offsets there take effect (or are dropped)."""
        await self.call(
            partition,
            lambda c, now, token: c.complete_transaction(now, token, producer_id, committed),
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
        self,
        group_id: str,
        partitions: Sequence[TopicPartition] | None,
        require_stable: bool = False,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> OffsetFetchResponse:
        """Committed offsets; ``partitions`` None means every partition of the group.
        The member id and epoch (OffsetFetch v9+) are checked for consumer groups."""
        return self._coordinator_for(group_id).fetch_offsets(
            group_id, partitions, require_stable, member_id, member_epoch
        )

    async def share_group_heartbeat(
        self, request: ShareGroupHeartbeatRequest
    ) -> ShareGroupHeartbeatResponse:
        return await self._call_for(
            ShareGroupHeartbeatResponse,
            request.group_id,
            lambda c, now, token: c.share_group_heartbeat(now, token, request),
        )

    async def describe_share_groups(
        self, group_ids: Sequence[str]
    ) -> tuple[ShareGroupDescription, ...]:
        return self._describe_each(
            group_ids, GroupCoordinator.describe_share_groups, ShareGroupDescription
        )

    async def consumer_group_heartbeat(
        self, request: ConsumerGroupHeartbeatRequest, topics: MetadataView
    ) -> ConsumerGroupHeartbeatResponse:
        """ConsumerGroupHeartbeat (KIP-848) on the group's coordinator."""
        return await self._call_for(
            ConsumerGroupHeartbeatResponse,
            request.group_id,
            lambda c, now, token: c.consumer_group_heartbeat(now, token, request, topics),
        )

    async def describe_consumer_groups(
        self, group_ids: Sequence[str]
    ) -> tuple[ConsumerGroupDescription, ...]:
        return self._describe_each(
            group_ids, GroupCoordinator.describe_consumer_groups, ConsumerGroupDescription
        )

    async def describe_groups(self, group_ids: Sequence[str]) -> tuple[GroupDescription, ...]:
        return self._describe_each(
            group_ids,
            GroupCoordinator.describe_groups,
            lambda group_id, code: GroupDescription(group_id, code, ""),
        )

    def _describe_each(
        self,
        group_ids: Sequence[str],
        describe: Callable[[GroupCoordinator, list[str]], Iterable[_Described]],
        unanswered: Callable[[str, ErrorCode], _Described],
    ) -> tuple[_Described, ...]:
        """Each group described by the coordinator of its partition, in the order asked;
        a group whose partition is not served here is ``unanswered`` with the error
        (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS)."""
        descriptions: list[_Described] = []
        for group_id in group_ids:
            try:
                coordinator = self._coordinator_for(group_id)
            except KafkaError as e:
                descriptions.append(unanswered(group_id, e.code))
                continue
            descriptions.extend(describe(coordinator, [group_id]))
        return tuple(descriptions)

    async def list_groups(self, states: Iterable[str] | None = None) -> ListGroupsResponse:
        """Groups of every loaded partition, sorted by id."""
        wanted = None if states is None else list(states)
        groups: list[GroupListing] = []
        for partition in self.loaded_partitions():
            groups.extend(self.loaded_shard(partition).list_groups(wanted))
        error = ErrorCode.coordinator_load_in_progress if self.is_loading else ErrorCode.none
        return ListGroupsResponse(error, tuple(sorted(groups, key=lambda g: g.group_id)))

    async def delete_groups(self, group_ids: Sequence[str]) -> DeleteGroupsResponse:
        """Each group on its own coordinator; the answer lists each group once, in
        request order."""
        requested = list(dict.fromkeys(group_ids))
        errors: dict[str, ErrorCode] = {}
        by_partition: dict[int, list[str]] = {}
        for group_id in requested:
            partition = self.coordinator_partition(group_id)
            try:
                self.loaded_shard(partition)
            except KafkaError as e:
                errors[group_id] = e.code
                continue
            by_partition.setdefault(partition, []).append(group_id)

        async def delete_on(partition: int, ids: list[str]) -> DeleteGroupsResponse:
            return await self._call_on(
                DeleteGroupsResponse,
                partition,
                lambda c, now, token: c.delete_groups(now, token, ids),
            )

        responses = await asyncio.gather(
            *(delete_on(partition, ids) for partition, ids in by_partition.items())
        )
        for response in responses:
            errors.update(response.errors)
        return DeleteGroupsResponse(
            tuple((group_id, errors[group_id]) for group_id in requested),
            tuple(entry for response in responses for entry in response.share_topics),
        )

    # ================================================================ plumbing

    async def _call_for(
        self, kind: type[_ResponseT], group_id: str, operation: Operation[GroupCoordinator]
    ) -> _ResponseT:
        """Run ``operation`` on the group's coordinator; its reply is a ``kind``."""
        return await self._call_on(kind, self.coordinator_partition(group_id), operation)

    async def _call_on(
        self, kind: type[_ResponseT], partition: int, operation: Operation[GroupCoordinator]
    ) -> _ResponseT:
        response = await self.call(partition, operation)
        assert isinstance(response, kind), f"expected {kind.__name__}, got {response!r}"
        return response
