"""How ``sluice dev-cluster status|stop|start|kill`` reach the running ``sluice
dev-cluster``, which owns the brokers (they are its children, die with it, and only it
can start one again). Two files in the cluster's directory::

    <dir>/control.sock       a Unix socket the running dev cluster listens on
    <dir>/dev-cluster.json   the processes it runs (pids, ports, states, logs), rewritten
                             at each change (a temporary file renamed over it), removed
                             when it stops cleanly

One request per connection, answered once it is done::

    client ──{"command": "stop", "broker": 1}\\n──▶ owner
           ◀─{"ok": true, "message": "...", "cluster": {...}}\\n──

A socket path longer than the kernel allows (:data:`SOCKET_PATH_BYTES_MAX`) is reached
through the directory's descriptor (``/proc/self/fd/N/control.sock``), so ``--dir`` may
be as deep as it likes. A socket file nobody listens on is what an owner that was killed
left: the next one removes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CONTROL_SOCKET = "control.sock"
STATE_FILE = "dev-cluster.json"
SOCKET_PATH_BYTES_MAX = 107
"""The longest path a Unix socket may be bound to (sun_path holds 108 bytes with NUL)."""
REQUEST_BYTES_MAX = 4096
"""A request is one short JSON line; anything longer is refused."""
ANSWER_BYTES_MAX = 1024 * 1024
"""An answer names at most 16 brokers; anything longer is refused."""
REQUEST_READ_TIMEOUT_S = 5.0
"""How long the owner waits for a connected client's request (it serves one at a time)."""
CONNECT_TIMEOUT_S = 5.0
"""How long a client waits for the owner to accept its connection."""


class ControlError(Exception):
    """The running dev cluster could not be reached or asked; the message says why."""


@contextlib.contextmanager
def socket_path(directory: Path) -> Iterator[str]:
    """The path to bind or connect the control socket of ``directory`` with."""
    path = directory / CONTROL_SOCKET
    if len(os.fsencode(path)) <= SOCKET_PATH_BYTES_MAX:
        yield str(path)
        return
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{descriptor}/{CONTROL_SOCKET}"
    finally:
        os.close(descriptor)


def _connect(directory: Path, timeout_s: float) -> socket.socket:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(timeout_s)
    try:
        with socket_path(directory) as path:
            connection.connect(path)
    except BaseException:
        connection.close()
        raise
    return connection


def owner_running(directory: Path) -> bool:
    """Whether a dev cluster listens on the control socket of ``directory``."""
    if not (directory / CONTROL_SOCKET).exists():
        return False
    try:
        _connect(directory, CONNECT_TIMEOUT_S).close()
    except OSError:
        return False
    return True


def listen(directory: Path) -> socket.socket:
    """The owner's listening control socket (a stale socket file is replaced); the
    caller checked :func:`owner_running` first."""
    with contextlib.suppress(FileNotFoundError):
        (directory / CONTROL_SOCKET).unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with socket_path(directory) as path:
            listener.bind(path)
        listener.listen()
    except BaseException:
        listener.close()
        raise
    return listener


def stop_listening(directory: Path, listener: socket.socket) -> None:
    listener.close()
    with contextlib.suppress(FileNotFoundError):
        (directory / CONTROL_SOCKET).unlink()


def _read_line(connection: socket.socket, bytes_max: int) -> dict[str, Any]:
    received = b""
    while not received.endswith(b"\n"):
        chunk = connection.recv(4096)
        if not chunk:
            raise ControlError("the connection closed before a whole message came")
        received += chunk
        if len(received) > bytes_max:
            raise ControlError(f"a message longer than {bytes_max} bytes")
    try:
        message = json.loads(received)
    except ValueError:
        raise ControlError("a message that is not JSON") from None
    if not isinstance(message, dict):
        raise ControlError("a message that is not a JSON object")
    return message


def read_request(connection: socket.socket) -> dict[str, Any]:
    """The one request of an accepted connection; ControlError when it is not one."""
    connection.settimeout(REQUEST_READ_TIMEOUT_S)
    try:
        return _read_line(connection, REQUEST_BYTES_MAX)
    except OSError as e:  # a timeout included
        raise ControlError(f"no request came: {e}") from None


def send(connection: socket.socket, message: dict[str, Any]) -> None:
    connection.sendall(json.dumps(message).encode() + b"\n")


def request(directory: Path, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Ask the dev cluster running in ``directory`` and return its answer."""
    not_running = (
        f"no dev cluster is running in {directory}: start one with "
        f"'sluice dev-cluster --dir {directory}' (or pass the --dir it was started with)"
    )
    if not (directory / CONTROL_SOCKET).exists():
        raise ControlError(not_running)
    try:
        connection = _connect(directory, CONNECT_TIMEOUT_S)
    except (ConnectionRefusedError, FileNotFoundError):
        raise ControlError(not_running) from None
    except OSError as e:
        raise ControlError(f"could not reach the dev cluster in {directory}: {e}") from None
    with connection:
        try:
            send(connection, message)
            connection.settimeout(timeout_s)
            return _read_line(connection, ANSWER_BYTES_MAX)
        except TimeoutError:
            raise ControlError(
                f"the dev cluster in {directory} did not answer within {timeout_s:.0f} s"
            ) from None
        except OSError as e:
            raise ControlError(f"the dev cluster in {directory} did not answer: {e}") from None


def write_state(directory: Path, state: dict[str, Any]) -> None:
    """Replace the state file at once: a reader sees the old state or the new one."""
    path = directory / STATE_FILE
    temporary = path.with_name(f".{STATE_FILE}.tmp")
    temporary.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(temporary, path)


def remove_state(directory: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (directory / STATE_FILE).unlink()
