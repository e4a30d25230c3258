"""A real ``python -m sluice serve`` process on a loopback port, for integration tests.

The broker is started exactly as a user starts it; readiness is "the port accepts TCP
connections", polled with a deadline. Its stderr (the log) goes to a file that survives
restarts, so a failing test can show what the broker said. The HTTP listener is off
unless a test asks for it (``http_port``): its default port, 8080, would clash between
brokers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sluice.cli.loopback import HOST, accepts_connections, free_port

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
LOG_TAIL_BYTES = 20_000


class BrokerStartError(RuntimeError):
    pass


class BrokerProcess:
    """One broker process; ``stop``/``start`` keep the same port and data directory."""

    def __init__(
        self,
        data_dir: Path,
        *,
        host: str = HOST,
        port: int | None = None,
        node_id: int = 0,
        overrides: dict[str, str] | None = None,
        extra_arguments: list[str] | None = None,
        environment: dict[str, str] | None = None,
        command_prefix: list[str] | None = None,
        http_port: int | None = None,
    ) -> None:
        self.host = host
        self.command_prefix = list(command_prefix or [])
        """Put before the command line (a test runs the broker in a network namespace)."""
        self.port = port if port is not None else free_port(host)
        self.http_port = free_port(host) if http_port == 0 else http_port
        """The HTTP listener's port (metrics, health); None: off. Given 0, a free port
        is picked here (kept across restarts)."""
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-broker.log"
        self.node_id = node_id
        self.overrides = dict(overrides or {})
        self.extra_arguments = list(extra_arguments or [])
        self.environment = dict(environment or {})
        """Variables added to the broker's environment (tests may change it between
        starts)."""
        self.starts = 0
        self.last_exit_code: int | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def http_url(self) -> str:
        assert self.http_port is not None, "started without http_port"
        return f"http://{self.host}:{self.http_port}"

    @property
    def pid(self) -> int:
        assert self._process is not None, "broker is not running"
        return self._process.pid

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def command(self) -> list[str]:
        argv = [
            *self.command_prefix,
            sys.executable,
            "-m",
            "sluice",
            "serve",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--node-id",
            str(self.node_id),
        ]
        argv += ["-o", f"http.port={self.http_port or 0}"]
        for key, value in self.overrides.items():
            argv += ["-o", f"{key}={value}"]
        return argv + self.extra_arguments

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        assert not self.is_running, "broker already running"
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(self.command())}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.environment},
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            exit_code = self._process.poll()
            if exit_code is not None:
                self.last_exit_code = exit_code
                self._process = None
                raise BrokerStartError(
                    f"broker exited with code {exit_code} before listening\n{self.log_tail()}"
                )
            if accepts_connections(self.port, self.host):
                return
            time.sleep(0.05)  # polling interval while waiting for the port, not a sync
        self._terminate(signal.SIGKILL)
        raise BrokerStartError(
            f"broker did not listen on {self.bootstrap} within {timeout_s}s\n{self.log_tail()}"
        )

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait; SIGKILL if it has not exited in time. Returns the exit code
        (negative for a signal, as subprocess reports it)."""
        if self._process is None:
            return self.last_exit_code
        return self._terminate(signal.SIGTERM, timeout_s)

    def kill(self) -> int | None:
        """SIGKILL: no chance to flush, checkpoint or close anything. Stays stopped."""
        return self._terminate(signal.SIGKILL)

    def kill9(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """SIGKILL, then start again on the same port and data directory."""
        self.kill()
        self.start(timeout_s)

    def restart(self, timeout_s: float = START_TIMEOUT_S) -> None:
        self.stop()
        self.start(timeout_s)

    def _terminate(self, sig: signal.Signals, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        process = self._process
        if process is None:
            return self.last_exit_code
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)
        try:
            exit_code = process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with self.log_path.open("ab") as log:
                log.write(f"\n===== did not exit {timeout_s}s after {sig.name}; SIGKILL\n".encode())
            process.kill()
            exit_code = process.wait()
        self._process = None
        self.last_exit_code = exit_code
        return exit_code

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, size_bytes: int = LOG_TAIL_BYTES) -> str:
        text = self.log_text()
        return text[-size_bytes:]

    def __repr__(self) -> str:
        pid = self._process.pid if self._process is not None else None
        return f"BrokerProcess({self.bootstrap}, data_dir={self.data_dir}, pid={pid})"
