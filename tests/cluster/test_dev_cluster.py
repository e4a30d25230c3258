"""What a newcomer does first: ``sluice dev-cluster`` starts ZooKeeper and three brokers,
``sluice cluster status`` shows them, a 12-partition topic is written and read with kcat
and confluent-kafka through any broker, each broker answers on its own HTTP port, and
Ctrl-C stops everything. Then the failover drills: a broker killed with ``kill -9`` is
reported while the others keep serving, ``sluice dev-cluster kill|stop|start|status``
act on the running cluster, and neither SIGKILL of ``sluice dev-cluster`` itself nor
Ctrl-C with its output closed leaves a broker or ZooKeeper running."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import psutil
import pytest
from client_helpers import (
    consume_exactly,
    produce_and_flush,
    producer_config,
    unique_topic_name,
    wait_until,
)
from confluent_kafka import Producer
from metrics_scrape import get_json

pytestmark = pytest.mark.integration

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
COMMAND_TIMEOUT_S = 60.0
BROKER_SESSION_TIMEOUT_MS = 3_000
"""The dev cluster's brokers' zookeeper.session.timeout.ms (6 s by default), given them
through SLUICE_CONFIG, which ``sluice serve`` reads and dev-cluster's brokers inherit: a
killed broker's partitions move, and a broker started again in place of a killed one
registers, once its old session ends, so the drills wait half as long."""


def _dev_cluster_environment(directory: Path) -> dict[str, str]:
    """The environment to start ``sluice dev-cluster`` in: its brokers' shorter session,
    in a settings file written into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    settings = directory / "broker.properties"
    settings.write_text(f"zookeeper.session.timeout.ms={BROKER_SESSION_TIMEOUT_MS}\n")
    return {**os.environ, "SLUICE_CONFIG": str(settings)}


def _three_free_ports() -> int:
    """The first of three consecutive free loopback ports."""
    return _free_ports(3)


def _free_ports(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = int(probe.getsockname()[1])
        if base > 65000:
            continue
        try:
            sockets = []
            for port in range(base, base + count):
                held = socket.socket()
                sockets.append(held)
                held.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for held in sockets:
                held.close()
    raise AssertionError(f"no {count} consecutive free ports")


def _sluice(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluice", *arguments],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def test_dev_cluster_from_start_to_ctrl_c(tmp_path: Path) -> None:
    port = _three_free_ports()
    http_port = _three_free_ports()
    bootstraps = [f"127.0.0.1:{port + i}" for i in range(3)]
    output = tmp_path / "dev-cluster.out"
    with output.open("wb") as sink:
        cluster = subprocess.Popen(
            [sys.executable, "-m", "sluice", "dev-cluster", "--dir", str(tmp_path / "dev"),
             "--port", str(port), "--http-port", str(http_port)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=_dev_cluster_environment(tmp_path),
        )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "Bootstrap servers" not in output.read_text():
            assert cluster.poll() is None, output.read_text()
            assert time.monotonic() < deadline, output.read_text()
            time.sleep(0.1)  # polling dev-cluster's output for its ready line
        for node_id in range(3):
            url = f"http://127.0.0.1:{http_port + node_id}"
            assert f"HTTP on {url}" in output.read_text()
            assert get_json(f"{url}/health") == (200, {"status": "ok"})
        status = _sluice("cluster", "status", "--bootstrap-server", bootstraps[1])
        assert status.returncode == 0, status.stderr
        assert "Brokers: 3" in status.stdout
        created = _sluice(
            "topics", "create", "events", "--partitions", "12",
            "--bootstrap-server", bootstraps[2],
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        lines = "".join(f"kcat-{i}\n" for i in range(120))
        subprocess.run(
            ["kcat", "-P", "-b", bootstraps[0], "-t", "events"],
            input=lines.encode(),
            check=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        produce_and_flush(
            Producer(producer_config(bootstraps[1])),
            "events",
            [{"value": f"confluent-{i}".encode()} for i in range(120)],
        )
        read = subprocess.run(
            ["kcat", "-C", "-b", bootstraps[2], "-t", "events", "-o", "beginning", "-e", "-q"],
            capture_output=True,
            check=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        values = set(read.stdout.decode().split())
        assert values == {f"kcat-{i}" for i in range(120)} | {f"confluent-{i}" for i in range(120)}
        consumed = consume_exactly(bootstraps[0], [("events", p) for p in range(12)], 240)
        assert len(consumed) == 240
        status = _sluice("cluster", "status", "--bootstrap-server", bootstraps[0])
        assert "Partitions: 62 in 2 topic(s), 0 offline" in status.stdout  # + __consumer_offsets
    finally:
        cluster.send_signal(signal.SIGINT)
        exit_code = cluster.wait(STOP_TIMEOUT_S)
    assert exit_code == 0, output.read_text()
    leftover = subprocess.run(
        ["pgrep", "-f", str(tmp_path / "dev")], capture_output=True, text=True, check=False
    )
    assert leftover.stdout == "", "processes of the dev cluster outlived it"


READY_LINE = "Ctrl-C stops the cluster."
VANISH_TIMEOUT_S = 30.0
"""How long the processes of a dev cluster may take to vanish once their owner died."""


def _start_dev_cluster(
    directory: Path, broker_count: int, output: IO[bytes] | int
) -> tuple[subprocess.Popen[bytes], int]:
    """A ``sluice dev-cluster`` with its output into ``output`` (a file, or PIPE), and its
    first broker's port; no HTTP listeners."""
    port = _free_ports(broker_count)
    cluster = subprocess.Popen(
        [sys.executable, "-m", "sluice", "dev-cluster", "--dir", str(directory),
         "--brokers", str(broker_count), "--port", str(port), "--http-port", "0"],
        stdout=output,
        stderr=subprocess.STDOUT,
        env=_dev_cluster_environment(directory.parent),
    )  # fmt: skip
    return cluster, port


def _wait_for_output(cluster: subprocess.Popen[bytes], output: Path, text: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while text not in output.read_text():
        assert cluster.poll() is None, output.read_text()
        assert time.monotonic() < deadline, f"no {text!r} in:\n{output.read_text()}"
        time.sleep(0.1)  # polling dev-cluster's output for a line


def _state(directory: Path) -> dict[str, Any]:
    state = json.loads((directory / "dev-cluster.json").read_text())
    assert isinstance(state, dict)
    return state


def _running_pids(directory: Path) -> list[int]:
    """ZooKeeper's and the running brokers' pids, as the state file names them."""
    state = _state(directory)
    pids = [state["zookeeper"]["pid"], *(broker["pid"] for broker in state["brokers"])]
    return [pid for pid in pids if pid is not None]


def _raw_request(directory: Path, request: bytes) -> dict[str, Any]:
    """What the dev cluster answers to ``request``, bytes as they are."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(COMMAND_TIMEOUT_S)
        connection.connect(str(directory / "control.sock"))
        connection.sendall(request)
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = connection.recv(65536)
            assert chunk, f"the connection closed after {answer!r}"
            answer += chunk
    parsed = json.loads(answer)
    assert isinstance(parsed, dict)
    return parsed


def _gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs (a zombie waiting for its new parent to reap it is
    not running)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _stop(cluster: subprocess.Popen[bytes]) -> None:
    if cluster.poll() is None:
        cluster.send_signal(signal.SIGINT)
        cluster.wait(STOP_TIMEOUT_S)


def _broker_states(directory: Path) -> list[str]:
    status = _sluice("dev-cluster", "status", "--dir", str(directory))
    assert status.returncode == 0, status.stderr
    return [line.split()[2].rstrip(":") for line in status.stdout.splitlines()[3:]]


def test_a_broker_killed_leaves_the_others_serving_and_the_drills_work(tmp_path: Path) -> None:
    directory = tmp_path / "dev"
    output = tmp_path / "dev-cluster.out"
    with output.open("wb") as sink:
        cluster, port = _start_dev_cluster(directory, 2, sink)
    try:
        _wait_for_output(cluster, output, READY_LINE)
        bootstrap = f"127.0.0.1:{port}"
        topic = unique_topic_name("drill")
        created = _sluice(
            "topics", "create", topic, "--partitions", "2", "--replication-factor", "2",
            "--bootstrap-server", bootstrap,
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        assert _broker_states(directory) == ["up", "up"]

        victim = _state(directory)["brokers"][1]["pid"]
        os.kill(victim, signal.SIGKILL)
        _wait_for_output(cluster, output, "broker 1 died (killed by SIGKILL)")
        death = next(line for line in output.read_text().splitlines() if "broker 1 died" in line)
        assert str(directory / "broker-1.log") in death
        assert "the other brokers keep running" in death
        assert cluster.poll() is None
        assert _broker_states(directory) == ["up", "down"]
        # Broker 0 takes over both partitions once broker 1's session ends.
        produce_and_flush(
            Producer(producer_config(bootstrap)),
            topic,
            [{"value": f"after-{i}".encode()} for i in range(20)],
        )
        consumed = consume_exactly(bootstrap, [(topic, 0), (topic, 1)], 20)
        assert {message.value() for message in consumed} == {
            f"after-{i}".encode() for i in range(20)
        }

        started = _sluice("dev-cluster", "start", "1", "--dir", str(directory))
        assert started.returncode == 0, started.stderr
        assert f"broker 1 started on 127.0.0.1:{port + 1}" in started.stdout
        again = _sluice("dev-cluster", "start", "1", "--dir", str(directory))
        assert again.returncode == 1
        assert "broker 1 is already running" in again.stderr
        assert _broker_states(directory) == ["up", "up"]

        stopped = _sluice("dev-cluster", "stop", "1", "--dir", str(directory))
        assert stopped.returncode == 0, stopped.stderr
        assert "broker 1 stopped (exit code 0)" in stopped.stdout
        killed = _sluice("dev-cluster", "kill", "0", "--dir", str(directory))
        assert killed.returncode == 0, killed.stderr
        assert "broker 0 killed (SIGKILL)" in killed.stdout
        assert _broker_states(directory) == ["down", "down"]
        status = _sluice("dev-cluster", "status", "--dir", str(directory)).stdout
        assert "killed by 'sluice dev-cluster kill'" in status
        assert "stopped by 'sluice dev-cluster stop'" in status
        assert "broker 0 died" not in output.read_text(), "a requested kill is no death"
        missing = _sluice("dev-cluster", "stop", "5", "--dir", str(directory))
        assert missing.returncode == 1
        assert "no broker 5 in this dev cluster: its brokers are 0 to 1" in missing.stderr
        for request, error in [
            (b"kill 1\n", "bad request: a message that is not JSON"),
            (b"[1]\n", "bad request: a message that is not a JSON object"),
            (b"{" * 5000, "bad request: a message longer than 4096 bytes"),
            (b'{"command": "kill", "broker": true}\n', "no broker True in this dev cluster"),
            (b'{"command": "reboot", "broker": 0}\n', "unknown command 'reboot'"),
        ]:
            answer = _raw_request(directory, request)
            assert answer["ok"] is False
            assert error in answer["message"]

        for node_id in (0, 1):
            restarted = _sluice("dev-cluster", "start", str(node_id), "--dir", str(directory))
            assert restarted.returncode == 0, restarted.stderr
        consumed = consume_exactly(bootstrap, [(topic, 0), (topic, 1)], 20)
        assert len(consumed) == 20, "the restarted brokers kept their data"
        pids = _running_pids(directory)
    finally:
        _stop(cluster)
    assert cluster.returncode == 0, output.read_text()
    wait_until(lambda: all(_gone(pid) for pid in pids), "the dev cluster's processes end")
    assert not (directory / "dev-cluster.json").exists()
    after = _sluice("dev-cluster", "status", "--dir", str(directory))
    assert after.returncode == 1
    assert f"no dev cluster is running in {directory}" in after.stderr


def test_sigkill_of_dev_cluster_ends_its_brokers_and_zookeeper(tmp_path: Path) -> None:
    directory = tmp_path / "dev"
    output = tmp_path / "dev-cluster.out"
    with output.open("wb") as sink:
        cluster, _ = _start_dev_cluster(directory, 2, sink)
    try:
        _wait_for_output(cluster, output, READY_LINE)
        pids = _running_pids(directory)
        assert len(pids) == 3
        assert not any(_gone(pid) for pid in pids)
        cluster.kill()
        cluster.wait(STOP_TIMEOUT_S)
        wait_until(
            lambda: all(_gone(pid) for pid in pids),
            "the brokers and ZooKeeper of a killed dev cluster end",
            VANISH_TIMEOUT_S,
        )
    finally:
        _stop(cluster)
    # A dev cluster started again on the directory replaces what the killed one left.
    with output.open("wb") as sink:
        cluster, _ = _start_dev_cluster(directory, 2, sink)
    try:
        _wait_for_output(cluster, output, READY_LINE)
        assert _broker_states(directory) == ["up", "up"]
    finally:
        _stop(cluster)
    assert cluster.returncode == 0, output.read_text()


def test_ctrl_c_with_the_output_closed_stops_everything(tmp_path: Path) -> None:
    """``sluice dev-cluster | tee log`` and Ctrl-C: tee is gone before dev-cluster says
    it is stopping. The directory is deeper than a Unix socket's path may be, so the
    drills reach the cluster through the directory's descriptor."""
    directory = tmp_path / ("deep-" * 20) / "dev"
    assert len(str(directory / "control.sock")) > 108
    cluster, _ = _start_dev_cluster(directory, 1, subprocess.PIPE)
    assert cluster.stdout is not None
    try:
        received = b""
        deadline = time.monotonic() + START_TIMEOUT_S
        while READY_LINE.encode() not in received:
            remaining_s = deadline - time.monotonic()
            assert remaining_s > 0, received.decode(errors="replace")
            readable, _, _ = select.select([cluster.stdout], [], [], remaining_s)
            if readable:
                chunk = os.read(cluster.stdout.fileno(), 65536)
                assert chunk, f"dev-cluster closed its output: {received!r}"
                received += chunk
        assert _broker_states(directory) == ["up"]
        pids = _running_pids(directory)
        cluster.stdout.close()
        cluster.send_signal(signal.SIGINT)
        cluster.wait(STOP_TIMEOUT_S)
    finally:
        _stop(cluster)
    assert cluster.returncode == 0
    wait_until(lambda: all(_gone(pid) for pid in pids), "the dev cluster's processes end")
