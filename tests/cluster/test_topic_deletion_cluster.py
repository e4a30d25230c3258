"""Topic deletion in a cluster: followers delete their replicas while they fetch them,
flush them and clean them, and producers auto-create the names again at once (the
single-node workload of ``deletion_workload``, with three replicas of everything)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import pytest
from client_helpers import producer_config, wait_until
from cluster_processes import Cluster, running_cluster
from confluent_kafka import Producer
from deletion_workload import (
    RACING_OVERRIDES,
    cycle,
    deletion_directories,
    racing_producers,
    storage_trouble,
    tolerant,
)

from sluice.cli.local_zookeeper import LocalZooKeeper

pytestmark = pytest.mark.integration

BROKERS = 3
CYCLES = 60
TOPIC_NAMES = 2
TEST_DEADLINE_S = 150.0
"""The loop's bound on a loaded machine; the test needs a third of the cycles within it."""
REMOVAL_TIMEOUT_S = 60.0


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    overrides = {**RACING_OVERRIDES, "default.replication.factor": str(BROKERS)}
    with running_cluster(
        tmp_path_factory.mktemp("cluster"), zookeeper.connect, BROKERS, overrides
    ) as started:
        yield started


def test_deleting_replicated_topics_while_they_are_written_never_stops_a_broker(
    cluster: Cluster,
) -> None:
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    names = [f"cluster-deletion-{seed}-{i}" for i in range(TOPIC_NAMES)]
    admin = cluster.admin(cluster.broker(0))
    producer = Producer(producer_config(cluster.bootstrap, **{"message.timeout.ms": 5_000}))
    deadline = time.monotonic() + TEST_DEADLINE_S
    cycles = 0
    with racing_producers(cluster.bootstrap, names, seed) as sent:
        while cycles < CYCLES and time.monotonic() < deadline:
            cycle(admin, producer, names[cycles % TOPIC_NAMES], replication_factor=BROKERS)
            cycles += 1
            assert len(cluster.running()) == BROKERS, cluster.log_tails()
    print(f"{cycles} cycles, {sum(sent)} records sent by the racing producers")
    assert cycles >= CYCLES // 3, f"only {cycles} cycles ran within {TEST_DEADLINE_S}s"
    tolerant(admin.delete_topics(names, operation_timeout=10))
    for broker in cluster.brokers:
        assert broker.is_running, cluster.log_tails()
        trouble = storage_trouble(broker)
        assert trouble == [], f"broker {broker.node_id}:\n" + "\n".join(trouble[:20])
        data_dir = broker.data_dir
        wait_until(
            lambda data_dir=data_dir: (  # type: ignore[misc]
                deletion_directories(data_dir) == []
                and not any(data_dir.glob("cluster-deletion-*"))
            ),
            f"broker {broker.node_id} removed the deleted partitions",
            REMOVAL_TIMEOUT_S,
        )
