"""Followers fetch in incremental sessions (KIP-227) on three real brokers: once a
follower's session is open, its fetches name only the partitions whose position moved,
not every partition it follows; replication still converges; and a follower learns the
high watermark its own fetch moved without waiting for another append or for the leader
to give up waiting (``replica.fetch.wait.max.ms`` is set far above the test's deadline,
so only the session's rule can tell it in time)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from client_helpers import producer_config
from cluster_processes import Cluster, running_cluster
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from metrics_scrape import Samples, scrape, total, value

from sluice.cli.local_zookeeper import LocalZooKeeper

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 60.0
FETCH_WAIT_MAX_MS = 30_000
"""A follower's fetch waits this long at the leader when nothing comes (the most a leader
lets any fetch wait, ``common.limits.FETCH_WAIT_MS_MAX``)."""
SETTLE_TIMEOUT_S = 15.0
"""Half of FETCH_WAIT_MAX_MS: what a follower learns by then, it did not learn from a
parked fetch ending."""
POLL_INTERVAL_S = 0.1
PARTITIONS = 4
MESSAGES = 20
LEADER = 0


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with running_cluster(
        tmp_path_factory.mktemp("fetch-sessions"),
        zookeeper.connect,
        3,
        {"replica.fetch.wait.max.ms": str(FETCH_WAIT_MAX_MS)},
        http=True,
    ) as started:
        yield started


def _wait(
    cluster: Cluster, condition: Callable[[dict[int, Samples]], bool], what: str
) -> dict[int, Samples]:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        scraped = {b.node_id: scrape(b.http_url) for b in cluster.running()}
        if condition(scraped):
            return scraped
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{cluster.log_tails()}")
        time.sleep(POLL_INTERVAL_S)  # polling interval between scrapes, not a sync


def _offsets(scraped: dict[int, Samples], name: str, metric: str) -> dict[tuple[int, int], float]:
    """(broker, partition) → the metric's value for the topic's partitions."""
    return {
        (node, partition): found
        for node, samples in scraped.items()
        for partition in range(PARTITIONS)
        if (found := value(samples, metric, topic=name, partition=partition)) is not None
    }


def _converged(name: str, end: int) -> Callable[[dict[int, Samples]], bool]:
    """Every replica of partition 0 ends at ``end`` and knows it is committed."""

    def check(scraped: dict[int, Samples]) -> bool:
        ends = _offsets(scraped, name, "sluice_partition_log_end_offset")
        marks = _offsets(scraped, name, "sluice_partition_high_watermark")
        return all(ends.get((n, 0)) == end and marks.get((n, 0)) == end for n in range(3))

    return check


def test_followers_fetch_incrementally_and_learn_the_high_watermark(cluster: Cluster) -> None:
    name = f"sessions-{uuid.uuid4().hex[:6]}"
    admin = cluster.admin(cluster.broker(LEADER))
    # Every partition led by broker 0 and followed by 1 and 2: each follower's one
    # fetcher to broker 0 holds all four in its session.
    assignment = [[LEADER, 1, 2]] * PARTITIONS
    admin.create_topics(
        [
            NewTopic(
                name,
                num_partitions=PARTITIONS,
                replica_assignment=assignment,
                config={"min.insync.replicas": "2"},
            )
        ]
    )[name].result(CLIENT_TIMEOUT_S)
    cluster.wait_for(
        lambda s: name in s["topics"] and all(len(p["isr"]) == 3 for p in s["topics"][name])
    )
    leader_url = cluster.broker(LEADER).http_url
    producer = Producer(
        producer_config(cluster.bootstrap, acks="all", **{"enable.idempotence": True})
    )
    # One acknowledged message opens the followers' sessions.
    producer.produce(name, b"opening", partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    _wait(cluster, _converged(name, 1), "the first message on every replica")
    before = scrape(leader_url)
    assert total(before, "sluice_incremental_fetch_sessions") >= 2
    assert total(before, "sluice_incremental_fetch_partitions_cached") >= 2 * PARTITIONS

    errors: list[object] = []
    for i in range(MESSAGES):  # one at a time, each acknowledged by the ISR
        producer.produce(
            name, f"m-{i}".encode(), partition=0, on_delivery=lambda e, _: errors.append(e)
        )
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert errors == [None] * MESSAGES
    # No append follows the last message, and no parked fetch times out before the
    # deadline: the followers learn its high watermark from the session's rule alone.
    _wait(cluster, _converged(name, MESSAGES + 1), "every replica committed at the end")

    after = scrape(leader_url)
    fetches = total(after, "sluice_incremental_fetches_total") - total(
        before, "sluice_incremental_fetches_total"
    )
    named = total(after, "sluice_incremental_fetch_partitions_named_total") - total(
        before, "sluice_incremental_fetch_partitions_named_total"
    )
    # Each message took at least one incremental fetch per follower, and each of those
    # named at most partition 0, where a full fetch names all four.
    assert fetches >= 2 * MESSAGES
    assert named <= fetches
