"""``sluice dev-cluster``: a private ZooKeeper and N brokers on loopback, for trying a
cluster out on one machine, and its failover drills. Everything lives under one
directory::

    <dir>/zookeeper/            the ZooKeeper's data, config and log
    <dir>/broker-<id>/          each broker's data directory
    <dir>/broker-<id>.log       each broker's log
    <dir>/control.sock          where the drills reach the running dev cluster
    <dir>/dev-cluster.json      its processes: pids, ports, up or down (see
                                :mod:`sluice.cli.dev_cluster_control`)

Brokers listen on consecutive ports from ``--port``, and serve HTTP (metrics, health, the
console) on consecutive ports from ``--http-port`` (0: no HTTP listener). Started again
on the same directory, the cluster comes back with its topics and data.

The running ``sluice dev-cluster`` owns its processes::

    sluice dev-cluster ──┬── ZooKeeper          each in a session of its own (Ctrl-C
                         ├── broker 0           reaches only the owner) and killed by
                         ├── broker 1           the kernel if the owner dies
                         └── control.sock ◀──── sluice dev-cluster status|stop|start|kill N

A broker that exits unasked is reported in one line (which, how, its log) and the others
keep running; ``stop N`` (SIGTERM), ``kill N`` (SIGKILL) and ``start N`` (same port,
same data) act through the owner, one at a time, between its checks of the processes.
Ctrl-C, SIGTERM or SIGHUP stop the brokers, then ZooKeeper; a closed standard output or
error (``| tee`` ended by the same Ctrl-C) silences it without stopping that; SIGKILL of
the owner kills them all (:mod:`sluice.cli.parent_death`).
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TextIO

import click

from sluice.cli import dev_cluster_control as control
from sluice.cli.local_zookeeper import LocalZooKeeper, ZooKeeperError
from sluice.cli.loopback import HOST, accepts_connections
from sluice.cli.parent_death import die_with_parent

BROKER_START_TIMEOUT_S = 60.0
"""How long each broker may take to listen."""
BROKER_STOP_TIMEOUT_S = 30.0
"""How long each broker may take to stop cleanly after SIGTERM before it is killed."""
POLL_INTERVAL_S = 0.1
"""How often a starting broker's port is tried."""
MONITOR_INTERVAL_S = 0.5
"""How often the owner looks for processes that exited unasked (and for a signal)."""
ANSWER_TIMEOUT_S = BROKER_START_TIMEOUT_S + BROKER_STOP_TIMEOUT_S + 30.0
"""How long a drill waits for the owner's answer: its longest action, and some."""
BROKERS_MAX = 16
"""More brokers than this on one machine only compete for its cores."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Signals that stop the dev cluster in order."""
_REGISTRY_URL = re.compile(r"; Schema Registry (?P<url>http://\S+?)[;)]")
"""The Schema Registry's URL in a broker's ready line (the last one: restarts append)."""


class _Output:
    """The owner's lines for the user. A stream whose reader is gone (a pipe closed by
    the Ctrl-C that also reached ``tee``) is pointed at /dev/null, so that neither this
    line nor the interpreter's last flush raises, and the cluster still stops in order."""

    def say(self, text: str, *, err: bool = False) -> None:
        stream = sys.stderr if err else sys.stdout
        try:
            print(text, file=stream, flush=True)
        except (OSError, ValueError):
            _silence(stream)


def _silence(stream: TextIO) -> None:
    with contextlib.suppress(OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)


def _exit_description(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class _BrokerStartError(Exception):
    """A broker did not start; the message says why and ends with its log's tail."""


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
        self.down_because = "not started"
        """Why it is not running, once it is not (shown by status)."""
        self.watched = False
        """Whether an exit now would be one nobody asked for (and is to be reported)."""
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
            # Consecutive HTTP ports from 8080 would meet the registry's default 8081:
            # each broker's registry takes a free port, read back from its ready line.
            "-o",
            "schema.registry.listeners=http://127.0.0.1:0",
        ]

    def schema_registry_url(self) -> str | None:
        """Its Schema Registry's URL, from the ready line of its log (once serving)."""
        found: list[str] = []
        with contextlib.suppress(OSError):
            found = _REGISTRY_URL.findall(self.log_path.read_text(errors="replace"))
        return found[-1] if found else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        self._close_log()
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sluice", "serve", *self.arguments()],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,  # Ctrl-C reaches dev-cluster, which stops them in order
            # Whatever ends dev-cluster ends them; the child makes one prctl call.
            preexec_fn=die_with_parent(),  # noqa: PLW1509
        )
        self.watched = True

    def wait_until_serving(self, stop: threading.Event) -> None:
        """Return once it accepts connections (or ``stop`` is set); raises
        _BrokerStartError when it exits first or takes too long."""
        assert self.process is not None
        deadline = time.monotonic() + BROKER_START_TIMEOUT_S
        while not accepts_connections(self.port) and not stop.is_set():
            code = self.process.poll()
            if code is not None or time.monotonic() > deadline:
                how = "timed out" if code is None else _exit_description(code)
                self.watched = False
                self.down_because = f"did not start ({how})"
                tail = self.log_path.read_text(errors="replace")[-3000:]
                raise _BrokerStartError(
                    f"broker {self.node_id} did not start on port {self.port} ({how}); "
                    f"the end of its log ({self.log_path}):\n{tail}"
                )
            time.sleep(POLL_INTERVAL_S)

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM), without waiting."""
        self.watched = False
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def stop(self) -> int | None:
        """Stop it cleanly (killed if it takes too long); its exit code, None if it was
        not running."""
        was_running = self.running
        self.terminate()
        if self.process is not None:
            try:
                self.process.wait(BROKER_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._close_log()
        return self.process.returncode if was_running and self.process is not None else None

    def kill(self) -> None:
        assert self.process is not None
        self.watched = False
        self.process.kill()
        self.process.wait()
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def describe(self) -> dict[str, Any]:
        running = self.running
        return {
            "node_id": self.node_id,
            "address": f"{HOST}:{self.port}",
            "http_port": self.http_port,
            "pid": self.process.pid if running and self.process is not None else None,
            "state": "up" if running else "down",
            "down_because": None if running else self.down_because,
            "log": str(self.log_path),
        }


class _Cluster:
    """The owner's view of its processes and the drills' actions on them."""

    def __init__(
        self,
        directory: Path,
        zookeeper: LocalZooKeeper,
        brokers: list[_Broker],
        output: _Output,
    ) -> None:
        self.directory = directory
        self.zookeeper = zookeeper
        self.brokers = brokers
        self.output = output
        self._zookeeper_reported = False

    def describe(self) -> dict[str, Any]:
        zookeeper_code = self.zookeeper.poll()
        return {
            "pid": os.getpid(),
            "directory": str(self.directory),
            "zookeeper": {
                "connect": self.zookeeper.connect,
                "pid": self.zookeeper.pid if zookeeper_code is None else None,
                "state": "up" if zookeeper_code is None else "down",
                "down_because": None
                if zookeeper_code is None
                else f"died ({_exit_description(zookeeper_code)})",
                "log": str(self.zookeeper.log_path),
            },
            "brokers": [broker.describe() for broker in self.brokers],
        }

    def save(self) -> None:
        control.write_state(self.directory, self.describe())

    def report_exits(self) -> None:
        """Say, once each, which processes exited unasked; the others keep running."""
        changed = False
        for broker in self.brokers:
            code = broker.process.poll() if broker.process is not None else None
            if broker.watched and code is not None:
                broker.watched = False
                broker.down_because = f"died ({_exit_description(code)})"
                self.output.say(
                    f"broker {broker.node_id} died ({_exit_description(code)}); the other "
                    f"brokers keep running; its log: {broker.log_path}; start it again with: "
                    f"sluice dev-cluster start {broker.node_id} --dir {self.directory}",
                    err=True,
                )
                changed = True
        code = self.zookeeper.poll()
        if code is not None and not self._zookeeper_reported:
            self._zookeeper_reported = True
            self.output.say(
                f"ZooKeeper died ({_exit_description(code)}); its log: "
                f"{self.zookeeper.log_path}; the brokers keep serving but their metadata "
                "cannot change: Ctrl-C and start the dev cluster again",
                err=True,
            )
            changed = True
        if changed:
            self.save()

    def act(self, message: dict[str, Any], stop: threading.Event) -> dict[str, Any]:
        """Do what a drill asks; the answer to send it."""
        ok, text = self._act(message, stop)
        if ok and message.get("command") != "status":
            self.output.say(text, err=True)
            self.save()
        return {"ok": ok, "message": text, "cluster": self.describe()}

    def _act(self, message: dict[str, Any], stop: threading.Event) -> tuple[bool, str]:
        command = message.get("command")
        if command == "status":
            return True, ""
        actions: dict[str, Callable[[_Broker, threading.Event], str]] = {
            "stop": self._stop,
            "kill": self._kill,
            "start": self._start,
        }
        if not isinstance(command, str) or command not in actions:
            return False, f"unknown command {command!r}: one of status, {', '.join(actions)}"
        node_id = message.get("broker")
        if type(node_id) is not int or not 0 <= node_id < len(self.brokers):
            return False, (
                f"no broker {node_id} in this dev cluster: its brokers are 0 to "
                f"{len(self.brokers) - 1}"
            )
        broker = self.brokers[node_id]
        self.report_exits()  # a death before the request is reported as one
        try:
            return True, actions[command](broker, stop)
        except _DrillRefused as e:
            return False, str(e)

    def _stop(self, broker: _Broker, stop: threading.Event) -> str:
        if not broker.running:
            raise _DrillRefused(f"broker {broker.node_id} is not running ({broker.down_because})")
        code = broker.stop()
        broker.down_because = "stopped by 'sluice dev-cluster stop'"
        how = "" if code is None else f" ({_exit_description(code)})"
        return f"broker {broker.node_id} stopped{how}"

    def _kill(self, broker: _Broker, stop: threading.Event) -> str:
        if not broker.running:
            raise _DrillRefused(f"broker {broker.node_id} is not running ({broker.down_because})")
        broker.kill()
        broker.down_because = "killed by 'sluice dev-cluster kill'"
        return f"broker {broker.node_id} killed (SIGKILL)"

    def _start(self, broker: _Broker, stop: threading.Event) -> str:
        if broker.running:
            raise _DrillRefused(
                f"broker {broker.node_id} is already running on {HOST}:{broker.port}"
            )
        if accepts_connections(broker.port):
            raise _DrillRefused(
                f"port {broker.port} of broker {broker.node_id} is taken by another process: "
                "stop what listens there first"
            )
        broker.start()
        try:
            broker.wait_until_serving(stop)
        except _BrokerStartError as e:
            broker.stop()
            raise _DrillRefused(str(e)) from None
        assert broker.process is not None
        return f"broker {broker.node_id} started on {HOST}:{broker.port} (pid {broker.process.pid})"


class _DrillRefused(Exception):
    """A drill that cannot be done now; the message says why."""


def _check_ports(port: int, count: int, option: str = "--port") -> None:
    for candidate in range(port, port + count):
        if accepts_connections(candidate):
            raise click.ClickException(
                f"port {candidate} is already in use: stop what listens there or pass "
                f"{option} (the brokers take {count} consecutive ports)"
            )


def _cluster_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options of starting a dev cluster, which ``dev-cluster`` and ``up`` share."""
    for option in reversed(
        [
            click.option(
                "--brokers",
                "broker_count",
                type=click.IntRange(1, BROKERS_MAX),
                default=3,
                show_default=True,
                help="How many brokers to start.",
            ),
            click.option(
                "--port",
                type=click.IntRange(1, 65535 - BROKERS_MAX),
                default=9092,
                show_default=True,
                help="The first broker's port; the others take the next ones.",
            ),
            click.option(
                "--http-port",
                type=click.IntRange(0, 65535 - BROKERS_MAX),
                default=8080,
                show_default=True,
                help="The first broker's HTTP port (metrics, health, console); the others "
                "take the next ones. 0: no HTTP listeners.",
            ),
        ]
    ):
        command = option(command)
    return command


_DIRECTORY_HELP = "Where ZooKeeper's and the brokers' data and logs go."
DEFAULT_DIRECTORY = Path("./dev-cluster")
_STARTING_OPTIONS = ("broker_count", "port", "http_port")


@click.group("dev-cluster", invoke_without_command=True)
@_cluster_options
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_DIRECTORY,
    show_default=True,
    help=_DIRECTORY_HELP,
)
@click.pass_context
def dev_cluster(
    ctx: click.Context, *, broker_count: int, port: int, http_port: int, directory: Path
) -> None:
    """Start a private ZooKeeper and a cluster of brokers on this machine (loopback only)
    and keep them running until Ctrl-C; drill failover with its subcommands.

    Without a subcommand (or with 'up') it starts the cluster and stays in the
    foreground, the owner of its processes: a broker that dies is reported and the
    others keep running, and Ctrl-C, or anything that ends this process, stops them
    all. From another terminal, 'status', 'stop N', 'kill N' and 'start N' act on the
    brokers of the cluster running in --dir (like rpk container):

    \b
        sluice dev-cluster --brokers 3          # terminal 1: the cluster
        sluice dev-cluster kill 1               # terminal 2: broker 1 crashes
        sluice dev-cluster status               # broker 1: down
        sluice dev-cluster start 1              # back, on its port with its data
    """
    if ctx.invoked_subcommand is None:
        _up(broker_count=broker_count, port=port, http_port=http_port, directory=directory)
        return
    given = [
        name
        for name in _STARTING_OPTIONS
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
    ]
    if given:
        where = (
            "after 'up'"
            if ctx.invoked_subcommand == "up"
            else "to start a cluster, without a subcommand"
        )
        raise click.UsageError(f"--brokers, --port and --http-port go {where}")


def _directory_option(help_text: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return click.option(
        "--dir",
        "directory",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help=f"{help_text} [default: the --dir before the subcommand, or {DEFAULT_DIRECTORY}]",
    )


_DRILL_DIRECTORY_HELP = "The directory the dev cluster was started with."


def _resolve_directory(directory: Path | None) -> Path:
    if directory is not None:
        return directory
    parent = click.get_current_context().parent
    found = parent.params.get("directory") if parent is not None else None
    return found if isinstance(found, Path) else DEFAULT_DIRECTORY


@dev_cluster.command("up")
@_cluster_options
@_directory_option(_DIRECTORY_HELP)
def up(*, broker_count: int, port: int, http_port: int, directory: Path | None) -> None:
    """Start the cluster (what 'sluice dev-cluster' alone does)."""
    _up(
        broker_count=broker_count,
        port=port,
        http_port=http_port,
        directory=_resolve_directory(directory),
    )


def _ask(directory: Path, message: dict[str, Any]) -> dict[str, Any]:
    try:
        answer = control.request(directory, message, ANSWER_TIMEOUT_S)
    except control.ControlError as e:
        raise click.ClickException(str(e)) from None
    if not answer.get("ok"):
        raise click.ClickException(str(answer.get("message")))
    return answer


def _echo_status(cluster: dict[str, Any]) -> None:
    zookeeper = cluster["zookeeper"]
    zookeeper_state = (
        f"up, pid {zookeeper['pid']}" if zookeeper["state"] == "up" else zookeeper["down_because"]
    )
    click.echo(f"Dev cluster in {cluster['directory']} (pid {cluster['pid']})")
    click.echo(f"ZooKeeper on {zookeeper['connect']}: {zookeeper_state} (log: {zookeeper['log']})")
    rows = [("ID", "ADDRESS", "STATE", "PID", "LOG")]
    for broker in cluster["brokers"]:
        state = "up" if broker["state"] == "up" else f"down: {broker['down_because']}"
        pid = str(broker["pid"]) if broker["pid"] is not None else "-"
        rows.append((str(broker["node_id"]), broker["address"], state, pid, broker["log"]))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        click.echo("  " + "  ".join([*cells, row[-1]]))


@dev_cluster.command("status")
@_directory_option(_DRILL_DIRECTORY_HELP)
def status(*, directory: Path | None) -> None:
    """List the brokers, up or down, and ZooKeeper."""
    _echo_status(_ask(_resolve_directory(directory), {"command": "status"})["cluster"])


def _drill(command: str, summary: str) -> click.Command:
    @click.argument("node_id", metavar="N", type=click.IntRange(0, BROKERS_MAX - 1))
    @_directory_option(_DRILL_DIRECTORY_HELP)
    def drill(*, node_id: int, directory: Path | None) -> None:
        answer = _ask(_resolve_directory(directory), {"command": command, "broker": node_id})
        click.echo(answer["message"])

    drill.__doc__ = summary
    return dev_cluster.command(command)(drill)


stop = _drill(
    "stop",
    "Stop broker N cleanly (SIGTERM), as an operator would.",
)
kill = _drill(
    "kill",
    "Kill broker N (SIGKILL), as a crash would.",
)
start = _drill(
    "start",
    "Start broker N again, on its port with its data.",
)


def _up(*, broker_count: int, port: int, http_port: int, directory: Path) -> None:
    if control.owner_running(directory):
        raise click.ClickException(
            f"a dev cluster already runs in {directory}: see it with "
            f"'sluice dev-cluster status --dir {directory}', or give another --dir"
        )
    _check_ports(port, broker_count)
    if http_port:
        _check_ports(http_port, broker_count, "--http-port")
    directory.mkdir(parents=True, exist_ok=True)
    output = _Output()
    stop = threading.Event()
    wakeup_reader, wakeup_writer = socket.socketpair()
    wakeup_writer.setblocking(False)
    previous_wakeup = signal.set_wakeup_fd(wakeup_writer.fileno())
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda *_: stop.set())
    try:
        _own(
            directory=directory,
            brokers_wanted=(broker_count, port, http_port),
            output=output,
            stop=stop,
            wakeup=wakeup_reader,
        )
    finally:
        signal.set_wakeup_fd(previous_wakeup)
        wakeup_reader.close()
        wakeup_writer.close()


def _own(
    *,
    directory: Path,
    brokers_wanted: tuple[int, int, int],
    output: _Output,
    stop: threading.Event,
    wakeup: socket.socket,
) -> None:
    broker_count, port, http_port = brokers_wanted
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
    cluster = _Cluster(directory, zookeeper, brokers, output)
    listener: socket.socket | None = None
    try:
        for broker in brokers:
            broker.start()
        cluster.save()
        for broker in brokers:
            try:
                broker.wait_until_serving(stop)
            except _BrokerStartError as e:
                raise click.ClickException(str(e)) from None
        if stop.is_set():
            return
        listener = control.listen(directory)
        cluster.save()
        _say_ready(output, zookeeper, brokers, directory, port)
        while not stop.is_set():
            readable, _, _ = select.select([listener, wakeup], [], [], MONITOR_INTERVAL_S)
            if wakeup in readable:
                with contextlib.suppress(BlockingIOError):
                    wakeup.recv(4096)
            if listener in readable and not stop.is_set():
                _serve_one(listener, cluster, stop)
            cluster.report_exits()
    finally:
        output.say("stopping the brokers and ZooKeeper…", err=True)
        if listener is not None:
            control.stop_listening(directory, listener)
        for broker in brokers:  # all at once: each flushes and closes its logs
            with contextlib.suppress(Exception):
                broker.terminate()
        for broker in brokers:
            with contextlib.suppress(Exception):
                broker.stop()
        zookeeper.stop()
        control.remove_state(directory)


def _say_ready(
    output: _Output,
    zookeeper: LocalZooKeeper,
    brokers: list[_Broker],
    directory: Path,
    port: int,
) -> None:
    output.say(f"ZooKeeper on {zookeeper.connect} (log: {zookeeper.log_path})")
    for broker in brokers:
        http = f", HTTP on http://{HOST}:{broker.http_port}" if broker.http_port else ""
        registry_url = broker.schema_registry_url()
        registry = f", Schema Registry on {registry_url}" if registry_url else ""
        output.say(
            f"broker {broker.node_id} on {HOST}:{broker.port}{http}{registry} "
            f"(log: {broker.log_path})"
        )
    bootstrap = ",".join(f"{HOST}:{b.port}" for b in brokers)
    output.say(
        f"\nBootstrap servers: {bootstrap}\n"
        f"Try:  sluice cluster status --bootstrap-server {HOST}:{port}\n"
        f"Drill failover from another terminal:  sluice dev-cluster kill|stop|start N "
        f"--dir {directory}  (and status)\n"
        "Ctrl-C stops the cluster."
    )


def _serve_one(listener: socket.socket, cluster: _Cluster, stop: threading.Event) -> None:
    """Answer one drill's request (the owner does one thing at a time)."""
    try:
        connection, _ = listener.accept()
    except OSError:
        return
    with connection:
        try:
            request = control.read_request(connection)
        except control.ControlError as e:
            answer = {"ok": False, "message": f"bad request: {e}", "cluster": None}
        else:
            answer = cluster.act(request, stop)
        with contextlib.suppress(OSError):  # the drill gave up waiting
            control.send(connection, answer)


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
