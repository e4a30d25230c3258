"""acks=all Produce requests pipelined on one connection, on two real brokers: while the
first waits for its follower, the next Produces of the connection are appended (the
connection does not sit out the replication round trip), and the answers still leave
in request order, an acks=1 Produce's and a request of another kind's after them."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator

import pytest
from cluster_processes import Cluster, running_cluster
from confluent_kafka.admin import NewTopic
from kafka_wire import (
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


def test_acks_all_produces_pipeline_while_waiting_and_answer_in_order(cluster: Cluster) -> None:
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
