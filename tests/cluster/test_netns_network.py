"""The test network itself (``netns``): nodes reach each other and are reached from the
root namespace; an isolated node is cut off from the other nodes (not from the root
namespace, where clients run) and reachable again once healed; nothing is left behind."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
from netns import TestNetwork, unavailable_reason

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))

PORT = 7000
CONNECT_TIMEOUT_S = 1.0
READY_TIMEOUT_S = 10.0
ECHO_SERVER = f"""
import socketserver, sys
class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(self.request.recv(64))
socketserver.ThreadingTCPServer((sys.argv[1], {PORT}), Echo).serve_forever()
"""
ECHO_CLIENT = f"""
import socket, sys
with socket.create_connection((sys.argv[1], {PORT}), timeout={CONNECT_TIMEOUT_S}) as c:
    c.sendall(b"ping")
    assert c.recv(64) == b"ping"
"""


def _echo_from_root(address: str) -> bool:
    try:
        with socket.create_connection((address, PORT), timeout=CONNECT_TIMEOUT_S) as c:
            c.sendall(b"ping")
            return c.recv(64) == b"ping"
    except OSError:
        return False


def _echo_from(network: TestNetwork, node: int, address: str) -> bool:
    done = subprocess.run(
        [*network.command(node), sys.executable, "-c", ECHO_CLIENT, address],
        capture_output=True,
        timeout=CONNECT_TIMEOUT_S * 10,
        check=False,
    )
    return done.returncode == 0


def test_isolation_cuts_a_node_off_from_the_others_until_healed() -> None:
    network = TestNetwork(3)
    with network:
        target = network.address(1)
        server = subprocess.Popen([*network.command(1), sys.executable, "-c", ECHO_SERVER, target])
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while not _echo_from_root(target):
                assert time.monotonic() < deadline, "echo server did not start"
            assert _echo_from(network, 0, target)
            network.isolate(1)
            assert not _echo_from(network, 0, target)
            assert not _echo_from(network, 2, target)
            assert _echo_from_root(target), "clients outside the partition still reach it"
            network.heal()
            assert _echo_from(network, 0, target)
        finally:
            server.kill()
            server.wait()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert network.prefix not in listed.stdout
    links = subprocess.run(["ip", "link"], capture_output=True, text=True, check=True)
    assert f"{network.prefix}r" not in links.stdout
