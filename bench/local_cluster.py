"""A private ZooKeeper and a few ``sluice serve --zookeeper`` brokers on loopback, for the
cluster benchmarks (``cluster_failover.py``, ``replication.py``).

Everything lives under one directory, removed at the end unless the benchmark failed
(then its path is printed, for the logs)::

    <dir>/zookeeper/          the ZooKeeper's data, config and log
    <dir>/broker-<id>/        each broker's data directory
    <dir>/broker-<id>.log     each broker's log

``with LocalCluster(3) as cluster:`` starts ZooKeeper, then the brokers, and waits until
each accepts connections; leaving the block (normally, by an exception, by Ctrl-C, or by
SIGTERM, which :func:`exit_on_sigterm` turns into an exception) stops every broker
(SIGTERM, then SIGKILL after :data:`BROKER_STOP_TIMEOUT_S`) and then ZooKeeper. Brokers
run in sessions of their own, so a Ctrl-C reaches the benchmark only and they are
stopped in order.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Self

from sluice.cli.local_zookeeper import LocalZooKeeper
from sluice.cli.loopback import HOST, accepts_connections, free_port

BROKER_START_TIMEOUT_S = 60.0
"""How long a broker may take to accept connections after it is started."""
BROKER_STOP_TIMEOUT_S = 30.0
"""How long a broker may take to exit after SIGTERM before it is killed."""
POLL_INTERVAL_S = 0.05
"""How often a condition is checked while waiting for it."""


def wait_until(condition: Callable[[], bool], timeout_s: float) -> float:
    """Seconds until ``condition()`` holds (polled); raises TimeoutError after
    ``timeout_s``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"not within {timeout_s}s")
        time.sleep(POLL_INTERVAL_S)
    return time.monotonic() - started


def exit_on_sigterm() -> None:
    """Make SIGTERM end the benchmark as Ctrl-C does: by an exception, so that every
    ``finally`` (and :class:`LocalCluster`'s exit) runs."""

    def _raise(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _raise)


class LocalCluster:
    """ZooKeeper and ``broker_count`` brokers (node ids 0..n-1) on free loopback ports."""

    def __init__(self, broker_count: int, overrides: list[str] | None = None) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="sluice-cluster-"))
        self.ports = [free_port() for _ in range(broker_count)]
        self.overrides = list(overrides or [])
        """``-o key=value`` settings every broker is started with."""
        self.brokers: dict[int, subprocess.Popen[bytes]] = {}
        self._logs: dict[int, IO[bytes]] = {}
        self.zookeeper = LocalZooKeeper(self.directory / "zookeeper")

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{port}" for port in self.ports)

    def address(self, node_id: int) -> str:
        return f"{HOST}:{self.ports[node_id]}"

    def log_path(self, node_id: int) -> Path:
        return self.directory / f"broker-{node_id}.log"

    def start_broker(self, node_id: int) -> None:
        """Start broker ``node_id`` on its data directory (again, after a kill) and wait
        until it accepts connections."""
        self._close_log(node_id)
        log = self._logs[node_id] = self.log_path(node_id).open("ab")
        overrides = [argument for o in self.overrides for argument in ("-o", o)]
        process = self.brokers[node_id] = subprocess.Popen(
            [sys.executable, "-m", "sluice", "serve", f"--node-id={node_id}", f"--host={HOST}",
             f"--port={self.ports[node_id]}", f"--data-dir={self.directory / f'broker-{node_id}'}",
             f"--zookeeper={self.zookeeper.connect}", "-o", "http.port=0",
             "-o", "schema.registry.listeners=", *overrides],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + BROKER_START_TIMEOUT_S
        while not accepts_connections(self.ports[node_id]):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = self.log_path(node_id).read_text(errors="replace")[-3000:]
                raise RuntimeError(f"broker {node_id} did not start; its log ends:\n{tail}")
            time.sleep(POLL_INTERVAL_S)

    def kill_broker(self, node_id: int) -> None:
        """SIGKILL broker ``node_id`` and wait until it is gone."""
        self.brokers[node_id].send_signal(signal.SIGKILL)
        self.brokers[node_id].wait()

    def stop(self, *, remove: bool = True) -> None:
        """Stop every broker (SIGTERM, SIGKILL after a timeout), then ZooKeeper; remove
        the directory unless ``remove`` is false."""
        running = [p for p in self.brokers.values() if p.poll() is None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        for process in running:
            try:
                process.wait(BROKER_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for node_id in list(self._logs):
            self._close_log(node_id)
        self.zookeeper.stop()
        if remove:
            shutil.rmtree(self.directory, ignore_errors=True)
        else:
            print(f"cluster logs kept in {self.directory}", file=sys.stderr)

    def _close_log(self, node_id: int) -> None:
        log = self._logs.pop(node_id, None)
        if log is not None:
            log.close()

    def __enter__(self) -> Self:
        try:
            self.zookeeper.start()
            for node_id in range(len(self.ports)):
                self.start_broker(node_id)
        except BaseException:
            self.stop(remove=False)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop(remove=exc_type is None)
