"""A cluster of real ``sluice serve --zookeeper`` processes on loopback ports, sharing a
private ZooKeeper (one chroot per cluster), for the cluster tests.

Each broker binds port 0 at its first start (see ``broker_process``) and registers the
port it got, so brokers of concurrent tests never race for a port. A cluster that fails
to start stops the brokers it had started before it raises."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from broker_process import BrokerProcess
from confluent_kafka.admin import AdminClient
from netns import TestNetwork

SESSION_TIMEOUT_MS = 4_000
"""The brokers' ZooKeeper session: a dead broker is noticed within this."""
SETTLE_TIMEOUT_S = 60.0
NAMESPACE_BROKER_PORT = 9092
"""Each broker in a network namespace has the namespace's ports to itself."""
POLL_INTERVAL_S = 0.1


class Cluster:
    def __init__(
        self,
        base_dir: Path,
        zookeeper_connect: str,
        size: int,
        overrides: dict[str, str] | None = None,
        network: TestNetwork | None = None,
        *,
        http: bool = False,
    ) -> None:
        """With ``network``, broker i runs in its node i (its own address, port 9092).
        With ``http``, each broker has an HTTP listener (metrics) on a free port."""
        self.zookeeper_connect = zookeeper_connect
        self.brokers = [
            BrokerProcess(
                base_dir / f"broker-{node_id}",
                **(
                    {}
                    if network is None
                    else {
                        "host": network.address(node_id),
                        "port": NAMESPACE_BROKER_PORT,
                        "command_prefix": network.command(node_id),
                    }
                ),
                node_id=node_id,
                http_port=0 if http else None,
                extra_arguments=["--zookeeper", zookeeper_connect],
                overrides={
                    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                    **(overrides or {}),
                },
            )
            for node_id in range(size)
        ]

    def start(self) -> None:
        """Start every broker and wait until all are registered; on any failure, stop
        those started (then raise)."""
        try:
            for broker in self.brokers:
                broker.start()
            self.wait_for(lambda status: len(status["brokers"]) == len(self.brokers))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every broker, each even when stopping another failed (the first failure
        is raised once all were tried)."""
        failures: list[BaseException] = []
        for broker in self.brokers:
            try:
                broker.stop()
            except Exception as e:
                failures.append(e)
        if failures:
            raise failures[0]

    def broker(self, node_id: int) -> BrokerProcess:
        return self.brokers[node_id]

    def running(self) -> list[BrokerProcess]:
        return [b for b in self.brokers if b.is_running]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.running())

    def status(self, via: BrokerProcess | None = None) -> dict[str, Any]:
        """``sluice cluster status --format json`` through one running broker."""
        broker = via or self.running()[0]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "sluice",
                "cluster",
                "status",
                "--format",
                "json",
                "--bootstrap-server",
                broker.bootstrap,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode in (0, 2), done.stderr
        document: dict[str, Any] = json.loads(done.stdout)
        return document

    def wait_for(
        self,
        condition: Callable[[dict[str, Any]], bool],
        timeout_s: float = SETTLE_TIMEOUT_S,
        via: BrokerProcess | None = None,
    ) -> dict[str, Any]:
        """Poll the cluster status until ``condition`` holds (or fail with the last one)."""
        deadline = time.monotonic() + timeout_s
        while True:
            through = via or self.running()[0]
            status = self.status(through)
            if condition(status):
                return status
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"cluster did not settle in {timeout_s}s; status through broker "
                    f"{through.node_id}: {status}\n{self.log_tails()}"
                )
            time.sleep(POLL_INTERVAL_S)

    def admin(self, via: BrokerProcess) -> AdminClient:
        return AdminClient({"bootstrap.servers": via.bootstrap, "socket.timeout.ms": 10_000})

    def log_tails(self) -> str:
        return "\n".join(f"--- broker {b.node_id}\n{b.log_tail(4000)}" for b in self.brokers)


@contextlib.contextmanager
def running_cluster(
    base_dir: Path,
    zookeeper_connect: str,
    size: int,
    overrides: dict[str, str] | None = None,
    network: TestNetwork | None = None,
    *,
    http: bool = False,
) -> Iterator[Cluster]:
    """A started cluster under a chroot of its own, stopped at the end (brokers a test
    left paused with SIGSTOP are resumed first, so that they can stop). With ``http``,
    each broker serves HTTP (metrics) on a free port."""
    cluster = Cluster(
        base_dir, f"{zookeeper_connect}/{uuid.uuid4().hex}", size, overrides, network, http=http
    )
    cluster.start()  # stops what it started when it fails
    try:
        yield cluster
    finally:
        cluster.stop()  # paused brokers are resumed (SIGCONT) to act on SIGTERM
