"""Replication on three real brokers and a real ZooKeeper: an RF=3 topic takes acks=all
writes, every replica holds them, and killing the leader loses nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from client_helpers import consume_exactly, produce_and_flush, producer_config
from cluster_processes import Cluster
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from sluice.cli.local_zookeeper import LocalZooKeeper

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 60.0


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    started = Cluster(
        tmp_path_factory.mktemp("cluster"), f"{zookeeper.connect}/{uuid.uuid4().hex}", size=3
    )
    started.start()
    yield started
    started.stop()


def _partition(status: dict, name: str, index: int) -> dict:
    return next(p for p in status["topics"][name] if p["partition"] == index)


def test_an_rf3_topic_survives_the_kill_of_its_leader(cluster: Cluster) -> None:
    name = f"replicated-{uuid.uuid4().hex[:6]}"
    admin = cluster.admin(cluster.broker(0))
    admin.create_topics([NewTopic(name, 1, 3, config={"min.insync.replicas": "2"})])[name].result(
        CLIENT_TIMEOUT_S
    )
    status = cluster.wait_for(
        lambda s: name in s["topics"] and len(_partition(s, name, 0)["isr"]) == 3
    )
    producer = Producer(
        producer_config(cluster.bootstrap, acks="all", **{"enable.idempotence": True})
    )
    produce_and_flush(producer, name, [{"value": f"a-{i}".encode()} for i in range(500)])
    leader = _partition(status, name, 0)["leader"]
    cluster.broker(leader).kill()
    cluster.wait_for(lambda s: _partition(s, name, 0)["leader"] not in (-1, leader))
    produce_and_flush(producer, name, [{"value": f"b-{i}".encode()} for i in range(500)])
    got = consume_exactly(cluster.bootstrap, [(name, 0)], 1000, extra_wait_s=1.0)
    values = [m.value().decode() for m in got]
    assert values == [f"a-{i}" for i in range(500)] + [f"b-{i}" for i in range(500)]
