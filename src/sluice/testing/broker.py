"""A real single-node broker for tests: :class:`Broker`.

Two ways to run it, the same broker either way:

- ``mode="thread"`` (the default): in the test process, the broker's asyncio loop in a
  daemon thread of its own. Sync tests and tests that run their own asyncio loop both
  use it (it never touches the caller's loop).
- ``mode="process"``: ``python -m sluice serve`` as a child process, exactly as a user
  starts it; its log is captured in a file and shown when it fails to start. It costs a
  second interpreter and about a second more, and isolates the broker completely (a
  test may kill it, it does not share the test's GIL).

Either way the port is the kernel's choice (port 0), so two brokers never race for one;
a process broker's port is read back from its ready line
(:mod:`sluice.testing.ready_line`). ``start`` returns once the broker accepts
connections (it binds its port before it loads the group coordinators, and accepts only
after), and a broker that cannot start raises :class:`BrokerStartError` in the caller
with the reason. The HTTP listener's port (``http=True``) cannot be 0 (that turns it
off), so it is picked free beforehand and, if something takes it before the broker binds
it, picked again (:data:`PORT_ATTEMPTS`).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Literal

import sluice
from sluice.broker.app import Broker as BrokerApp
from sluice.client.admin import NewTopic
from sluice.client.cluster import TopicMetadata
from sluice.client.sync import Admin
from sluice.common import errors
from sluice.common.config import BrokerConfig, BrokerConfigError
from sluice.testing.ready_line import ready_listeners, ready_schema_registry_url

Mode = Literal["thread", "process"]

HOST = "127.0.0.1"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
TOPIC_READY_TIMEOUT_S = 30.0
PORT_ATTEMPTS = 3
"""The HTTP listener gets a port that was free a moment before; if something took it
meanwhile, start again on another."""
POLL_INTERVAL_S = 0.05
LOG_TAIL_BYTES = 20_000
CONNECT_PROBE_TIMEOUT_S = 0.5

TEST_DEFAULTS: Mapping[str, str] = {
    # The HTTP listener (metrics, health) is off unless asked for: two test brokers, or
    # a test broker beside a real one, would both want port 8080.
    "http.port": "0",
    # The Schema Registry on a free port (its default, 8081, would clash likewise):
    # Broker.schema_registry_url says which.
    "schema.registry.listeners": f"http://{HOST}:0",
    # A consumer group's first rebalance does not wait 3 s for more members: tests
    # start their consumers together and want the assignment at once.
    "group.initial.rebalance.delay.ms": "0",
    # __consumer_offsets is made at the first start; 50 partitions (Kafka's default) are
    # most of the start-up time of a new data directory. Groups hash onto these.
    "offsets.topic.num.partitions": "4",
}
"""Broker settings a test broker starts with before the caller's own ``settings``."""


class BrokerStartError(RuntimeError):
    """The broker did not start; the message says why (and, for a process broker, ends
    with the tail of its log)."""


class _HttpPortTaken(Exception):
    """The HTTP port picked for the broker was taken before the broker bound it."""


_HTTP_PORT_TAKEN = "already in use"
"""What the broker says (in its error, or its log) when a port it must bind is taken;
with the Kafka port 0, only the HTTP port can be."""


class Broker:
    """One single-node broker on a free loopback port, for a test.

    ::

        with sluice.testing.Broker(settings={"num.partitions": "3"}) as broker:
            broker.create_topic("orders", partitions=3)
            producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})

    ``settings`` are Kafka-style broker settings (``name: value``, as for ``sluice
    serve -o``), applied over :data:`TEST_DEFAULTS`. Without ``data_dir`` the broker
    keeps its data in a new temporary directory, removed by :meth:`stop` unless
    ``keep_data``; a given ``data_dir`` is never removed. ``http=True`` also serves the
    HTTP listener on a free port (:attr:`http_url`).
    """

    def __init__(
        self,
        settings: Mapping[str, str] | None = None,
        *,
        mode: Mode = "thread",
        data_dir: str | os.PathLike[str] | None = None,
        keep_data: bool = False,
        http: bool = False,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        if mode not in ("thread", "process"):
            raise ValueError(f"mode must be 'thread' or 'process', not {mode!r}")
        self.mode: Mode = mode
        self.keep_data = keep_data
        self.start_timeout_s = start_timeout_s
        self._given_data_dir = Path(data_dir) if data_dir is not None else None
        self._http = http
        self._user_settings = {str(k): str(v) for k, v in (settings or {}).items()}
        self._work_dir: Path | None = None
        self._port: int | None = None
        self._http_port: int | None = None
        self._schema_registry_url: str | None = None
        self.settings: dict[str, str] = self._settings()
        """The settings the broker runs with: :data:`TEST_DEFAULTS`, the caller's, and
        the HTTP listener's address."""
        self._running = False
        # thread mode
        self._thread: threading.Thread | None = None
        self._app: BrokerApp | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._finished: concurrent.futures.Future[None] | None = None
        # process mode
        self._process: subprocess.Popen[bytes] | None = None

    # ── where it is ───────────────────────────────────────────────────────────────────

    @property
    def host(self) -> str:
        return HOST

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the broker has no port before start()")
        return self._port

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT``, for any client's bootstrap servers."""
        return f"{self.host}:{self.port}"

    @property
    def data_dir(self) -> Path:
        if self._given_data_dir is not None:
            return self._given_data_dir
        if self._work_dir is None:
            raise RuntimeError("the broker has no data directory before start()")
        return self._work_dir / "data"

    @property
    def http_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the broker's HTTP listener (``http=True``)."""
        if self._http_port is None:
            raise RuntimeError("the broker serves HTTP only when made with http=True")
        return f"http://{self.host}:{self._http_port}"

    @property
    def schema_registry_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the broker's Schema Registry (Confluent's REST
        API: point a ``SchemaRegistryClient`` at it), on a free port."""
        if self._schema_registry_url is None:
            raise RuntimeError(
                "the broker has no Schema Registry (not started, or "
                "schema.registry.listeners was set empty)"
            )
        return self._schema_registry_url

    @property
    def is_running(self) -> bool:
        return self._running

    @property
    def log_path(self) -> Path | None:
        """A process broker's log (its stderr and stdout); None in thread mode, where
        the broker logs through this process's ``logging``."""
        if self.mode != "process" or self._work_dir is None:
            return None
        return self._work_dir / "broker.log"

    def log_text(self) -> str:
        path = self.log_path
        if path is None:
            return ""
        try:
            return path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # ── start and stop ────────────────────────────────────────────────────────────────

    def __enter__(self) -> Broker:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> Broker:
        """Start the broker and return once it accepts connections; raises
        :class:`BrokerStartError` when it cannot start."""
        if self._running:
            raise RuntimeError("the broker is already running")
        self._work_dir = Path(tempfile.mkdtemp(prefix="sluice-test-"))
        try:
            for attempt in range(1, PORT_ATTEMPTS + 1):
                try:
                    self._start_once()
                    break
                except _HttpPortTaken as taken:
                    if attempt == PORT_ATTEMPTS:
                        raise BrokerStartError(
                            f"the broker found its HTTP port taken {PORT_ATTEMPTS} times in "
                            f"a row: {taken}"
                        ) from None
                    self._pick_http_port()
        except BaseException:
            self._remove_work_dir()
            raise
        self._running = True
        atexit.register(self.stop)
        return self

    def stop(self) -> None:
        """Stop the broker cleanly (it fsyncs its logs and writes its clean-shutdown
        marker) and remove the temporary data directory unless ``keep_data``. Raises
        :class:`RuntimeError` when the broker had stopped on an error of its own."""
        if not self._running:
            return
        self._running = False
        atexit.unregister(self.stop)
        try:
            if self.mode == "thread":
                self._stop_thread()
            else:
                self._stop_process()
        finally:
            self._remove_work_dir()

    def _start_once(self) -> None:
        config = self._config(self.settings)
        if self.mode == "thread":
            self._start_thread(config)
        else:
            self._start_process()

    def _remove_work_dir(self) -> None:
        if self._work_dir is not None and not self.keep_data:
            shutil.rmtree(self._work_dir, ignore_errors=True)

    def _settings(self) -> dict[str, str]:
        settings = {**TEST_DEFAULTS, **self._user_settings}
        if self._http:
            self._http_port = _free_port()
            settings["http.host"] = HOST
            settings["http.port"] = str(self._http_port)
        elif settings.get("http.port", "0") != "0":
            self._http_port = int(settings["http.port"])
        return settings

    def _pick_http_port(self) -> None:
        self._http_port = _free_port()
        self.settings["http.port"] = str(self._http_port)

    def _config(self, settings: Mapping[str, str]) -> BrokerConfig:
        """The broker's configuration, checked here so that a bad setting fails in the
        caller in both modes."""
        config = BrokerConfig()
        try:
            config.apply_properties(settings)
            config.set_address(HOST, 0, origin="sluice.testing.Broker")
            config.check_listeners()
        except BrokerConfigError as e:
            raise BrokerStartError(f"bad broker setting: {e}") from None
        config.data_dir = self.data_dir
        config.static_names.add("log.dirs")
        return config

    # ── thread mode ───────────────────────────────────────────────────────────────────

    def _start_thread(self, config: BrokerConfig) -> None:
        started: concurrent.futures.Future[int] = concurrent.futures.Future()
        finished: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._finished = finished

        def main() -> None:
            try:
                asyncio.run(self._serve_in_thread(config, started))
            except BaseException as e:
                if not started.done():
                    started.set_exception(e)
                finished.set_exception(e)
            else:
                finished.set_result(None)

        self._thread = thread = threading.Thread(
            target=main, name="sluice-testing-broker", daemon=True
        )
        thread.start()
        deadline = time.monotonic() + self.start_timeout_s
        try:
            port = started.result(self.start_timeout_s)
        except concurrent.futures.TimeoutError:
            self._abandon_thread()
            raise BrokerStartError(
                f"the broker did not open {self.data_dir} and bind a port within "
                f"{self.start_timeout_s}s"
            ) from None
        except Exception as e:
            thread.join(STOP_TIMEOUT_S)
            if self._http and _HTTP_PORT_TAKEN in str(e):
                raise _HttpPortTaken(str(e)) from None
            raise BrokerStartError(f"the broker did not start: {e}") from e
        self._port = port
        thread.name = f"sluice-testing-broker-{port}"
        while not _accepts_connections(port):
            # The port is bound; the broker accepts once its coordinators are loaded.
            concurrent.futures.wait([finished], timeout=POLL_INTERVAL_S)
            if finished.done():
                thread.join(STOP_TIMEOUT_S)
                error = finished.exception()
                raise BrokerStartError(
                    f"the broker stopped before it accepted connections: {error}"
                ) from error
            if time.monotonic() > deadline:
                self._abandon_thread()
                raise BrokerStartError(
                    f"the broker on {self.bootstrap} did not accept connections within "
                    f"{self.start_timeout_s}s"
                )

    async def _serve_in_thread(
        self, config: BrokerConfig, started: concurrent.futures.Future[int]
    ) -> None:
        app = BrokerApp(config)
        await app.start()
        self._app = app
        self._loop = asyncio.get_running_loop()
        registry = app.schema_registry
        self._schema_registry_url = registry.urls[0] if registry and registry.urls else None
        started.set_result(app.server.port)
        await app.run()

    def _request_stop_in_thread(self) -> None:
        if self._loop is not None and self._app is not None:
            with contextlib.suppress(RuntimeError):  # the loop has ended already
                self._loop.call_soon_threadsafe(self._app.request_stop)

    def _abandon_thread(self) -> None:
        self._request_stop_in_thread()
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT_S)

    def _stop_thread(self) -> None:
        self._request_stop_in_thread()
        assert self._thread is not None and self._finished is not None
        self._thread.join(STOP_TIMEOUT_S)
        if self._thread.is_alive():
            raise RuntimeError(f"the broker on {self.bootstrap} did not stop in {STOP_TIMEOUT_S}s")
        error = self._finished.exception()
        if error is not None:
            message = f"the broker on {self.bootstrap} stopped on an error: {error}"
            raise RuntimeError(message) from error

    # ── process mode ──────────────────────────────────────────────────────────────────

    def _command(self) -> list[str]:
        argv = [
            sys.executable,
            "-m",
            "sluice",
            "serve",
            "--host",
            HOST,
            "--port",
            "0",
            "--data-dir",
            str(self.data_dir),
        ]
        for name, value in self.settings.items():
            argv += ["-o", f"{name}={value}"]
        return argv

    def _environment(self) -> dict[str, str]:
        """This process's environment without the SLUICE_* variables (``sluice serve``
        reads its options from them: a developer's SLUICE_CONFIG or SLUICE_PORT must not
        reach the test broker), and with the directory this ``sluice`` was imported from
        first on the child's path (it runs the same code, installed or not)."""
        source = str(Path(sluice.__file__).resolve().parents[1])
        path = os.environ.get("PYTHONPATH")
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
        return {
            **inherited,
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": source if not path else f"{source}{os.pathsep}{path}",
        }

    def _start_process(self) -> None:
        """Start the process on port 0 and wait until its log says it is ready (and on
        which port). Raises _HttpPortTaken when its HTTP port was taken meanwhile, and
        BrokerStartError for any other failure; nothing is left running either way."""
        log_path = self.log_path
        assert log_path is not None
        with log_path.open("ab") as log:
            log.write(f"===== {' '.join(self._command())}\n".encode())
            log.flush()
            log_start = log.tell()
            process = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self._environment(),
            )
        self._process = process
        try:
            self._port = self._wait_until_ready(process, log_path, log_start)
        except BaseException:
            self._stop_process(signal.SIGKILL)
            raise

    def _wait_until_ready(
        self, process: subprocess.Popen[bytes], log_path: Path, log_start: int
    ) -> int:
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            exit_code = process.poll()
            with log_path.open("rb") as log:
                log.seek(log_start)
                text = log.read().decode(errors="replace")
            listeners = ready_listeners(text)
            if listeners:
                self._schema_registry_url = ready_schema_registry_url(text)
                return listeners[0].port
            if exit_code is not None:
                self._process = None
                if self._http and _HTTP_PORT_TAKEN in text:
                    raise _HttpPortTaken(text.strip().splitlines()[-1])
                raise BrokerStartError(
                    f"the broker exited with code {exit_code} before it accepted "
                    f"connections; its log:\n{self._log_tail()}"
                )
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"the broker did not accept connections within {self.start_timeout_s}s; "
                    f"its log:\n{self._log_tail()}"
                )
            time.sleep(POLL_INTERVAL_S)  # the interval between two reads of its log

    def _stop_process(self, sig: signal.Signals = signal.SIGTERM) -> None:
        process = self._process
        if process is None:
            return
        self._process = None
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise RuntimeError(
                f"the broker on {self.bootstrap} did not stop within {STOP_TIMEOUT_S}s of "
                f"{sig.name}; killed it"
            ) from None

    def _log_tail(self) -> str:
        return self.log_text()[-LOG_TAIL_BYTES:]

    # ── helpers for tests ─────────────────────────────────────────────────────────────

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: Mapping[str, str] | None = None,
        *,
        timeout_s: float = TOPIC_READY_TIMEOUT_S,
    ) -> TopicMetadata:
        """Create a topic through Sluice's admin client and return its metadata once
        every partition has a leader (any client can produce to it then). It blocks:
        from a coroutine, call it with ``await asyncio.to_thread(...)``."""
        with Admin(self.bootstrap) as admin:
            admin.create_topics([NewTopic(name, partitions, 1, dict(config or {}))])
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    topic = admin.describe_topic(name)
                    if topic.partitions and all(p.leader_id >= 0 for p in topic.partitions):
                        return topic
                except errors.KafkaError as e:
                    if not e.retriable:
                        raise
                if time.monotonic() > deadline:
                    raise TimeoutError(f"topic {name!r} had no leaders after {timeout_s}s")
                time.sleep(POLL_INTERVAL_S)  # the interval between two metadata requests

    def __repr__(self) -> str:
        where = self.bootstrap if self._port is not None else "not started"
        return f"sluice.testing.Broker({where}, mode={self.mode!r})"


def _free_port() -> int:
    """A loopback port nothing listens on now (the kernel's choice). The same as
    ``sluice.cli.loopback.free_port``, which this layer may not import (the CLI is its
    peer)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def _accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=CONNECT_PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False
