"""acks=all Produce requests pipelined on one connection, on two real brokers: while the
first waits for its follower, the next Produces of the connection are appended (the
connection does not sit out the replication round trip), and the answers still leave
in request order, an acks=1 Produce's and a request of another kind's after them. A
connection that ends while an answer waits leaves no request counted in flight."""

from __future__ import annotations

import os
import signal
import struct
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from cluster_processes import Cluster, running_cluster
from confluent_kafka.admin import NewTopic
from kafka_wire import (
    CLIENT_ID,
    KafkaConnection,
    Record,
    api_versions_request,
    encode_batch,
    only_partition,
    produce_request,
)
from metrics_scrape import scrape, value

from sluice.broker.network.server import PRODUCE_PIPELINE_DEPTH
from sluice.cli.local_zookeeper import LocalZooKeeper
from sluice.protocol.codec import encode_request

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 60.0
PRODUCE_TIMEOUT_MS = 120_000
"""Far beyond the test's deadlines: no produce may end by timing out."""
APPENDED_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.1
LEADER, FOLLOWER = 0, 1
PRODUCES_WAITING = PRODUCE_PIPELINE_DEPTH + 2


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    # The paused follower keeps its ZooKeeper session and its place in the ISR for the
    # whole test: only its resumption may let the acks=all produces complete.
    with running_cluster(
        tmp_path_factory.mktemp("produce-pipelining"),
        zookeeper.connect,
        2,
        {"zookeeper.session.timeout.ms": "40000", "replica.lag.time.max.ms": "120000"},
        http=True,
    ) as started:
        yield started


def _leader_log_end(cluster: Cluster, name: str) -> float | None:
    samples = scrape(cluster.broker(LEADER).http_url)
    return value(samples, "sluice_partition_log_end_offset", topic=name, partition=0)


def _replicated_topic(cluster: Cluster) -> str:
    """A new topic led by LEADER, FOLLOWER in its ISR, min.insync.replicas=2."""
    name = f"pipelined-{uuid.uuid4().hex[:6]}"
    admin = cluster.admin(cluster.broker(LEADER))
    admin.create_topics(
        [
            NewTopic(
                name,
                num_partitions=1,
                replica_assignment=[[LEADER, FOLLOWER]],
                config={"min.insync.replicas": "2"},
            )
        ]
    )[name].result(CLIENT_TIMEOUT_S)
    cluster.wait_for(
        lambda s: (
            name in s["topics"]
            and sorted(s["topics"][name][0]["isr"]) == [LEADER, FOLLOWER]
            and s["topics"][name][0]["leader"] == LEADER
        )
    )
    return name


def test_acks_all_produces_pipeline_while_waiting_and_answer_in_order(cluster: Cluster) -> None:
    name = _replicated_topic(cluster)
    leader = cluster.broker(LEADER)
    paused = cluster.broker(FOLLOWER)
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        with KafkaConnection(leader.host, leader.port) as connection:
            # More acks=all produces than a connection may have waiting, an
            # acks=1 one (answered as soon as it is appended, but after those before it),
            # then a request of another kind.
            values = [(f"value-{i}".encode(), -1) for i in range(PRODUCES_WAITING)]
            requests = [
                produce_request(
                    name,
                    0,
                    encode_batch([Record(None, value)]),
                    acks=acks,
                    timeout_ms=PRODUCE_TIMEOUT_MS,
                )
                for value, acks in [*values, (b"last", 1)]
            ]
            requests.append(api_versions_request())
            sent = [(request, connection.send(request)) for request in requests]
            # The first PRODUCE_PIPELINE_DEPTH batches are appended although the first
            # still waits for the paused follower (one request at a time would hold the
            # second behind it).
            deadline = time.monotonic() + APPENDED_TIMEOUT_S
            while (_leader_log_end(cluster, name) or 0) < PRODUCE_PIPELINE_DEPTH:
                assert time.monotonic() < deadline, (
                    "the produces behind a waiting acks=all produce were not appended\n"
                    + cluster.log_tails()
                )
                time.sleep(POLL_INTERVAL_S)  # polling interval between scrapes, not a sync
            os.kill(paused.pid, signal.SIGCONT)
            answers = [connection.receive(request, cid) for request, cid in sent]
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    # receive() checked each correlation id: the answers came in request order.
    produced = [only_partition(answer) for answer in answers[:-1]]
    assert [(p.error_code, int(p.base_offset)) for p in produced] == [
        (0, offset) for offset in range(PRODUCES_WAITING + 1)
    ]
    assert answers[-1].error_code == 0


def _in_flight(cluster: Cluster) -> float | None:
    return value(scrape(cluster.broker(LEADER).http_url), "sluice_requests_in_flight")


def _wait_for_leader(condition: Callable[[], bool], what: str, cluster: Cluster) -> None:
    deadline = time.monotonic() + APPENDED_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"{what}\n{cluster.log_tails()}"
        time.sleep(POLL_INTERVAL_S)  # polling interval between scrapes, not a sync


def test_a_connection_ended_before_its_waiting_answer_began_leaves_nothing_in_flight(
    cluster: Cluster,
) -> None:
    """An acks=all Produce waiting for its follower, and behind it on the same read a
    frame the broker refuses (too large): the connection ends before the task that was to
    await the produce's answer took its first step. The request no longer counts in
    flight (sluice_requests_in_flight was left one too high)."""
    name = _replicated_topic(cluster)
    leader = cluster.broker(LEADER)
    paused = cluster.broker(FOLLOWER)
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        # The follower's last fetch, parked at the leader, ends at its wait time.
        _wait_for_leader(lambda: _in_flight(cluster) == 0, "requests stay in flight", cluster)
        produce = produce_request(
            name, 0, encode_batch([Record(None, b"v")]), acks=-1, timeout_ms=PRODUCE_TIMEOUT_MS
        )
        too_large = struct.pack(">i", 2**31 - 1)
        with KafkaConnection(leader.host, leader.port) as connection:
            connection.send_bytes(encode_request(1, CLIENT_ID, produce) + too_large)
            assert connection.wait_closed_by_peer()
        _wait_for_leader(
            lambda: _leader_log_end(cluster, name) == 1, "the produce was not appended", cluster
        )
        _wait_for_leader(
            lambda: _in_flight(cluster) == 0,
            f"{_in_flight(cluster)} request(s) still counted in flight",
            cluster,
        )
    finally:
        os.kill(paused.pid, signal.SIGCONT)
