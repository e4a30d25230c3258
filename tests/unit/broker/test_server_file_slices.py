"""Record bytes (file slices) written by the server's connections on both event loops:
asyncio's (``loop.sendfile``) and uvloop's (``os.sendfile`` on the socket's descriptor,
with small copies while the socket's send buffer is full). Real sockets, a real file, a
stub request handler: what is under test is the server's write path.

The client is a blocking socket in a thread, so the server's loop serves it exactly as it
serves a remote client. Responses are not Kafka frames here: the handler returns header
bytes and file slices, and the client checks every byte arrived once and in order."""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import struct
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvloop

from sluice.broker.network.server import ZERO_COPY_SLICE_BYTES_MIN, ConnectionInfo, Server
from sluice.storage.segment import FileSlice

LOOP_FACTORIES: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}
DATA_FILE_BYTES = 6 * 1024 * 1024
DEADLINE_S = 30.0
"""Bound on every wait (generous: the machine may be loaded)."""
SMALL_SLICE_BYTES = 1000
"""A follower's or a tail consumer's slice: below ZERO_COPY_SLICE_BYTES_MIN, copied."""
SMALL_SLICES = 3000
SMALL_RECEIVE_BUFFER_BYTES = 4096
"""A slow reader's SO_RCVBUF: the server's sends hit a full socket again and again."""


@pytest.fixture(params=sorted(LOOP_FACTORIES))
def loop_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, bytes]]:
    seed = random.randrange(2**32)
    print(f"data file seed {seed}")
    data = random.Random(seed).randbytes(DATA_FILE_BYTES)
    path = tmp_path_factory.mktemp("slices") / "segment.log"
    path.write_bytes(data)
    yield path, data


@dataclass
class Gate:
    """Holds the answer to a ``gated`` request: ``handling`` is set once its handler
    runs, which then waits for ``opened``."""

    handling: asyncio.Event
    opened: asyncio.Event


def _response_plan(size_bytes: int) -> list[tuple[str, int, int] | bytes]:
    """What one request is answered with: bytes, and (file, position, size) slices that
    together cover several MB in several pieces (several partitions of a fetch)."""
    third = size_bytes // 3
    return [
        b"header-0123",
        ("slice", 5, third),
        b"between",
        ("slice", third + 100, third),
        b"",
        ("slice", 2 * third + 7, size_bytes - 2 * third - 7),
        b"end",
    ]


def _small_slice_positions() -> list[int]:
    """Out of file order, so the bytes show their order: one 3 MB answer of 1 KB slices."""
    return [(index * 7919) % SMALL_SLICES * SMALL_SLICE_BYTES for index in range(SMALL_SLICES)]


def _expected(data: bytes) -> bytes:
    parts = []
    for part in _response_plan(len(data)):
        if isinstance(part, bytes):
            parts.append(part)
        else:
            _, position, size = part
            parts.append(data[position : position + size])
    return b"".join(parts)


def _run_with_server(
    loop_name: str,
    path: Path,
    body: Callable[[Server, Gate], Coroutine[Any, Any, None]],
) -> None:
    """Start a server on ``loop_name``'s loop whose handler answers every request with
    the response plan over ``path`` (a request ``ping`` gets ``pong``; ``small``, many
    small slices; ``gated``, the plan once ``body`` sets the gate), run ``body``."""

    async def main() -> None:
        gate = Gate(asyncio.Event(), asyncio.Event())
        with path.open("rb") as file:

            async def handle(frame: bytes, info: ConnectionInfo) -> Any:
                if frame == b"ping":
                    return b"pong"
                if frame == b"gated":
                    gate.handling.set()
                    await gate.opened.wait()
                if frame == b"small":
                    return [
                        FileSlice(file, position, SMALL_SLICE_BYTES)
                        for position in _small_slice_positions()
                    ]
                return [
                    part if isinstance(part, bytes) else FileSlice(file, part[1], part[2])
                    for part in _response_plan(DATA_FILE_BYTES)
                ]

            server = Server("127.0.0.1", 0, handle)
            await server.start()
            try:
                await body(server, gate)
            finally:
                await server.stop()

    with asyncio.Runner(loop_factory=LOOP_FACTORIES[loop_name]) as runner:
        runner.run(main())


def _request(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _connect(port: int, receive_buffer_bytes: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer_bytes is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
    sock.settimeout(DEADLINE_S)
    sock.connect(("127.0.0.1", port))
    return sock


def _read_exactly(sock: socket.socket, size_bytes: int, piece_bytes: int = 1 << 20) -> bytes:
    received = bytearray()
    deadline = time.monotonic() + DEADLINE_S
    while len(received) < size_bytes:
        assert time.monotonic() < deadline, f"read {len(received)} of {size_bytes} bytes"
        chunk = sock.recv(min(piece_bytes, size_bytes - len(received)))
        assert chunk, f"connection closed after {len(received)} of {size_bytes} bytes"
        received += chunk
    return bytes(received)


async def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def test_pipelined_responses_with_several_slices_arrive_whole_and_in_order(
    loop_name: str, data_file: tuple[Path, bytes]
) -> None:
    path, data = data_file
    expected = _expected(data)
    slice_bytes = sum(p[2] for p in _response_plan(len(data)) if not isinstance(p, bytes))

    async def body(server: Server, gate: Gate) -> None:
        def client() -> bytes:
            with _connect(server.port) as sock:
                sock.sendall(_request(b"fetch") + _request(b"fetch") + _request(b"ping"))
                return _read_exactly(sock, 2 * len(expected) + len(b"pong"))

        received = await asyncio.to_thread(client)
        assert received == expected + expected + b"pong"
        sent = server.record_bytes_sent
        assert sent.zero_copy + sent.copied == 2 * slice_bytes
        # Zero copy on both loops: at most a small chunk per full send buffer is copied.
        assert sent.zero_copy > slice_bytes, sent

    _run_with_server(loop_name, path, body)


def test_a_slow_reader_gets_every_byte_while_others_are_served(
    loop_name: str, data_file: tuple[Path, bytes]
) -> None:
    """A reader with a tiny receive buffer reading small pieces keeps the server's
    sends hitting a full socket: the loop must not block on it (another connection is
    answered meanwhile), and the bytes must still arrive in order."""
    path, data = data_file
    expected = _expected(data)

    async def body(server: Server, gate: Gate) -> None:
        slow = _connect(server.port, SMALL_RECEIVE_BUFFER_BYTES)
        try:
            slow.sendall(_request(b"fetch"))
            head = await asyncio.to_thread(_read_exactly, slow, 100_000, 4096)

            def ping() -> bytes:
                with _connect(server.port) as other:
                    other.sendall(_request(b"ping"))
                    return _read_exactly(other, 4)

            # The slow connection's answer is far from sent, and another is served.
            assert await asyncio.to_thread(ping) == b"pong"
            rest = await asyncio.to_thread(_read_exactly, slow, len(expected) - len(head), 4096)
        finally:
            slow.close()
        assert head + rest == expected
        assert server.record_bytes_sent.zero_copy > 0, server.record_bytes_sent

    _run_with_server(loop_name, path, body)


def test_a_peer_closing_mid_sendfile_closes_only_its_connection(
    loop_name: str, data_file: tuple[Path, bytes], caplog: pytest.LogCaptureFixture
) -> None:
    path, data = data_file
    expected = _expected(data)
    caplog.set_level(logging.WARNING, logger="sluice.broker.network.server")

    async def body(server: Server, gate: Gate) -> None:
        def read_a_little_then_reset() -> None:
            sock = _connect(server.port, SMALL_RECEIVE_BUFFER_BYTES)
            sock.sendall(_request(b"fetch"))
            _read_exactly(sock, 50_000, 4096)
            # An RST, not a FIN: the server's next send fails at once.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()

        await asyncio.to_thread(read_a_little_then_reset)
        await _wait_for(lambda: server.closed_total == 1, "the connection to be closed")
        assert server.open_connections == 0

        def full_read() -> bytes:
            with _connect(server.port) as sock:
                sock.sendall(_request(b"fetch"))
                return _read_exactly(sock, len(expected))

        assert await asyncio.to_thread(full_read) == expected

    _run_with_server(loop_name, path, body)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def test_many_small_slices_are_copied_in_order(
    loop_name: str, data_file: tuple[Path, bytes]
) -> None:
    """Slices below ZERO_COPY_SLICE_BYTES_MIN are copied (cheaper than a sendfile each);
    thousands of them in one answer still arrive in order."""
    path, data = data_file
    assert SMALL_SLICE_BYTES < ZERO_COPY_SLICE_BYTES_MIN
    expected = b"".join(
        data[position : position + SMALL_SLICE_BYTES] for position in _small_slice_positions()
    )

    async def body(server: Server, gate: Gate) -> None:
        def client() -> bytes:
            with _connect(server.port, SMALL_RECEIVE_BUFFER_BYTES) as sock:
                sock.sendall(_request(b"small") + _request(b"ping"))
                return _read_exactly(sock, len(expected) + 4, 4096)

        assert await asyncio.to_thread(client) == expected + b"pong"
        assert server.record_bytes_sent.copied == len(expected)
        assert server.record_bytes_sent.zero_copy == 0

    _run_with_server(loop_name, path, body)


def test_a_peer_gone_before_its_answer_is_sent_is_closed_quietly(
    loop_name: str, data_file: tuple[Path, bytes], caplog: pytest.LogCaptureFixture
) -> None:
    """The peer resets while its request is being handled: the file slice of the answer
    finds the transport closing (asyncio's loop.sendfile raised RuntimeError there, which
    was logged as an internal error). The connection is closed quietly."""
    path, _ = data_file
    caplog.set_level(logging.WARNING)

    async def body(server: Server, gate: Gate) -> None:
        sock = await asyncio.to_thread(_connect, server.port)
        try:
            await asyncio.to_thread(sock.sendall, _request(b"gated"))
            await asyncio.wait_for(gate.handling.wait(), DEADLINE_S)
        finally:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # a reset, in the server socket's state from here on
        # The loop reads the reset (the transport is then closing) no later than the
        # handler wakes up and hands the answer over.
        gate.opened.set()
        await _wait_for(lambda: server.closed_total == 1, "the connection to be closed")

    _run_with_server(loop_name, path, body)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
