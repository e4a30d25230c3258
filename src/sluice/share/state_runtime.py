"""The share coordinators' runtime: the generic coordinator runtime over
``__share_group_state``, with the share-state operations the broker calls.

One :class:`~sluice.share.state_coordinator.ShareStateCoordinator` per partition is a
shard of :class:`~sluice.coordinator.runtime.CoordinatorRuntime` (loading, ordered
writes, NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS). This layer routes each
share-partition to the partition its key hashes onto (Kafka's rule, over
``group:topic id:partition``) and turns the shard's refusals into KafkaErrors. It only
serves the partitions led here; reaching the others is the broker's
(``broker.share.persister``).
"""

from __future__ import annotations

from sluice.common.clock import SYSTEM_CLOCK, Clock
from sluice.common.errors import ErrorCode, for_code
from sluice.coordinator.api import CoordinatorLog
from sluice.coordinator.placement import partition_for
from sluice.coordinator.runtime import CoordinatorRuntime, Operation
from sluice.share.state import ShareState, ShareStateKey
from sluice.share.state_coordinator import Outcome, ShareStateCoordinator, ShareStateSummary


class ShareStateCoordinatorRuntime(CoordinatorRuntime[ShareStateCoordinator]):
    def __init__(self, state_log: CoordinatorLog, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(state_log, ShareStateCoordinator, clock)

    def coordinator_partition(self, key: ShareStateKey) -> int:
        return partition_for(key.coordinator_key(), self.partition_count)

    # ================================================================ operations

    async def read(self, key: ShareStateKey, leader_epoch: int) -> ShareState | None:
        return await self._call(key, lambda c, now, token: c.read(now, token, key, leader_epoch))

    async def initialize(
        self, key: ShareStateKey, start_offset: int, state_epoch: int | None = None
    ) -> ShareState:
        state = await self._call(
            key, lambda c, now, token: c.initialize(now, token, key, start_offset, state_epoch)
        )
        assert state is not None, "initialize stores a state"
        return state

    async def write(self, key: ShareStateKey, state: ShareState) -> None:
        await self._call(key, lambda c, now, token: c.write(now, token, key, state))

    async def delete(self, key: ShareStateKey) -> None:
        await self._call(key, lambda c, now, token: c.delete(now, token, key))

    async def summary(self, key: ShareStateKey) -> ShareStateSummary | None:
        """Start offset, state epoch and leader epoch (None: no state); records nothing."""
        return self.loaded_shard(self.coordinator_partition(key)).summary(key)

    async def group_keys(self, group_id: str) -> list[ShareStateKey]:
        """The share-partitions of ``group_id`` with state on the partitions loaded here
        (a group's share-partitions spread over every partition of the topic)."""
        keys: list[ShareStateKey] = []
        for partition in self.loaded_partitions():
            keys += self.loaded_shard(partition).keys_of_group(group_id)
        return keys

    # ================================================================== plumbing

    async def _call(
        self, key: ShareStateKey, operation: Operation[ShareStateCoordinator]
    ) -> ShareState | None:
        outcome = await self.call(self.coordinator_partition(key), operation)
        assert isinstance(outcome, Outcome), f"expected an Outcome, got {outcome!r}"
        if outcome.error is not ErrorCode.none:
            raise for_code(outcome.error)(f"{key.coordinator_key()}: {outcome.message}")
        return outcome.state
