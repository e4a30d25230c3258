"""The cluster tests' harness: brokers on ports of the kernel's choice registered with the
ports they bound, a cluster that fails to start leaving nothing running, and a private
ZooKeeper that neither races another for its port nor mistakes another for itself."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

import pytest
from broker_process import BrokerStartError
from cluster_processes import Cluster, running_cluster
from process_leaks import descendants

from sluice.cli.local_zookeeper import LocalZooKeeper, ZooKeeperError, is_ok


def test_brokers_on_port_0_register_the_ports_they_bound(
    tmp_path: Path, zookeeper: LocalZooKeeper
) -> None:
    with running_cluster(tmp_path, zookeeper.connect, 2) as cluster:
        ports = {broker.node_id: broker.port for broker in cluster.brokers}
        assert 0 not in ports.values()
        assert len(set(ports.values())) == 2
        status = cluster.wait_for(lambda s: len(s["brokers"]) == 2)
        # What every client is told: the bound ports, not the 0 the brokers were given.
        assert {b["node_id"]: b["port"] for b in status["brokers"]} == ports


def test_a_cluster_that_fails_to_start_leaves_nothing_running(
    tmp_path: Path, zookeeper: LocalZooKeeper
) -> None:
    cluster = Cluster(tmp_path, f"{zookeeper.connect}/{uuid.uuid4().hex}", 2)
    second = cluster.broker(1).data_dir
    second.rmdir()
    second.write_text("a file where the data directory should be\n")
    with pytest.raises(BrokerStartError, match="is a file"):
        cluster.start()
    assert cluster.broker(0).starts == 1  # it had started before the second failed
    assert cluster.running() == []
    left = [p for p in descendants(os.getpid()) if str(tmp_path) in p.command]
    assert left == [], left


def test_zookeeper_takes_another_port_when_its_picked_one_is_taken(tmp_path: Path) -> None:
    server = LocalZooKeeper(tmp_path / "zookeeper")
    picked = server.port
    with socket.socket() as taken:
        taken.bind((server.host, picked))
        taken.listen()
        with server:
            assert server.port != picked
            assert is_ok(server.host, server.port)


def test_another_zookeeper_on_the_port_is_not_taken_for_this_one(
    tmp_path: Path, zookeeper: LocalZooKeeper
) -> None:
    """Answering ``ruok`` is not enough: the server must be this one (its data
    directory). A port given explicitly is not replaced."""
    second = LocalZooKeeper(tmp_path / "second", port=zookeeper.port)
    with pytest.raises(ZooKeeperError, match="did not start"):
        second.start()
    assert is_ok(zookeeper.host, zookeeper.port)  # the first one still serves
