"""Share-partition state on a three-broker cluster: a share-partition leader's
``BrokerSharePersister`` reaches the share coordinator of each key on whichever broker
leads its ``__share_group_state`` partition (Kafka's internal share-state requests, from
a node that coordinates nothing: ``share_state_harness``), and once that broker is
killed with SIGKILL it finds the new coordinator (retrying while leadership moves),
which has the state (replicated to the in-sync replicas before the write was answered)
and the fencing of older leader epochs.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from cluster_processes import Cluster, running_cluster
from kafka_wire import KafkaConnection
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest
from share_state_harness import outside_persister

from sluice.cli.local_zookeeper import LocalZooKeeper
from sluice.common.errors import ErrorCode, KafkaError
from sluice.coordinator.placement import partition_for
from sluice.share.config import SHARE_STATE_TOPIC
from sluice.share.state import DeliveryState, ShareState, ShareStateKey, StateBatch

pytestmark = pytest.mark.integration

STATE_PARTITIONS = 3
KEYS = [ShareStateKey("queue-failover", uuid.UUID(int=11), p) for p in range(6)]
FAILOVER_ATTEMPTS = 40
"""Enough for the ZooKeeper session to expire and a new leader to load (about 35 s)."""
SCENARIO_TIMEOUT_S = 120.0


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with running_cluster(
        tmp_path_factory.mktemp("cluster"),
        zookeeper.connect,
        3,
        {"share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS)},
    ) as started:
        yield started


def _state(key: ShareStateKey) -> ShareState:
    return ShareState(
        0,
        100,
        (
            StateBatch(100, 100 + key.partition, DeliveryState.ACKNOWLEDGED, 1),
            StateBatch(200, 201, DeliveryState.ARCHIVED, 5),
        ),
        leader_epoch=1,
    )


def test_the_state_outlives_its_coordinators_broker(cluster: Cluster) -> None:
    first = cluster.broker(0)
    with KafkaConnection(first.host, first.port) as connection:
        found = connection.request(
            FindCoordinatorRequest(key_type=2, coordinator_keys=(KEYS[0].coordinator_key(),))
        )
    assert found.coordinators[0].error_code == ErrorCode.none
    status = cluster.wait_for(
        lambda s: (
            SHARE_STATE_TOPIC in s["topics"]
            and all(len(p["isr"]) == 3 for p in s["topics"][SHARE_STATE_TOPIC])
        )
    )
    leaders = {p["partition"]: p["leader"] for p in status["topics"][SHARE_STATE_TOPIC]}
    assert len(set(leaders.values())) > 1, f"coordinators spread over brokers: {leaders}"
    persister, peers = outside_persister(
        lambda: [(b.host, b.port) for b in cluster.running()],
        STATE_PARTITIONS,
        attempts=FAILOVER_ATTEMPTS,
    )
    coordinators = {
        key: leaders[partition_for(key.coordinator_key(), STATE_PARTITIONS)] for key in KEYS
    }
    assert len(set(coordinators.values())) > 1, "the keys reach several brokers"
    victim = cluster.broker(coordinators[KEYS[0]])

    async def scenario() -> None:
        try:
            for key in KEYS:
                assert await persister.read(key, 1) is None
                await persister.initialize(key, 100)
                await persister.write(key, _state(key))
            await asyncio.to_thread(victim.kill)
            for key in KEYS:
                assert await persister.read(key, 1) == _state(key), key
            with pytest.raises(KafkaError) as deposed:
                await persister.write(KEYS[0], ShareState(0, 100, (), 0))
            assert deposed.value.code is ErrorCode.fenced_leader_epoch
            await persister.write(KEYS[0], ShareState(0, 150, (), 2))
            assert await persister.read(KEYS[0], 2) == ShareState(0, 150, (), 2)
        finally:
            await peers.close()

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_TIMEOUT_S))
    after = cluster.status(cluster.running()[0])
    moved = {p["partition"]: p["leader"] for p in after["topics"][SHARE_STATE_TOPIC]}
    assert victim.node_id not in moved.values(), moved
