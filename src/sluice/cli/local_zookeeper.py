"""A private ZooKeeper on loopback, for ``sluice dev-cluster`` and the cluster tests.

It runs the ZooKeeper of the Debian package ``zookeeper`` (3.8, with Java 17) as a child
process, standalone, from a directory of its own::

    <directory>/zoo.cfg            written here: dataDir, 127.0.0.1 and a free port
    <directory>/log4j.properties   its logging, to the file below (nothing under /var)
    <directory>/data/              its snapshots and transaction log
    <directory>/zookeeper.log      what it logged and printed

The class path is ``zookeeper.jar`` (whose manifest names its dependencies) and one slf4j
binding, log4j's: ``/usr/share/java`` holds several bindings, and slf4j would pick one
that drops every message.

It is ready when it answers ``ruok`` with ``imok`` on its port and ``conf`` names its own
data directory (polled until :data:`START_TIMEOUT_S`): another ZooKeeper on that port
would answer ``ruok`` too. ZooKeeper cannot bind port 0, so the port is picked free
beforehand; when something takes it before ZooKeeper binds it (ZooKeeper then exits),
a port picked here is replaced by another (:data:`PORT_ATTEMPTS`). The tick is short
(:data:`TICK_MS`) so that brokers may use session timeouts of a few seconds: ZooKeeper
allows sessions of 2 to 20 ticks.

It dies with the process that started it, whatever ends that process
(:mod:`sluice.cli.parent_death`: start it from a thread that outlives it, the main one).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from sluice.cli.loopback import HOST, free_port
from sluice.cli.parent_death import die_with_parent

JAVA = "java"
JAVA_DIR = Path("/usr/share/java")
ZOOKEEPER_JAR = JAVA_DIR / "zookeeper.jar"
CLASSPATH = ":".join(
    str(JAVA_DIR / jar) for jar in ("zookeeper.jar", "slf4j-log4j12.jar", "log4j-1.2.jar")
)
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

TICK_MS = 500
"""ZooKeeper's tickTime: sessions may last 2 to 20 ticks (1 to 10 s here)."""
START_TIMEOUT_S = 60.0
"""How long ZooKeeper may take to answer ``ruok`` after starting (about 1-3 s here)."""
STOP_TIMEOUT_S = 10.0
"""How long ZooKeeper may take to exit after SIGTERM before it is killed."""
POLL_INTERVAL_S = 0.05
"""How often readiness is checked while waiting."""
PORT_ATTEMPTS = 5
"""Starts on a newly picked port after the one picked before was taken meanwhile."""
ANSWER_BYTES_MAX = 64 * 1024
"""The most of a four-letter command's answer read (``conf`` is about 1 KiB)."""
_PORT_TAKEN = "java.net.BindException"


class ZooKeeperError(Exception):
    """ZooKeeper could not be started; the message says why and what to do."""


def is_ok(host: str, port: int) -> bool:
    """Whether a ZooKeeper server answers ``ruok`` with ``imok`` at host:port."""
    try:
        with socket.create_connection((host, port), timeout=1.0) as connection:
            connection.sendall(b"ruok")
            return connection.recv(4) == b"imok"
    except OSError:
        return False


def serves_from(host: str, port: int, data_dir: Path) -> bool:
    """Whether the ZooKeeper server at host:port keeps its data in ``data_dir`` (its
    ``conf`` answer names it): that it is this one, not another on the same port."""
    try:
        with socket.create_connection((host, port), timeout=1.0) as connection:
            connection.sendall(b"conf")
            answer = b""
            while len(answer) < ANSWER_BYTES_MAX and (chunk := connection.recv(4096)):
                answer += chunk
    except OSError:
        return False
    # ZooKeeper keeps its files in a version-2 directory under the dataDir it was given.
    own = data_dir.resolve()
    return any(
        line.startswith("dataDir=") and Path(line.removeprefix("dataDir=")).parent == own
        for line in answer.decode(errors="replace").splitlines()
    )


class LocalZooKeeper:
    """One standalone ZooKeeper process; ``with LocalZooKeeper(dir) as zk: zk.connect``."""

    def __init__(
        self,
        directory: Path,
        port: int | None = None,
        *,
        host: str = HOST,
        command_prefix: Sequence[str] = (),
    ) -> None:
        self.directory = Path(directory)
        self.host = host
        """The address it listens on (loopback unless given)."""
        self.command_prefix = list(command_prefix)
        """Put before the java command line (a test runs it in a network namespace)."""
        self._port_picked = port is None
        self.port = port if port is not None else free_port(host)
        self.log_path = self.directory / "zookeeper.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def connect(self) -> str:
        """The connection string brokers take (``--zookeeper``)."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self._process is not None, "ZooKeeper is not running"
        return self._process.pid

    def poll(self) -> int | None:
        """None while it runs (or was never started); once it exited, its exit code
        (negative: the signal that ended it), until :meth:`stop`."""
        return None if self._process is None else self._process.poll()

    def start(self) -> None:
        """Start and return once it serves (see the module docstring); raises
        ZooKeeperError when it cannot start."""
        for _attempt in range(PORT_ATTEMPTS - 1):
            if self._start_once() or not self._port_picked:
                return
            self.port = free_port(self.host)
        if not self._start_once():
            raise ZooKeeperError(
                f"ZooKeeper found its port taken {PORT_ATTEMPTS} times in a row; its log "
                f"is {self.log_path}"
            )

    def _start_once(self) -> bool:
        """Start on ``self.port`` and wait until it serves: True; False when the port
        was taken before it bound it and the port was picked here (try another)."""
        if not ZOOKEEPER_JAR.exists():
            raise ZooKeeperError(
                f"ZooKeeper is not installed ({ZOOKEEPER_JAR} is missing): "
                "install it with 'apt-get install zookeeper' (make install does)"
            )
        data_dir = self.directory / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        config = self.directory / "zoo.cfg"
        config.write_text(
            f"tickTime={TICK_MS}\n"
            f"dataDir={data_dir}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,conf\n"
        )
        logging_config = self.directory / "log4j.properties"
        logging_config.write_text(
            "log4j.rootLogger=INFO, CONSOLE\n"
            "log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %m%n\n"
        )
        self._log = self.log_path.open("ab")
        log_start = self._log.tell()
        try:
            self._process = subprocess.Popen(
                [
                    *self.command_prefix,
                    JAVA,
                    f"-Dlog4j.configuration=file:{logging_config}",
                    "-cp",
                    CLASSPATH,
                    MAIN_CLASS,
                    str(config),
                ],
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=self._log,
                start_new_session=True,  # Ctrl-C in a terminal goes to us, not to it
                # Nor does it outlive us; the child makes one prctl call, no allocation.
                preexec_fn=die_with_parent(),  # noqa: PLW1509
            )
        except FileNotFoundError:
            self._close_log()
            raise ZooKeeperError(
                "java is not installed: ZooKeeper needs Java 17 "
                "('apt-get install openjdk-17-jre-headless'; make install does)"
            ) from None
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while not (is_ok(self.host, self.port) and serves_from(self.host, self.port, data_dir)):
                exited = self._process.poll() is not None
                if exited and self._port_picked and _PORT_TAKEN in self._log_since(log_start):
                    self.stop()
                    return False
                if exited or time.monotonic() > deadline:
                    raise ZooKeeperError(
                        f"ZooKeeper did not start on {self.connect}; its log is {self.log_path}"
                    )
                time.sleep(POLL_INTERVAL_S)
        except BaseException:
            self.stop()  # nothing outlives a failed start
            raise
        return True

    def _log_since(self, offset: int) -> str:
        with self.log_path.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def stop(self) -> None:
        process = self._process
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            self._process = None
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
