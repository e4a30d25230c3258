"""Ports on this machine's loopback for the processes ``sluice dev-cluster`` starts (and
the tests and benchmarks that start brokers and ZooKeeper the same way)."""

from __future__ import annotations

import socket

HOST = "127.0.0.1"
CONNECT_PROBE_TIMEOUT_S = 0.5
"""How long one check that a port accepts connections may take."""


def free_port(host: str = HOST) -> int:
    """A port nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def accepts_connections(port: int, host: str = HOST) -> bool:
    """Whether something listens on host:port (a TCP connection is accepted)."""
    try:
        with socket.create_connection((host, port), timeout=CONNECT_PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False
