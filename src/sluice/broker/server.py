"""The network server: one task per connection, requests answered in order.

Per connection::

    socket ──read──▶ FrameDecoder ──frame──▶ handler task ─┐   (one per request,
                                                           │    started in arrival order)
           ◀──write/sendfile── response writer ◀──awaits───┘   (in request order)

Handlers run concurrently, so a long-polling fetch does not hold up a produce behind it,
but responses leave in request order, as the protocol requires. The queue between the
reader and the writer is bounded (IN_FLIGHT_REQUESTS_PER_CONNECTION_MAX): past it the
reader stops reading and TCP pushes back on the client. Record bytes in fetch responses
go from the page cache to the socket with ``loop.sendfile`` (zero copy on Linux).

A peer that sends bytes we cannot parse has its connection closed; everyone else keeps
being served. A handler that raises something other than a Kafka error is a bug: it is
logged with its traceback and its connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Coroutine
from typing import Any, BinaryIO, Protocol

from sluice.common.errors import ProtocolError
from sluice.common.limits import FRAME_BYTES_MAX, IN_FLIGHT_REQUESTS_PER_CONNECTION_MAX
from sluice.protocol.framing import FrameDecoder

log = logging.getLogger(__name__)

READ_CHUNK_BYTES = 256 * 1024
WRITE_BUFFER_HIGH_BYTES = 4 * 1024 * 1024


class FileSlice(Protocol):
    @property
    def file(self) -> BinaryIO: ...
    @property
    def position(self) -> int: ...
    @property
    def size_bytes(self) -> int: ...
    def read(self) -> bytes: ...


Response = bytes | list[bytes | FileSlice] | None
RequestHandler = Callable[[bytes, "ConnectionInfo"], Coroutine[Any, Any, Response]]


class ConnectionInfo:
    """What handlers may know about the connection a request came on."""

    def __init__(self, peer: str, host: str = "") -> None:
        self.peer = peer
        self.host = host
        """The client's IP address, shown as a group member's host."""
        self.client_software_name: str | None = None
        self.client_software_version: str | None = None
        """What the client says it is (ApiVersions v3+, KIP-511), e.g. ``apache-kafka-java``
        ``4.0.0``; None until it says so."""


class Server:
    def __init__(self, host: str, port: int, handle: RequestHandler) -> None:
        self.host = host
        self.port = port
        self._handle = handle
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, *, start_serving: bool = True) -> None:
        """Bind the port; accept clients now, or from :meth:`start_serving` on (until
        then, connecting is refused)."""
        self._server = await asyncio.start_server(
            self._on_connection,
            self.host,
            self.port,
            reuse_address=True,
            limit=READ_CHUNK_BYTES,
            start_serving=start_serving,
        )
        sockets = self._server.sockets
        if sockets and self.port == 0:
            self.port = sockets[0].getsockname()[1]

    async def start_serving(self) -> None:
        assert self._server is not None, "start() first"
        await self._server.start_serving()

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer_address = writer.get_extra_info("peername")
        peer = str(peer_address)
        host = str(peer_address[0]) if isinstance(peer_address, tuple) else ""
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        writer.transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_BYTES)
        try:
            await Connection(reader, writer, self._handle, ConnectionInfo(peer, host)).run()
        except* ProtocolError as group:
            log.warning("closing connection from %s: %s", peer, group.exceptions[0])
        except* (ConnectionError, asyncio.IncompleteReadError):
            pass  # the peer went away; nothing to answer
        except* asyncio.CancelledError:
            pass  # stop() cancels connections; re-raised, 3.11's start_server logs it
        except* Exception as group:
            log.error("closing connection from %s after an internal error", peer, exc_info=group)
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def stop(self) -> None:
        """Stop accepting, then close every connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(BaseException):
                await task
        if self._server is not None:
            await self._server.wait_closed()


def _loop_has_sendfile(loop: asyncio.AbstractEventLoop) -> bool:
    """uvloop has no ``loop.sendfile`` (it raises, even with fallback=True); on such
    a loop record slices are read into memory and written instead."""
    return isinstance(loop, asyncio.BaseEventLoop) and type(loop).__module__.startswith("asyncio")


class Connection:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        handle: RequestHandler,
        info: ConnectionInfo,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._handle = handle
        self._info = info
        self._decoder = FrameDecoder(FRAME_BYTES_MAX)

    async def run(self) -> None:
        in_flight: asyncio.Queue[asyncio.Task[Response] | None] = asyncio.Queue(
            maxsize=IN_FLIGHT_REQUESTS_PER_CONNECTION_MAX
        )
        async with asyncio.TaskGroup() as tasks:
            writer_task = tasks.create_task(self._write_responses(in_flight))
            try:
                while not writer_task.done():
                    data = await self._reader.read(READ_CHUNK_BYTES)
                    if not data:
                        # The peer closed: stop waiting requests (a long-polling fetch)
                        # instead of answering a socket nobody reads.
                        raise ConnectionResetError("peer closed the connection")
                    for frame in self._decoder.feed(data):
                        request = tasks.create_task(self._handle(frame, self._info))
                        await in_flight.put(request)
            finally:
                if not writer_task.done():
                    await in_flight.put(None)

    async def _write_responses(
        self, in_flight: asyncio.Queue[asyncio.Task[Response] | None]
    ) -> None:
        loop = asyncio.get_running_loop()
        writer = self._writer
        zero_copy = _loop_has_sendfile(loop)
        while True:
            task = await in_flight.get()
            if task is None:
                await writer.drain()
                return
            response = await task
            if response is None:
                continue
            if isinstance(response, bytes):
                writer.write(response)
            else:
                for part in response:
                    if isinstance(part, bytes):
                        writer.write(part)
                    elif not zero_copy:
                        writer.write(part.read())
                    else:
                        await writer.drain()
                        await loop.sendfile(
                            writer.transport, part.file, part.position, part.size_bytes
                        )
            await writer.drain()
