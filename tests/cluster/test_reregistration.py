"""A broker's partitions when its ZooKeeper session is lost and the store registers it
again: the real ZooKeeper store, metadata applier and replica manager on real logs (no
listener or fetcher: they add nothing to this), with the session expired on the server.

A state written before the new registration names the broker leader of a run whose
session ended (the controller may already have moved that leadership on): the broker no
longer leads it, and leads again once the controller writes a state after it."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path

import pytest
from zookeeper_sessions import SESSION_TIMEOUT_S, expire_session

from sluice.broker.replication.metadata_applier import MetadataApplier
from sluice.broker.replication.purgatory import Purgatory
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.cluster.model import BrokerInfo, PartitionState, TopicMetadata, new_topic_id
from sluice.cluster.store import PartitionChange
from sluice.cluster.zookeeper import ZooKeeperMetadataStore
from sluice.common.clock import ManualClock
from sluice.common.ids import TopicPartition

pytestmark = pytest.mark.integration

NODE_ID = 1
TOPIC_PARTITION = TopicPartition("orders", 0)
SCENARIO_TIMEOUT_S = 60.0
"""Bound of the whole scenario (a session expiry and a reconnection take seconds)."""
APPLIED_TIMEOUT_S = 30.0


def test_a_broker_registered_again_leads_no_state_written_before(
    zookeeper_connect: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="sluice.broker.replication")

    async def scenario() -> None:
        store = ZooKeeperMetadataStore(zookeeper_connect, session_timeout_s=SESSION_TIMEOUT_S)
        await store.start()
        replicas = ReplicaManager(NODE_ID, tmp_path, ManualClock(), Purgatory(), {})
        applier = MetadataApplier(NODE_ID, store.image(), replicas, lambda error: None)
        try:
            await applier.apply_first(store.image(), recover=False)
            store.subscribe(applier.offer)
            applying = asyncio.create_task(applier.run())
            first = await store.register_broker(BrokerInfo(NODE_ID, "127.0.0.1", 9092))
            replicas.registered(first.epoch)
            state = PartitionState((NODE_ID,), NODE_ID, 0, (NODE_ID,))
            await store.create_topics([TopicMetadata("orders", new_topic_id(), {0: state})])
            await applier.wait_for(lambda image: "orders" in image.topics, APPLIED_TIMEOUT_S)
            partition = replicas.get(TOPIC_PARTITION)
            assert partition.is_leader  # written after this broker registered

            expire_session(zookeeper_connect, store)
            image = await applier.wait_for(
                lambda image: (
                    NODE_ID in image.brokers and image.brokers[NODE_ID].epoch > first.epoch
                ),
                APPLIED_TIMEOUT_S,
            )
            again = image.brokers[NODE_ID].epoch
            assert replicas.broker_epoch == again
            assert partition.core.registered_at == again
            assert not partition.is_leader and partition.core.named_leader_of_a_previous_run
            # More images while it waits (its registration read again): said once.
            await store.set_broker_configs("", {"log.retention.ms": "60000"})
            await applier.wait_for(
                lambda image: bool(image.broker_configs.get("")), APPLIED_TIMEOUT_S
            )
            waiting = [r for r in caplog.records if "it waits for the controller" in r.message]
            assert len(waiting) == 1, [r.message for r in waiting]

            # The controller decides again, after the new registration: it leads.
            controller_epoch = await store.elect_controller(NODE_ID)
            assert controller_epoch is not None
            current = store.image().topics["orders"].partitions[0]
            decided = dataclasses.replace(current, leader_epoch=current.leader_epoch + 1)
            await store.update_partitions([PartitionChange("orders", 0, decided)], controller_epoch)
            await applier.wait_for(
                lambda image: image.topics["orders"].partitions[0].leader_epoch == 1,
                APPLIED_TIMEOUT_S,
            )
            assert partition.is_leader and partition.leader_epoch == 1
            applying.cancel()
        finally:
            replicas.close_all()
            await store.close()

    async def bounded() -> None:
        async with asyncio.timeout(SCENARIO_TIMEOUT_S):
            await scenario()

    asyncio.run(bounded())
