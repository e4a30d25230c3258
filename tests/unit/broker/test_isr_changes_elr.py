"""A leader's ISR write (``broker.replication.isr``) over a real embedded metadata store
carries the eligible leader replicas of the new ISR (KIP-966): a follower dropped from an
ISR that falls below min.insync.replicas is stored in the ELR, and the ELR is cleared
once the ISR is back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from sluice.broker.replication.isr import IsrChanges
from sluice.broker.replication.partition import Partition
from sluice.broker.replication.purgatory import Purgatory
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.cluster.embedded import EmbeddedMetadataStore
from sluice.cluster.model import PartitionState, TopicMetadata, new_topic_id
from sluice.common.clock import ManualClock
from sluice.common.config import TopicConfig
from sluice.common.ids import TopicPartition
from sluice.storage import PartitionLog

TOPIC_PARTITION = TopicPartition("orders", 0)
LAG_TIME_MAX_MS = 10_000
WRITE_TIMEOUT_S = 10.0
"""Bound of one ISR write to the embedded store (a file write and fsync)."""


def test_a_leaders_isr_write_stores_the_elr_of_the_new_isr(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = EmbeddedMetadataStore(tmp_path)
        await store.start()
        state = PartitionState(replicas=(0, 1, 2), leader=0, leader_epoch=0, isr=(0, 1))
        await store.create_topics(
            [TopicMetadata("orders", new_topic_id(), {0: state}, {"min.insync.replicas": "2"})]
        )
        clock = ManualClock()
        replicas = ReplicaManager(0, tmp_path / "data", clock, Purgatory(), {})
        isr_changes = IsrChanges(store, replicas, LAG_TIME_MAX_MS)
        log = PartitionLog.create(tmp_path / "orders-0", TopicConfig(min_insync_replicas=2), clock)
        partition = Partition(TOPIC_PARTITION, log, state, 0, Purgatory(), clock, isr_changes)
        writer = asyncio.create_task(isr_changes.run())
        try:
            isr_changes.submit(partition, (0,))
            shrunk = await _stored_when(store, lambda s: s.isr == (0,))
            assert (shrunk.elr, shrunk.last_known_elr) == ((1,), ())
            partition.update_state(shrunk)
            isr_changes.submit(partition, (0, 2))
            grown = await _stored_when(store, lambda s: s.isr == (0, 2))
            assert (grown.elr, grown.last_known_elr) == ((), ())
        finally:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
            log.close()
            await store.close()

    asyncio.run(scenario())


async def _stored_when(
    store: EmbeddedMetadataStore, condition: Callable[[PartitionState], bool]
) -> PartitionState:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WRITE_TIMEOUT_S
    while True:
        stored = store.image().topics["orders"].partitions[0]
        if condition(stored):
            return stored
        assert loop.time() < deadline, f"the ISR write never landed: {stored}"
        await asyncio.sleep(0.01)
