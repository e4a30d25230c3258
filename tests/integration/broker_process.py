"""A real ``python -m sluice serve`` process on a loopback port, for integration tests.

The broker is started exactly as a user starts it. Unless a test gives a port, its first
start binds port 0 (the kernel's choice, so no two processes can race for one) and the
port is read back from the broker's ready line (:mod:`sluice.testing.ready_line`), which
is also what says it is ready: "the port accepts TCP connections" would be satisfied by
whatever else listens there. Restarts keep the ports (a listener given port 0 in
``listeners`` keeps the port it got too); a restart that finds its port taken tries
again until its deadline. Its stderr (the log) goes to a file that survives restarts, so
a failing test can show what the broker said. The HTTP listener is off unless a test
asks for it (``http_port``): its default port, 8080, would clash between brokers; given
0, a free port is picked here and, should something take it before the broker binds it,
another (``HTTP_PORT_ATTEMPTS``). A broker that fails to start is killed, whatever
stopped the start.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

from sluice.cli.loopback import HOST, free_port
from sluice.storage.machine_boot import BOOT_RECORD_NAME
from sluice.testing.ready_line import ready_http_url, ready_listeners, ready_schema_registry_url

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
STACK_DUMP_TIMEOUT_S = 30.0
"""How long py-spy may take to read the stacks of a broker that would not stop."""
LOG_TAIL_BYTES = 20_000
POLL_INTERVAL_S = 0.05
"""How often a starting broker's log is read for its ready line."""
HTTP_PORT_ATTEMPTS = 5
"""Starts on a newly picked HTTP port after the one picked before was taken."""
BROKER_SHUTDOWN_TIMEOUT_MS = 15_000
"""The brokers' sluice.shutdown.timeout.ms (unless a test gives one): below
STOP_TIMEOUT_S, so a broker whose shutdown hangs ends itself, saying which step it gave
up on, before the harness kills it."""
_PORT_IN_USE = "is already in use"
_HTTP_PORT_IN_USE = "the HTTP port"
_ZERO_PORT_LISTENER = re.compile(r"(?P<name>[A-Za-z0-9_]+)://(?P<host>[^,]*):0(?=,|$)")


class BrokerStartError(RuntimeError):
    pass


class _PortTaken(Exception):
    """The broker exited at start because a port it was told to bind was taken."""

    def __init__(self, http: bool) -> None:
        super().__init__("HTTP port taken" if http else "port taken")
        self.http = http


class BrokerProcess:
    """One broker process; ``stop``/``start`` keep the same ports and data directory."""

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
        http_port_default: bool = False,
    ) -> None:
        self.host = host
        self.command_prefix = list(command_prefix or [])
        """Put before the command line (a test runs the broker in a network namespace)."""
        self.port = port if port is not None else 0
        """The first listener's port: given, or 0 until the first start binds one of the
        kernel's choice (then kept across restarts)."""
        self.listener_ports: dict[str, int] = {}
        """Each listener's bound port by listener name, once started."""
        self._http_port_picked = http_port == 0
        self.http_port_default = http_port_default
        """Start without http.port, as a user does: the HTTP listener on 8080, or on a
        free port when 8080 is taken; :attr:`http_port` is read from the ready line."""
        self.http_port = free_port(host) if http_port == 0 else http_port
        """The HTTP listener's port (metrics, health); None: off. Given 0, a free port
        is picked here (kept across restarts; another if it is taken at the first)."""
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-broker.log"
        self.node_id = node_id
        self.overrides = dict(overrides or {})
        self.extra_arguments = list(extra_arguments or [])
        self.environment = dict(environment or {})
        """Variables added to the broker's environment (tests may change it between
        starts)."""
        self.schema_registry_url: str | None = None
        """Its Schema Registry's URL, read from the ready line of its first start (kept
        across restarts); None before, or without a registry."""
        self.starts = 0
        self.last_exit_code: int | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        assert self.port != 0, "the broker has no port before its first start"
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
        if not self.http_port_default:
            argv += ["-o", f"http.port={self.http_port or 0}"]
        # The registry's default port, 8081, would clash between brokers: a free one,
        # kept across restarts (a test's overrides win).
        argv += ["-o", f"schema.registry.listeners={self._schema_registry_listener()}"]
        argv += ["-o", f"sluice.shutdown.timeout.ms={BROKER_SHUTDOWN_TIMEOUT_MS}"]
        for key, value in self.overrides.items():
            argv += ["-o", f"{key}={self.pin_ports(value) if key == 'listeners' else value}"]
        return argv + [self.pin_ports(argument) for argument in self.extra_arguments]

    def _schema_registry_listener(self) -> str:
        url = self.schema_registry_url
        host = f"[{self.host}]" if ":" in self.host else self.host
        return url if url is not None else f"http://{host}:0"

    def pin_ports(self, listeners: str) -> str:
        """``listeners`` with each ``NAME://host:0`` given the port that listener bound
        at the first start (unchanged before it)."""

        def pinned(match: re.Match[str]) -> str:
            port = self.listener_ports.get(match["name"])
            return match[0] if port is None else f"{match['name']}://{match['host']}:{port}"

        return _ZERO_PORT_LISTENER.sub(pinned, listeners)

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start and return once the broker's log says it accepts clients."""
        assert not self.is_running, "broker already running"
        deadline = time.monotonic() + timeout_s
        http_attempts = 1
        port_taken = False
        while True:
            try:
                self._start_once(deadline, timeout_s)
                return
            except _PortTaken as taken:
                if taken.http and self._http_port_picked and http_attempts < HTTP_PORT_ATTEMPTS:
                    http_attempts += 1
                    self.http_port = free_port(self.host)
                    continue
                port_taken = not taken.http
                if port_taken and self.starts > 1 and time.monotonic() < deadline:
                    continue  # a restart: its port may be free again in a moment
                raise BrokerStartError(
                    f"broker could not bind its port (exit code {self.last_exit_code})\n"
                    f"{self.log_tail()}"
                ) from None
            except BrokerStartError as e:
                if not port_taken:
                    raise
                raise BrokerStartError(
                    f"broker could not bind its port {self.port}: taken at each start until "
                    f"the deadline; {e}"
                ) from None

    def _start_once(self, deadline: float, timeout_s: float) -> None:
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(self.command())}\n".encode())
            log.flush()
            log_start = log.tell()
            self._process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.environment},
            )
        try:
            self._wait_until_ready(log_start, deadline, timeout_s)
        except BaseException:
            # Whatever ended the wait (a timeout, an interrupt, a bad log), nothing may
            # outlive it.
            self._terminate(signal.SIGKILL)
            raise

    def _wait_until_ready(self, log_start: int, deadline: float, timeout_s: float) -> None:
        assert self._process is not None
        while True:
            exit_code = self._process.poll()
            log_text = self._log_since(log_start)
            listeners = ready_listeners(log_text)
            if listeners:
                self.listener_ports = {listener.name: listener.port for listener in listeners}
                self.port = listeners[0].port
                if self.schema_registry_url is None:
                    self.schema_registry_url = ready_schema_registry_url(log_text)
                http_url = ready_http_url(log_text)
                if self.http_port_default and http_url is not None:
                    self.http_port = int(http_url.rsplit(":", 1)[1])
                return
            if exit_code is not None:
                self.last_exit_code = exit_code
                self._process = None
                if _PORT_IN_USE in log_text:
                    raise _PortTaken(http=_HTTP_PORT_IN_USE in log_text)
                raise BrokerStartError(
                    f"broker exited with code {exit_code} before listening\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"broker did not say it was ready within {timeout_s}s\n{self.log_tail()}"
                )
            time.sleep(POLL_INTERVAL_S)  # polling interval while waiting for the log

    def _log_since(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                return log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait; SIGKILL if it has not exited in time. Returns the exit code
        (negative for a signal, as subprocess reports it)."""
        if self._process is None:
            return self.last_exit_code
        return self._terminate(signal.SIGTERM, timeout_s)

    def kill(self) -> int | None:
        """SIGKILL: no chance to flush, checkpoint or close anything. Stays stopped."""
        return self._terminate(signal.SIGKILL)

    def as_after_a_machine_crash(self) -> None:
        """Make the next start of this stopped broker see what a start after its
        machine went down sees: the data directory's boot record names another boot, so
        its registration says its unflushed tail may be lost. (The test cuts whatever
        tail the lost page cache would have held.)"""
        assert not self.is_running, "a machine crash takes the broker down first"
        (self.data_dir / BOOT_RECORD_NAME).write_text("a boot before the machine crashed\n")

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
        # A broker a test paused (SIGSTOP) must run again to act on SIGTERM.
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGCONT)
        try:
            exit_code = process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            stacks = _stacks_of(process.pid)
            with self.log_path.open("ab") as log:
                log.write(f"\n===== did not exit {timeout_s}s after {sig.name}; SIGKILL\n".encode())
                log.write(stacks.encode())
            warnings.warn(
                f"broker {self.log_path} did not exit {timeout_s}s after {sig.name}; "
                "killed; its threads' stacks are at the end of its log",
                stacklevel=2,
            )
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
        return f"BrokerProcess({self.host}:{self.port}, data_dir={self.data_dir}, pid={pid})"


def _py_spy() -> str | None:
    """py-spy of the dev extra: beside this interpreter (a virtualenv's bin directory,
    found whether or not it is on PATH, and without resolving the interpreter's symlink
    out of the virtualenv), else on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    if beside.exists():
        return str(beside)
    return shutil.which("py-spy")


def _stacks_of(pid: int) -> str:
    """Every thread's Python stack in process ``pid`` (py-spy, when installed), so a
    broker that would not stop says where it was."""
    py_spy = _py_spy()
    if py_spy is None:
        return "(py-spy is not installed (pip install -e '.[dev]'): no stacks)\n"
    try:
        done = subprocess.run(
            [py_spy, "dump", "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=STACK_DUMP_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "(py-spy dump timed out)\n"
    return done.stdout + done.stderr
