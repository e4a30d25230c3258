"""Metrics of a three-broker cluster, each broker scraped over its own HTTP listener:
exactly one controller, the lag of a group on partitions its coordinator does not even
host (one replica each: end offsets the coordinator asks their leaders for), and
under-replicated partitions appearing when a follower is SIGKILLed and going back to 0
once it has caught up."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from client_helpers import produce_and_flush, producer_config
from cluster_processes import Cluster, running_cluster
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from metrics_scrape import Samples, scrape, total, value

from sluice.cli.local_zookeeper import LocalZooKeeper

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 60.0
SETTLE_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.2
PARTITIONS = 3
LAG_TIME_MAX_MS = 2000


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with running_cluster(
        tmp_path_factory.mktemp("metrics-cluster"),
        zookeeper.connect,
        3,
        {"replica.lag.time.max.ms": str(LAG_TIME_MAX_MS)},
        http=True,
    ) as started:
        yield started


def _scrape_all(cluster: Cluster) -> dict[int, Samples]:
    return {b.node_id: scrape(b.http_url) for b in cluster.running()}


def _wait(
    cluster: Cluster, condition: Callable[[dict[int, Samples]], bool], what: str
) -> dict[int, Samples]:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        scraped = _scrape_all(cluster)
        if condition(scraped):
            return scraped
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{cluster.log_tails()}")
        time.sleep(POLL_INTERVAL_S)  # polling interval between scrapes, not a sync


def _commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    """Commit, retrying while ``__consumer_offsets`` is made and its coordinators load
    (a cluster creates it on the first FindCoordinator)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    try:
        while True:
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
                return
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(POLL_INTERVAL_S)  # retry interval while the coordinator loads
    finally:
        consumer.close()


def _under_replicated(scraped: dict[int, Samples]) -> float:
    return sum(total(s, "sluice_under_replicated_partitions") for s in scraped.values())


def test_controller_lag_and_under_replicated_partitions(cluster: Cluster) -> None:
    scraped = _wait(
        cluster,
        lambda s: sum(total(m, "sluice_controller_active") for m in s.values()) == 1,
        "exactly one active controller",
    )
    controller = next(n for n, m in scraped.items() if value(m, "sluice_controller_active") == 1)

    topic = f"metrics-{uuid.uuid4().hex[:6]}"
    replicated = f"replicated-{uuid.uuid4().hex[:6]}"
    admin = cluster.admin(cluster.broker(0))
    created = admin.create_topics([NewTopic(topic, PARTITIONS, 1), NewTopic(replicated, 2, 3)])
    for future in created.values():
        future.result(CLIENT_TIMEOUT_S)
    produced = {p: 5 * (p + 1) for p in range(PARTITIONS)}
    producer = Producer(producer_config(cluster.bootstrap, acks="all"))
    for partition, count in produced.items():
        produce_and_flush(
            producer, topic, [{"value": b"x", "partition": partition} for _ in range(count)]
        )
    committed = {p: p + 1 for p in range(PARTITIONS)}
    group = f"metrics-group-{uuid.uuid4().hex[:6]}"
    _commit(cluster.bootstrap, group, [TopicPartition(topic, p, o) for p, o in committed.items()])

    def coordinator_of(s: dict[int, Samples]) -> int | None:
        return next(
            (
                n
                for n, m in s.items()
                if value(m, "sluice_consumer_group_lag_sum", group=group) is not None
            ),
            None,
        )

    def lags_are(expected: dict[int, int]) -> Callable[[dict[int, Samples]], bool]:
        def holds(s: dict[int, Samples]) -> bool:
            node = coordinator_of(s)
            return node is not None and all(
                value(s[node], "sluice_consumer_group_lag", group=group, topic=topic, partition=p)
                == lag
                for p, lag in expected.items()
            )

        return holds

    expected = {p: produced[p] - committed[p] for p in range(PARTITIONS)}
    scraped = _wait(cluster, lags_are(expected), f"the lag {expected}")
    coordinator = coordinator_of(scraped)
    assert coordinator is not None
    led_elsewhere = [
        p
        for p in range(PARTITIONS)
        if value(scraped[coordinator], "sluice_partition_leader", topic=topic, partition=p) is None
    ]
    assert led_elsewhere, "every partition is hosted by the group's coordinator"
    # More records where the coordinator does not lead: the refreshed end offset shows.
    moved = led_elsewhere[0]
    produce_and_flush(producer, topic, [{"value": b"y", "partition": moved} for _ in range(7)])
    expected[moved] += 7
    _wait(cluster, lags_are(expected), f"the lag {expected} after more records")

    # SIGKILL a follower (neither the controller nor the coordinator): its partitions'
    # leaders shrink their ISR.
    follower = next(b for b in cluster.brokers if b.node_id not in (controller, coordinator))
    hosts_unreplicated = any(
        value(scraped[follower.node_id], "sluice_partition_leader", topic=topic, partition=p)
        for p in range(PARTITIONS)
    )
    follower.kill()
    scraped = _wait(cluster, lambda s: _under_replicated(s) > 0, "under-replicated partitions")
    if hosts_unreplicated:  # its partition of the one-replica topic has no leader now
        _wait(
            cluster,
            lambda s: all(value(m, "sluice_offline_partitions") == 1 for m in s.values()),
            "an offline partition",
        )
    follower.start()
    scraped = _wait(
        cluster,
        lambda s: len(s) == 3 and _under_replicated(s) == 0,
        "no under-replicated partitions once the follower is back",
    )
    assert sum(total(m, "sluice_isr_expands_total") for m in scraped.values()) > 0
    assert all(value(m, "sluice_offline_partitions") == 0 for m in scraped.values())
    assert sum(total(m, "sluice_controller_active") for m in scraped.values()) == 1
