"""ISR changes: the leaders' writes of their partitions' in-sync replica sets.

A leader asks for a change (:meth:`IsrChanges.submit`: a follower caught up and joins, or
lagged and leaves), with the eligible leader replicas that go with the new ISR
(:func:`sluice.cluster.eligible.with_isr`, on the topic's min.insync.replicas); one task
writes each as a conditional write of the partition state
(on the state's version, Kafka's partition epoch), and the written state is handed back
to the partition at once, before the metadata image brings it::

    Partition ──submit(isr)──▶ pending (one per partition) ──▶ store.update_partitions(
        ▲                                                        [state with new ISR],
        │ update_state(written)         written ◀───────────────  controller_epoch=None)
        │ isr_change_failed(version)    StaleVersion: a newer state (a new leader, a
        └────────────────────────────── controller's change) won; the leader decides
                                        again from it

The same task checks, every half of ``replica.lag.time.max.ms``, which followers lag
(:meth:`Partition.shrink_isr_if_lagging`). A leader paused past its session and
replaced cannot shrink the ISR to itself: the controller's change bumped the version,
so its write loses.
"""

from __future__ import annotations

import asyncio
import logging

from sluice.broker.replication.partition import Partition
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.cluster import eligible
from sluice.cluster.store import MetadataStore, MetadataStoreError, PartitionChange, StaleVersion
from sluice.common.ids import TopicPartition

log = logging.getLogger(__name__)


class IsrChanges:
    def __init__(
        self, store: MetadataStore, replicas: ReplicaManager, lag_time_max_ms: int
    ) -> None:
        self._store = store
        self._replicas = replicas
        self._lag_time_max_ms = lag_time_max_ms
        self._pending: dict[TopicPartition, tuple[Partition, PartitionChange]] = {}
        self._wake = asyncio.Event()
        self.shrinks = 0
        self.expands = 0
        """ISR changes written by leaders here that removed or added replicas (metrics)."""

    def submit(self, partition: Partition, isr: tuple[int, ...]) -> None:
        """Write ``isr`` for ``partition`` soon (the partition allows one at a time)."""
        change = PartitionChange(
            partition.topic_partition.topic,
            partition.topic_partition.partition,
            eligible.with_isr(partition.state, isr, partition.log.config.min_insync_replicas),
        )
        self._pending[partition.topic_partition] = (partition, change)
        self._wake.set()

    async def run(self) -> None:
        """Write submitted changes and look for lagging followers, until cancelled."""
        check_interval_s = self._lag_time_max_ms / 2 / 1000
        loop = asyncio.get_running_loop()
        next_check = loop.time() + check_interval_s
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), max(next_check - loop.time(), 0))
            except TimeoutError:
                pass
            self._wake.clear()
            if loop.time() >= next_check:
                next_check = loop.time() + check_interval_s
                for partition in self._replicas:
                    partition.shrink_isr_if_lagging(self._lag_time_max_ms)
            while self._pending:
                topic_partition = next(iter(self._pending))
                partition, change = self._pending.pop(topic_partition)
                await self._write(partition, change)

    async def _write(self, partition: Partition, change: PartitionChange) -> None:
        from_version = change.state.version
        try:
            (written,) = await self._store.update_partitions([change], None)
        except StaleVersion:
            log.debug("%s: ISR change lost to a newer state", partition.topic_partition)
            partition.isr_change_failed(from_version)
            return
        except MetadataStoreError as e:
            log.warning("%s: cannot write the ISR (%s); will retry", partition.topic_partition, e)
            partition.isr_change_failed(from_version)
            return
        before = set(partition.state.isr)
        if set(written.isr) - before:
            self.expands += 1
        if before - set(written.isr):
            self.shrinks += 1
        log.info(
            "%s: ISR is now %s (version %d)",
            partition.topic_partition,
            list(written.isr),
            written.version,
        )
        if self._replicas.find(partition.topic_partition) is partition:
            partition.update_state(written)
