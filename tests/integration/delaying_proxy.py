"""A TCP proxy between Kafka clients and one broker that can hold back a request.

The broker advertises the proxy's address, so every connection a client opens goes
through it. ``hold(api_key)`` arms the proxy: the next request with that API key, and
everything after it on the same connection, stays in the proxy (as a request stuck in
the network would), while other connections flow. ``release()`` sends what was held on
to the broker, even if the client has given up on that connection meanwhile, and
returns once the broker has answered the held request. Runs in the test's asyncio loop.
``requests`` lists every request frame that passed (without its size prefix), for the
tool that records golden frames from real clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Coroutine
from typing import Any

_SIZE = struct.Struct(">i")
_REQUEST_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id
_CORRELATION = struct.Struct(">i")


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size_bytes = await reader.readexactly(_SIZE.size)
    (size,) = _SIZE.unpack(size_bytes)
    return size_bytes + await reader.readexactly(size)


class _Link:
    """One client connection and the proxy's connection to the broker for it."""

    def __init__(self, broker_writer: asyncio.StreamWriter) -> None:
        self.broker_writer = broker_writer
        self.held: bytearray | None = None
        self.held_correlation: int | None = None
        self.answered = asyncio.Event()


class DelayingProxy:
    def __init__(self, broker_host: str, broker_port: int) -> None:
        self._broker = (broker_host, broker_port)
        self._server: asyncio.Server | None = None
        self._armed: int | None = None
        self._holding: _Link | None = None
        self.held = asyncio.Event()
        """Set once a request is being held."""
        self._tasks: set[asyncio.Task[None]] = set()
        self.requests: list[bytes] = []
        """Every request frame seen, in arrival order, without its size prefix."""

    async def start(self, bound: socket.socket) -> None:
        """Listen on ``bound``, a socket the caller bound beforehand (on port 0: its
        port was reserved from the moment the kernel chose it)."""
        self._server = await asyncio.start_server(self._accept, sock=bound)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks)

    def hold(self, api_key: int) -> None:
        """Hold the next request with ``api_key`` (and its connection's later bytes)."""
        self._armed = api_key

    async def release(self, timeout_s: float = 30.0) -> None:
        """Forward what was held; return when the broker answered the held request."""
        link = self._holding
        assert link is not None and link.held is not None, "nothing is held"
        data, link.held = bytes(link.held), None
        link.broker_writer.write(data)
        await link.broker_writer.drain()
        async with asyncio.timeout(timeout_s):
            await link.answered.wait()

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        broker_reader, broker_writer = await asyncio.open_connection(*self._broker)
        link = _Link(broker_writer)
        self._spawn(self._to_broker(link, client_reader))
        self._spawn(self._to_client(link, broker_reader, client_writer))

    async def _to_broker(self, link: _Link, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                frame = await _read_frame(reader)
                self.requests.append(frame[_SIZE.size :])
                api_key, _version, correlation = _REQUEST_HEAD.unpack_from(frame, _SIZE.size)
                if link.held_correlation is None and self._armed == api_key:
                    self._armed = None
                    self._holding = link
                    link.held = bytearray()
                    link.held_correlation = correlation
                    self.held.set()
                if link.held is not None:
                    link.held += frame
                    continue
                link.broker_writer.write(frame)
                await link.broker_writer.drain()

    async def _to_client(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                frame = await _read_frame(reader)
                (correlation,) = _CORRELATION.unpack_from(frame, _SIZE.size)
                if correlation == link.held_correlation:
                    link.answered.set()
                if not writer.is_closing():
                    writer.write(frame)
                    with contextlib.suppress(OSError):
                        await writer.drain()
