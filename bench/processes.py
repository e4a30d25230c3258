"""A server process a benchmark starts and always stops: ``with serving(argv, port, log)``
starts ``argv`` with its output in ``log``, returns once ``127.0.0.1:port`` accepts
connections, and on leaving the block (normally, by an exception or by Ctrl-C) stops it
with SIGTERM, then SIGKILL after :data:`STOP_TIMEOUT_S`.

Shared by ``produce_consume.py`` (its Sluice broker) and ``request_cost.py`` (Sluice,
Tansu and Redis side by side).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

START_TIMEOUT_S = 60.0
"""How long a server may take to accept connections after it is started."""
STOP_TIMEOUT_S = 30.0
"""How long a server may take to exit after SIGTERM before it is killed."""
PORT_POLL_INTERVAL_S = 0.05
"""How often the port is tried while waiting for the server to listen."""
CONNECT_TIMEOUT_S = 0.5


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within STOP_TIMEOUT_S."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def serving(argv: list[str], port: int, log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``argv`` (stdout and stderr appended to ``log_path``), wait until it listens on
    loopback ``port``, yield the process, stop it afterwards."""
    with log_path.open("ab") as log:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise SystemExit(f"{argv[0]} exited with {process.returncode}; see {log_path}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=CONNECT_TIMEOUT_S):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit(
                        f"{argv[0]} did not listen within {START_TIMEOUT_S}s; see {log_path}"
                    ) from None
                time.sleep(PORT_POLL_INTERVAL_S)
        yield process
    finally:
        stop(process)
