"""Faults in a cluster of three real brokers, made with real signals: kill -9 of the
controller (another broker takes over within seconds, no metadata is lost, the dead
broker's partitions are offline until it returns and then lead again with their data),
and SIGSTOP of the controller past its ZooKeeper session (it is fenced, and writes nothing
when it wakes)."""

from __future__ import annotations

import datetime
import os
import signal
import time
import uuid
from collections.abc import Iterator

import pytest
from broker_process import BrokerProcess
from client_helpers import consume_exactly, produce_and_flush, producer_config
from cluster_processes import SESSION_TIMEOUT_MS, Cluster, running_cluster
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from sluice.cli.local_zookeeper import LocalZooKeeper

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLIENT_TIMEOUT_S = 60.0
FAILOVER_BOUND_S = SESSION_TIMEOUT_MS / 1000 * 3
"""A new controller within three session timeouts (it takes one, plus an election)."""
LOG_TIME_FORMAT = "%Y-%m-%d %H:%M:%S,%f"
"""The time at the start of each line of a broker's log (``sluice serve``'s format)."""


def _became_controller_at(broker: BrokerProcess, since: int) -> float | None:
    """When (wall clock, seconds) the broker's log, past ``since`` characters, says it
    became the controller; None if it does not."""
    for line in broker.log_text()[since:].splitlines():
        if f"broker {broker.node_id} is now the controller" in line:
            stamp = datetime.datetime.strptime(line[:23], LOG_TIME_FORMAT)
            return stamp.timestamp()
    return None


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster"), zookeeper.connect, 3) as started:
        yield started


def _make_topic(cluster: Cluster, name: str, partitions: int) -> None:
    admin = cluster.admin(cluster.running()[0])
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(CLIENT_TIMEOUT_S)


def _leaders(status: dict[str, object], name: str) -> dict[int, int]:
    topics = status["topics"]
    assert isinstance(topics, dict)
    return {p["partition"]: p["leader"] for p in topics[name]}


def test_kill_9_of_the_controller_moves_control_and_the_broker_returns(cluster: Cluster) -> None:
    name = f"orders-{uuid.uuid4().hex[:6]}"
    _make_topic(cluster, name, 12)
    status = cluster.wait_for(lambda s: name in s["topics"])
    controller = status["controller_id"]
    led_by_controller = [p for p, leader in _leaders(status, name).items() if leader == controller]
    assert len(led_by_controller) == 4
    producer = Producer(producer_config(cluster.bootstrap))
    produce_and_flush(
        producer,
        name,
        [{"value": f"before-{i}".encode(), "partition": i % 12} for i in range(240)],
    )

    logged = {b.node_id: len(b.log_text()) for b in cluster.brokers}
    killed_at = time.time()
    cluster.broker(controller).kill()
    after = cluster.wait_for(lambda s: s["controller_id"] not in (-1, controller))
    # Timed by the new controller's own log line, not by the status polls that saw it
    # (each a new process, slow on a busy machine).
    elected_at = _became_controller_at(
        cluster.broker(after["controller_id"]), logged[after["controller_id"]]
    )
    assert elected_at is not None, cluster.log_tails()
    failover_s = elected_at - killed_at
    assert failover_s < FAILOVER_BOUND_S, f"failover took {failover_s:.1f}s"
    # Nothing in the metadata was lost; the dead broker's partitions are offline.
    offline = cluster.wait_for(lambda s: len(s["offline_partitions"]) == 4)
    assert {p["partition"] for p in offline["offline_partitions"] if p["topic"] == name} == set(
        led_by_controller
    )
    assert set(offline["topics"]) == set(status["topics"])
    assert len(offline["topics"][name]) == 12
    assert after["controller_id"] != controller

    # Back with its data: it leads its partitions again, at a newer leader epoch.
    cluster.broker(controller).start()
    back = cluster.wait_for(lambda s: not s["offline_partitions"] and len(s["brokers"]) == 3)
    assert _leaders(back, name) == _leaders(status, name)
    epochs_before = {p["partition"]: p["leader_epoch"] for p in status["topics"][name]}
    for partition in back["topics"][name]:
        if partition["partition"] in led_by_controller:
            assert partition["leader_epoch"] > epochs_before[partition["partition"]]
    messages = consume_exactly(cluster.bootstrap, [(name, p) for p in range(12)], 240)
    assert sorted(m.value() for m in messages) == sorted(f"before-{i}".encode() for i in range(240))


def test_kill_9_and_restart_of_the_controller_moves_what_it_led(cluster: Cluster) -> None:
    """The controller crashes and is back (registered anew) before another broker is
    elected: the new controller still sees a restarted broker and moves its leaderships
    to replicas that stayed up, at new leader epochs (it may have lost an unflushed
    tail)."""
    name = f"bounced-{uuid.uuid4().hex[:6]}"
    admin = cluster.admin(cluster.running()[0])
    admin.create_topics([NewTopic(name, 3, 3)])[name].result(CLIENT_TIMEOUT_S)
    status = cluster.wait_for(lambda s: name in s["topics"])
    controller = status["controller_id"]
    led = {
        p["partition"]: p["leader_epoch"]
        for p in status["topics"][name]
        if p["leader"] == controller
    }
    assert len(led) == 1, "leaders go round-robin: the controller leads one partition"
    stayed_up = next(b for b in cluster.brokers if b.node_id != controller)

    cluster.broker(controller).kill9()
    moved = cluster.wait_for(
        lambda s: all(
            p["leader"] not in (-1, controller) for p in s["topics"][name] if p["partition"] in led
        ),
        via=stayed_up,
    )
    for partition in moved["topics"][name]:
        if partition["partition"] in led:
            assert partition["leader_epoch"] > led[partition["partition"]]


def test_a_paused_controller_is_fenced_and_writes_nothing(cluster: Cluster) -> None:
    name = f"paused-{uuid.uuid4().hex[:6]}"
    _make_topic(cluster, name, 6)
    status = cluster.wait_for(lambda s: name in s["topics"])
    paused_id = status["controller_id"]
    paused = cluster.broker(paused_id)
    others = [b for b in cluster.brokers if b.node_id != paused_id]
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        cluster.wait_for(lambda s: s["controller_id"] not in (-1, paused_id), via=others[0])
        # While it sleeps, a second broker dies: the new controller moves leadership.
        victim = others[1]
        victim.kill()
        moved = cluster.wait_for(
            lambda s: all(p["leader"] != victim.node_id for p in s["topics"][name]),
            via=others[0],
        )
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    # The woken broker learns it lost its session and that another broker controls.
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while "no longer the controller" not in paused.log_text() and (
        "stops acting as controller" not in paused.log_text()
    ):
        assert time.monotonic() < deadline, paused.log_tail()
        time.sleep(0.1)  # polling the broker's log for the event
    # It wrote nothing over the newer state: leader epochs never went back.
    settled = cluster.wait_for(lambda s: len(s["brokers"]) == 2, via=others[0])
    original = _leaders(status, name)
    for before, now in zip(moved["topics"][name], settled["topics"][name], strict=True):
        assert now["leader_epoch"] >= before["leader_epoch"]
        led_first_by = original[now["partition"]]
        if led_first_by == victim.node_id:
            assert now["leader"] == -1  # its only replica is dead: offline
        elif led_first_by == paused_id:
            assert now["leader"] in (-1, paused_id)  # back once it registered again
        else:
            assert now["leader"] == before["leader"] == led_first_by
    assert settled["controller_id"] == moved["controller_id"]
