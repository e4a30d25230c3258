"""``sluice dev-cluster``: a private ZooKeeper and N brokers on loopback, for trying a
cluster out on one machine. Everything lives under one directory::

    <dir>/zookeeper/            the ZooKeeper's data, config and log
    <dir>/broker-<id>/          each broker's data directory
    <dir>/broker-<id>.log       each broker's log

Brokers listen on consecutive ports from ``--port``, and serve HTTP (metrics, health, the
console) on consecutive ports from ``--http-port`` (0: no HTTP listener); Ctrl-C (or
SIGTERM) stops them all, then ZooKeeper. Started again on the same directory, the
cluster comes back with its topics and data.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import click

from sluice.cli.local_zookeeper import LocalZooKeeper, ZooKeeperError
from sluice.cli.loopback import HOST, accepts_connections

BROKER_START_TIMEOUT_S = 60.0
"""How long each broker may take to listen."""
BROKER_STOP_TIMEOUT_S = 30.0
"""How long each broker may take to stop cleanly after SIGTERM before it is killed."""
POLL_INTERVAL_S = 0.1
BROKERS_MAX = 16
"""More brokers than this on one machine only compete for its cores."""


class _Broker:
    def __init__(
        self, node_id: int, port: int, http_port: int, directory: Path, zookeeper: str
    ) -> None:
        self.node_id = node_id
        self.port = port
        self.http_port = http_port
        """0: no HTTP listener."""
        self.data_dir = directory / f"broker-{node_id}"
        self.log_path = directory / f"broker-{node_id}.log"
        self.zookeeper = zookeeper
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def arguments(self) -> list[str]:
        return [
            f"--node-id={self.node_id}",
            f"--host={HOST}",
            f"--port={self.port}",
            f"--data-dir={self.data_dir}",
            f"--zookeeper={self.zookeeper}",
            "-o",
            f"http.port={self.http_port}",
        ]

    def start(self) -> None:
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sluice", "serve", *self.arguments()],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,  # Ctrl-C reaches dev-cluster, which stops them in order
        )

    def waitaccepts_connections(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + BROKER_START_TIMEOUT_S
        while not accepts_connections(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = self.log_path.read_text(errors="replace")[-3000:]
                raise click.ClickException(
                    f"broker {self.node_id} did not start on port {self.port}; the end of "
                    f"its log ({self.log_path}):\n{tail}"
                )
            time.sleep(POLL_INTERVAL_S)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(BROKER_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None


def _check_ports(port: int, count: int, option: str = "--port") -> None:
    for candidate in range(port, port + count):
        if accepts_connections(candidate):
            raise click.ClickException(
                f"port {candidate} is already in use: stop what listens there or pass "
                f"{option} (the brokers take {count} consecutive ports)"
            )


@click.command("dev-cluster")
@click.option(
    "--brokers",
    "broker_count",
    type=click.IntRange(1, BROKERS_MAX),
    default=3,
    show_default=True,
    help="How many brokers to start.",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535 - BROKERS_MAX),
    default=9092,
    show_default=True,
    help="The first broker's port; the others take the next ones.",
)
@click.option(
    "--http-port",
    type=click.IntRange(0, 65535 - BROKERS_MAX),
    default=8080,
    show_default=True,
    help="The first broker's HTTP port (metrics, health, console); the others take the "
    "next ones. 0: no HTTP listeners.",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("./dev-cluster"),
    show_default=True,
    help="Where ZooKeeper's and the brokers' data and logs go.",
)
def dev_cluster(*, broker_count: int, port: int, http_port: int, directory: Path) -> None:
    """Start a private ZooKeeper and a cluster of brokers on this machine (loopback only)
    and keep them running until Ctrl-C, which stops them all."""
    _check_ports(port, broker_count)
    if http_port:
        _check_ports(http_port, broker_count, "--http-port")
    directory.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    zookeeper = LocalZooKeeper(directory / "zookeeper", port=_zookeeper_port(directory))
    try:
        zookeeper.start()
    except ZooKeeperError as e:
        raise click.ClickException(str(e)) from None
    brokers = [
        _Broker(
            node_id,
            port + node_id,
            http_port + node_id if http_port else 0,
            directory,
            zookeeper.connect,
        )
        for node_id in range(broker_count)
    ]
    try:
        for broker in brokers:
            broker.start()
        for broker in brokers:
            broker.waitaccepts_connections()
        bootstrap = ",".join(f"{HOST}:{b.port}" for b in brokers)
        click.echo(f"ZooKeeper on {zookeeper.connect} (log: {zookeeper.log_path})")
        for broker in brokers:
            http = f", HTTP on http://{HOST}:{broker.http_port}" if broker.http_port else ""
            click.echo(
                f"broker {broker.node_id} on {HOST}:{broker.port}{http} (log: {broker.log_path})"
            )
        click.echo(
            f"\nBootstrap servers: {bootstrap}\n"
            f"Try:  sluice cluster status --bootstrap-server {HOST}:{port}\n"
            "Ctrl-C stops the cluster.",
        )
        sys.stdout.flush()
        while not stop.wait(POLL_INTERVAL_S * 10):
            for broker in brokers:
                assert broker.process is not None
                if broker.process.poll() is not None:
                    click.echo(
                        f"broker {broker.node_id} exited (code {broker.process.returncode}); "
                        f"see {broker.log_path}",
                        err=True,
                    )
                    stop.set()
    finally:
        click.echo("stopping the brokers and ZooKeeper…", err=True)
        for broker in brokers:
            with contextlib.suppress(Exception):
                broker.stop()
        zookeeper.stop()


def _zookeeper_port(directory: Path) -> int | None:
    """The port ZooKeeper had in this directory before (so brokers find their cluster
    under the same address), or None for a free one."""
    config = directory / "zookeeper" / "zoo.cfg"
    if not config.exists():
        return None
    for line in config.read_text().splitlines():
        if line.startswith("clientPort="):
            previous = int(line.split("=", 1)[1])
            return None if accepts_connections(previous) else previous
    return None
