"""One client connection's transport, as the request loop of :mod:`sluice.broker.network.server`
sees it: received bytes go straight into the connection's frame decoder, and writes are
flow controlled both ways.

This replaces asyncio's StreamReader/StreamWriter on the broker's hot path: a request
costs one ``data_received`` (the bytes appended to the decoder, the waiting connection
task woken only once a whole frame is there) instead of a stream read per chunk that
copies the bytes into a second buffer. Everything here runs on the event loop thread;
the connection task is the only caller of :meth:`SocketStream.next_frame`,
:meth:`SocketStream.write` and :meth:`SocketStream.drain`.

Reading stops (``pause_reading``) once the decoder holds a whole frame not yet taken and
more than ``read_limit_bytes`` in all, until the connection task waits for bytes again
(it has taken every whole frame), so a peer that pipelines faster than the broker answers
leaves its bytes in the kernel and TCP pushes back on it. Writing waits (``drain``) while
the transport holds more than its high-water mark.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any, cast

from sluice.protocol.framing import FrameDecoder


class SocketStream(asyncio.Protocol):
    def __init__(
        self,
        decoder: FrameDecoder,
        read_limit_bytes: int,
        on_connection_made: Callable[[SocketStream], None] | None = None,
    ) -> None:
        self.decoder = decoder
        self._on_connection_made = on_connection_made
        self._read_limit_bytes = read_limit_bytes
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        """The connection's task, held here (the loop keeps only weak references)."""
        self._loop = asyncio.get_running_loop()
        self._frame_waiter: asyncio.Future[None] | None = None
        self._drain_waiter: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._eof = False
        self._lost: BaseException | None = None
        self.closed: asyncio.Future[None] = self._loop.create_future()
        self.last_activity = self._loop.time()
        """Loop time bytes last moved in either direction (the idle watchdog reads it)."""

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport, but not necessarily an asyncio.Transport subclass: uvloop's
        # TCPTransport implements the same methods without deriving from it.
        self.transport = cast(asyncio.Transport, transport)
        if self._on_connection_made is not None:
            self._on_connection_made(self)

    def data_received(self, data: bytes) -> None:
        self.last_activity = self._loop.time()
        decoder = self.decoder
        decoder.receive(data)
        if (
            decoder.buffered_bytes > self._read_limit_bytes
            and not self._reading_paused
            and decoder.holds_whole_frame()
        ):
            self._reading_paused = True
            assert self.transport is not None
            self.transport.pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake_reader()
        return True  # keep the transport open: the answer in progress may still be sent

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = exc if exc is not None else ConnectionResetError("connection closed")
        self._eof = True
        self._wake_reader()
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(self._lost)
        self._drain_waiter = None
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        waiter = self._drain_waiter
        self._drain_waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- what the connection task calls --------------------------------------------------

    async def wait_for_bytes(self) -> None:
        """Return once more bytes arrived (or at once if the peer is gone: raises
        ConnectionResetError then). Reading resumes first if it was paused."""
        if self._eof:
            raise ConnectionResetError("peer closed the connection")
        if self._reading_paused:  # no whole frame is left: the next one must be read
            self._reading_paused = False
            assert self.transport is not None
            self.transport.resume_reading()
        waiter = self._loop.create_future()
        self._frame_waiter = waiter
        try:
            await waiter
        finally:
            self._frame_waiter = None
        if self._peer_closed_and_nothing_buffered():
            raise ConnectionResetError("peer closed the connection")

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        if self._lost is not None:
            raise self._lost
        self.transport.write(data)

    async def drain(self) -> None:
        """Wait while the transport holds more than its high-water mark."""
        if self._lost is not None:
            raise self._lost
        if not self._writing_paused:
            return
        waiter = self._loop.create_future()
        self._drain_waiter = waiter
        await waiter

    def extra(self, name: str) -> Any:
        assert self.transport is not None
        return self.transport.get_extra_info(name)

    async def start_tls(self, context: ssl.SSLContext) -> None:
        assert self.transport is not None
        transport = await self._loop.start_tls(self.transport, self, context, server_side=True)
        assert transport is not None
        self.transport = transport

    async def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
            await self.closed

    def _peer_closed_and_nothing_buffered(self) -> bool:
        return self._eof and not self.decoder.buffered_bytes

    def _wake_reader(self) -> None:
        waiter = self._frame_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
