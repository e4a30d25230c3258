"""What a newcomer does first: ``sluice dev-cluster`` starts ZooKeeper and three brokers,
``sluice cluster status`` shows them, a 12-partition topic is written and read with kcat
and confluent-kafka through any broker, each broker answers on its own HTTP port, and
Ctrl-C stops everything."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from client_helpers import consume_exactly, produce_and_flush, producer_config
from confluent_kafka import Producer
from metrics_scrape import get_json

pytestmark = pytest.mark.integration

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
COMMAND_TIMEOUT_S = 60.0


def _three_free_ports() -> int:
    """The first of three consecutive free loopback ports."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = int(probe.getsockname()[1])
        if base > 65000:
            continue
        try:
            sockets = []
            for port in range(base, base + 3):
                held = socket.socket()
                sockets.append(held)
                held.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for held in sockets:
                held.close()
    raise AssertionError("no three consecutive free ports")


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
