"""Which coordinators run here: a coordinator runtime follows the leadership of its
internal topic's partitions on this broker.

The coordinator of ``__consumer_offsets-7`` (a group coordinator), of
``__transaction_state-3`` (a transaction coordinator) or of ``__share_group_state-5`` (a
share coordinator) is the partition's leader. After
each applied metadata change, :meth:`CoordinatorHosting.follow` loads the shards of the
partitions this broker came to lead (each load its own task: loading replays the
partition) and unloads those it no longer leads.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.coordinator.runtime import CoordinatorRuntime


class CoordinatorHosting:
    def __init__(
        self, topic: str, runtime: CoordinatorRuntime[Any], replicas: ReplicaManager
    ) -> None:
        self.topic = topic
        self.runtime = runtime
        self._replicas = replicas
        self._loading: set[int] = set()
        """Partitions whose shards are being loaded."""

    def led_partitions(self) -> set[int]:
        """The topic's partitions this broker leads."""
        return {
            partition.topic_partition.partition
            for partition in self._replicas
            if partition.topic_partition.topic == self.topic and partition.is_leader
        }

    def follow(self, tasks: asyncio.TaskGroup) -> None:
        led = self.led_partitions()
        # Loading ones too: a shard reloading (it asked to) is unloaded if not led.
        loaded = set(self.runtime.hosted_partitions()) | self._loading
        for partition in sorted(led - loaded):
            self._loading.add(partition)
            tasks.create_task(self._load(partition), name=f"load {self.topic}-{partition}")
        for partition in sorted(loaded - led):
            self.runtime.unload_partition(partition)
            self._loading.discard(partition)

    async def _load(self, partition: int) -> None:
        try:
            await self.runtime.load_partition(partition)
        finally:
            self._loading.discard(partition)
