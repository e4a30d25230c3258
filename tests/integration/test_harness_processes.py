"""The test harness's broker processes: ports of the kernel's choice read back from the
broker, never a port another process holds mistaken for the broker, a picked HTTP port
that was taken replaced, and a session that fails when a process outlives it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import psutil
import pytest
from broker_process import HOST, BrokerProcess, BrokerStartError, _stacks_of
from client_helpers import round_trip_one_message

SHORT_START_TIMEOUT_S = 15.0
"""For a start that must fail: how long it may retry a taken port."""
HTTP_TIMEOUT_S = 30.0


def listening_ports(pid: int) -> set[int]:
    return {
        c.laddr.port
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


def listening_socket(port: int) -> socket.socket:
    """Something else listening on ``port`` (it accepts connections as a broker would)."""
    taken = socket.socket()
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    taken.bind((HOST, port))
    taken.listen()
    return taken


def test_a_broker_binds_a_port_of_the_kernels_choice_and_keeps_it(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    assert broker.port == 0  # nothing picked beforehand, nothing to race for
    broker.start()
    try:
        port = broker.port
        assert port != 0
        assert broker.listener_ports == {"PLAINTEXT": port}
        # The Schema Registry took a port of the kernel's choice too, kept likewise.
        registry_url = broker.schema_registry_url
        assert registry_url is not None
        registry_port = int(registry_url.rsplit(":", 1)[1])
        assert registry_port not in (0, port)
        assert listening_ports(broker.pid) == {port, registry_port}
        round_trip_one_message(broker.bootstrap)
        broker.restart()
        assert broker.port == port
        assert broker.schema_registry_url == registry_url
        assert listening_ports(broker.pid) == {port, registry_port}
    finally:
        broker.stop()


def test_listeners_given_port_0_keep_their_ports_across_restarts(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "data",
        overrides={"listeners": f"PLAINTEXT://{HOST}:0,OTHER://{HOST}:0"},
        extra_arguments=[
            "-o",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
        ],
    )
    broker.start()
    try:
        ports = dict(broker.listener_ports)
        assert set(ports) == {"PLAINTEXT", "OTHER"}
        assert 0 not in ports.values()
        assert broker.port == ports["PLAINTEXT"]
        broker.restart()
        assert broker.listener_ports == ports
        registry_url = broker.schema_registry_url
        assert registry_url is not None
        registry_port = int(registry_url.rsplit(":", 1)[1])
        assert listening_ports(broker.pid) == {*ports.values(), registry_port}
    finally:
        broker.stop()


def test_another_process_on_the_port_is_not_taken_for_the_broker(tmp_path: Path) -> None:
    """Readiness is the broker's own word, not "the port accepts connections": a restart
    that finds its port held by something else fails (after retrying until its deadline)
    and leaves nothing running; once the port is free, the broker starts on it."""
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    port = broker.port
    broker.stop()
    with listening_socket(port):
        # It fails, whether or not an attempt got as far as binding before the deadline
        # (the message then says the port was taken).
        with pytest.raises(BrokerStartError):
            broker.start(timeout_s=SHORT_START_TIMEOUT_S)
        assert not broker.is_running
    broker.start()
    try:
        assert broker.port == port
        round_trip_one_message(broker.bootstrap)
    finally:
        broker.stop()


def test_a_picked_http_port_taken_before_the_start_is_replaced(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", http_port=0)
    picked = broker.http_port
    assert picked is not None
    with listening_socket(picked):
        broker.start()
    try:
        assert broker.http_port not in (None, picked)
        with urllib.request.urlopen(f"{broker.http_url}/health", timeout=HTTP_TIMEOUT_S) as reply:
            assert reply.status == 200
    finally:
        broker.stop()


def test_a_process_left_running_fails_the_session_and_is_killed(tmp_path: Path) -> None:
    marker = f"leak-marker-{tmp_path.name}"
    test_file = tmp_path / "test_leaky.py"
    test_file.write_text(
        textwrap.dedent(
            f"""
            import subprocess, sys

            def test_leaks():
                subprocess.Popen(
                    [sys.executable, "-c", "import time; time.sleep(600)", "{marker}"]
                )
            """
        )
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "process_leaks",
            str(test_file),
        ],
        cwd=tmp_path,
        env={**_environment(), "PYTHONPATH": str(Path(__file__).parent)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0, done.stdout
    assert "1 passed, 1 error" in done.stdout, done.stdout
    assert "were still running at its end" in done.stdout, done.stdout
    assert marker in done.stdout
    still = [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]
    assert still == [], still


def _environment() -> dict[str, str]:
    """This process's environment without pytest-xdist's worker variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}


def test_the_stacks_of_a_stuck_process_are_read_without_py_spy_on_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CI installs only the dev extra into a virtualenv it does not put on PATH: py-spy
    is found beside the interpreter."""
    monkeypatch.setenv("PATH", "")
    program = textwrap.dedent(
        """
        import sys
        def waiting_for_stdin():
            print("waiting", flush=True)
            sys.stdin.read()
        waiting_for_stdin()
        """
    )
    stuck = subprocess.Popen(
        [sys.executable, "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert stuck.stdin is not None and stuck.stdout is not None
    try:
        assert stuck.stdout.readline() == b"waiting\n"  # inside the function now
        stacks = _stacks_of(stuck.pid)
    finally:
        stuck.stdin.close()
        stuck.wait(timeout=30)
        stuck.stdout.close()
    assert "waiting_for_stdin" in stacks, stacks
