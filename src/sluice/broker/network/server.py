"""The network server: one task per connection, one request of it handled at a time.

Per connection::

    socket ──read──▶ FrameDecoder ──frame──▶ handler ──response──▶ write/sendfile ─┐
      ▲                   ▲                                                       │
      │                   └────── next frame once the response is queued ◀────────┘
      └── idle watchdog: closes the connection after connections.max.idle.ms

As in Kafka, a connection is muted while one of its requests is handled: its next
request is decoded and dispatched only once the answer to the previous one is handed to
the transport (and the transport holds less than WRITE_BUFFER_HIGH_BYTES; a file slice
of a fetch is sent first). Responses thus leave in request order, and a client
pipelining many expensive requests has one handler at a time, so it cannot make others
wait behind its pipeline. One exception, where Kafka's rule costs a whole replication
round trip per request: a Produce with acks=all whose batches are appended and which
only waits for the in-sync replicas answers with a :class:`Deferred`, and the connection
takes its next request if that is a Produce too (up to PRODUCE_PIPELINE_DEPTH of them
waiting, what an idempotent producer keeps in flight). Their appends stay in request
order, one after the other, and their answers are written in request order; any other
request waits until every earlier answer is written, so it is handled exactly as in
Kafka. A Fetch with max_wait holds its connection's next requests, as in Kafka. After
each request the connection yields, so every connection and the listener's accepts get
their turn.

Record bytes in fetch responses go from the page cache to the socket without passing
through Python (zero copy on Linux): with ``loop.sendfile`` on asyncio's
loop, and on a loop without it (uvloop) with ``os.sendfile`` on the socket's descriptor
(see :meth:`Connection._sendfile_to_descriptor`). A response with at most
SMALL_RESPONSE_COPY_BYTES of records is copied and sent in one write, and in larger ones
slices smaller than ZERO_COPY_SLICE_BYTES_MIN are copied (cheaper than a sendfile for a
few KiB); over TLS every slice is copied, in chunks.

What one connection may hold is bounded: the bytes read beyond the request being
handled (the socket is no longer read once the frame decoder holds more than
READ_LIMIT_BYTES), and the responses waiting for the socket
(QUEUED_RESPONSE_BYTES_PER_CONNECTION_MAX in common.limits; no request of the connection
is handled while its transport holds more). A paused reader leaves the bytes in the
kernel, and TCP pushes back on the client.

Connections beyond ``max.connections``, beyond a listener's
``listener.name.<name>.max.connections``, or beyond ``max.connections.per.ip`` from one
address (``max.connections.per.ip.overrides`` for named ones), are closed as soon as they
are accepted, as Kafka does. A frame's length prefix above ``socket.request.max.bytes``
closes its connection before the body is read. A connection with no
bytes moving for ``connections.max.idle.ms`` (while no handler is working for it), or
one that has held an incomplete frame that long, is closed.

On a SASL listener a connection is unauthenticated until SaslAuthenticate succeeds: its
frames may be at most ``sasl.server.max.receive.size`` and each request is answered
before the next is read (the dispatcher serves only ApiVersions and the SASL APIs then,
and a failed authentication closes the connection once its answer is written). The
answer to a failed authentication waits ``connection.failed.authentication.delay.ms``
first, as in Kafka, on this connection's own task: others are served meanwhile.

A peer that sends bytes we cannot parse has its connection closed; everyone else keeps
being served. A handler that raises something other than a Kafka error is a bug: it is
logged with its traceback and its connection closed. These warnings are rate limited
(MALFORMED_REQUEST_WARNINGS_PER_INTERVAL), with a count of those suppressed.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol

from sluice.broker.network.socket_stream import SocketStream
from sluice.common.errors import KafkaStorageError, ProtocolError
from sluice.common.limits import (
    FRAME_BYTES_MAX,
    MALFORMED_REQUEST_WARNING_INTERVAL_MS,
    MALFORMED_REQUEST_WARNINGS_PER_INTERVAL,
    QUEUED_RESPONSE_BYTES_PER_CONNECTION_MAX,
)
from sluice.protocol.framing import FrameDecoder

log = logging.getLogger(__name__)

READ_LIMIT_BYTES = 256 * 1024
"""Bytes a connection's decoder may hold beyond the frame being handled before the
socket is no longer read (the kernel keeps the rest; TCP pushes back on the client)."""
TLS_WRITE_CHUNK_BYTES = 256 * 1024
"""Record bytes a TLS connection copies through memory at a time (no sendfile there)."""
SMALL_RESPONSE_COPY_BYTES = 64 * 1024
"""A fetch response whose record slices total at most this many bytes is read into
memory and written with one send: each ``loop.sendfile`` costs a send of the framing
before it, its own syscalls and two more turns of the event loop, far more than copying a
few KiB from the page cache (a follower's fetch at 1,000 messages/s carries one small
batch). Larger responses keep zero copy."""
ZERO_COPY_SLICE_BYTES_MIN = 16 * 1024
"""Record bytes below which a file slice is copied (pread, then written with the rest of
the response) rather than sent with sendfile: for a few KiB, the copy costs less than
the sendfile (on asyncio's loop, a wait for the transport to flush, a writer callback and
a future per slice). A follower or a consumer at the tail fetches such slices."""
SENDFILE_BLOCKED_CHUNK_BYTES = 64 * 1024
"""Record bytes copied through the transport when the socket's send buffer is full
during a sendfile on a loop without ``loop.sendfile`` (uvloop): the transport tells the
connection once it has flushed them, that is once the socket takes bytes again, and the
rest of the file slice goes by sendfile (a loop without ``loop.sendfile`` does not let us
watch the transport's socket for writability ourselves)."""
WRITE_BUFFER_HIGH_BYTES = QUEUED_RESPONSE_BYTES_PER_CONNECTION_MAX
CONNECTIONS_MAX_IDLE_MS_DEFAULT = 600_000
MAX_CONNECTIONS_DEFAULT = 10_000
MAX_CONNECTIONS_PER_IP_DEFAULT = 1_000
FAILED_AUTHENTICATION_DELAY_MS_DEFAULT = 100
"""Kafka's connection.failed.authentication.delay.ms."""
PRODUCE_PIPELINE_DEPTH = 5
"""Produce requests of one connection that may wait for their in-sync replicas at once,
their batches appended (an idempotent producer keeps at most 5 in flight per broker):
the next Produce is taken while earlier ones wait, and answers leave in request order."""
_PRODUCE_API_KEY = b"\x00\x00"


class FileSlice(Protocol):
    @property
    def file(self) -> BinaryIO: ...
    @property
    def position(self) -> int: ...
    @property
    def size_bytes(self) -> int: ...
    def read(self) -> bytes: ...


Answer = bytes | list[bytes | FileSlice] | None
"""A response frame (with file slices of records to send zero copy), or None (acks=0)."""


class Deferred:
    """The answer to a request that is not ready yet but holds its connection no longer: a
    Produce with acks=all whose batches are appended and which waits for its in-sync
    replicas. The connection writes ``answer``'s result in request order once it is done
    and may take its next Produce meanwhile."""

    __slots__ = ("_on_abandoned", "answer")

    def __init__(
        self,
        answer: Coroutine[Any, Any, Answer],
        on_abandoned: Callable[[], None] | None = None,
    ) -> None:
        """``on_abandoned``: releases what the end of ``answer`` would have released,
        should it never start (:meth:`abandon`)."""
        self.answer = answer
        self._on_abandoned = on_abandoned

    def abandon(self) -> None:
        """The connection will never await ``answer``: it closed before the task that
        was to await it took its first step, so nothing of the coroutine ran, not even
        its ``finally``. Close it and call ``on_abandoned``. Nothing happens once the
        answer has started (its own ``finally`` releases what it holds)."""
        if inspect.getcoroutinestate(self.answer) != inspect.CORO_CREATED:
            return
        self.answer.close()
        if self._on_abandoned is not None:
            self._on_abandoned()


Response = Answer | Deferred
RequestHandler = Callable[[bytes, "ConnectionInfo"], Coroutine[Any, Any, Response]]


ANONYMOUS_PRINCIPAL = "User:ANONYMOUS"


class ConnectionInfo:
    """What handlers may know about the connection a request came on."""

    def __init__(
        self,
        peer: str,
        host: str = "",
        *,
        listener_name: str = "PLAINTEXT",
        security_protocol: str = "PLAINTEXT",
        principal: str = ANONYMOUS_PRINCIPAL,
    ) -> None:
        self.peer = peer
        self.host = host
        """The client's IP address, shown as a group member's host."""
        self.listener_name = listener_name
        """The listener the connection came in on: Metadata, FindCoordinator and the
        other answers that name brokers give their endpoints on this listener."""
        self.security_protocol = security_protocol
        """That listener's security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)."""
        self.principal = principal
        """Who the client is, Kafka-style (``User:CN=alice,OU=eng`` from a verified TLS
        client certificate); authentication sets it, authorization reads it."""
        self.authenticated = not security_protocol.startswith("SASL_")
        """Whether requests other than ApiVersions and the SASL APIs are served."""
        self.sasl_mechanism: str | None = None
        """The mechanism SaslHandshake chose, until its exchange ends."""
        self.sasl_exchange: object | None = None
        """The mechanism's server state while an exchange is under way."""
        self.sasl_legacy_framing = False
        """SaslHandshake v0 was used: Kafka's legacy framing, raw tokens that follow."""
        self.sasl_session_ends_ms: int | None = None
        """When the SASL session ends (connections.max.reauth.ms, monotonic ms), or None."""
        self.close_after_response = False
        """Close the connection once the response being computed is written (a failed
        SASL authentication)."""
        self.authentication_failed = False
        """The response being computed refuses an authentication: it is written after
        ``connection.failed.authentication.delay.ms``, then the connection is closed."""
        self.client_software_name: str | None = None
        self.client_software_version: str | None = None
        """What the client says it is (ApiVersions v3+, KIP-511), e.g. ``apache-kafka-java``
        ``4.0.0``; None until it says so."""
        self.muted_until = 0.0
        """``time.monotonic()`` until which no further request of the connection is handled: a
        client over its quota is muted for its throttle time (KIP-219)."""

    def mute_for(self, seconds: float) -> None:
        self.muted_until = max(self.muted_until, time.monotonic() + seconds)


@dataclass
class ConnectionCounts:
    """Open connections, all listeners together (``max.connections`` and
    ``max.connections.per.ip`` count every listener's)."""

    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    per_ip: dict[str, int] = field(default_factory=dict)


@dataclass
class RecordBytesSent:
    """File-slice (record) bytes the connections of a listener sent, by how (tests and
    metrics tell zero copy from copies through memory)."""

    zero_copy: int = 0
    copied: int = 0


class ConnectionIdle(Exception):
    """No bytes moved (or a frame stayed incomplete) for connections.max.idle.ms."""


class ConnectionClosedAfterResponse(Exception):
    """A handler asked for the connection to be closed once its answer was written."""


class RateLimitedLog:
    """Logs at most ``messages_per_interval`` messages per interval; counts the rest and
    reports the count in one line when the interval ends."""

    def __init__(
        self,
        logger: logging.Logger,
        level: int,
        what: str,
        messages_per_interval: int = MALFORMED_REQUEST_WARNINGS_PER_INTERVAL,
        interval_ms: int = MALFORMED_REQUEST_WARNING_INTERVAL_MS,
    ) -> None:
        self._logger = logger
        self._level = level
        self._what = what
        self._messages_per_interval = messages_per_interval
        self._interval_s = interval_ms / 1000
        self._interval_end = 0.0
        self._logged = 0
        self._suppressed = 0
        self._report: asyncio.TimerHandle | None = None

    def log(self, message: str, *args: object, exc_info: BaseException | None = None) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        if now >= self._interval_end:
            self._report_suppressed()
            self._interval_end = now + self._interval_s
            self._logged = 0
        if self._logged < self._messages_per_interval:
            self._logged += 1
            self._logger.log(self._level, message, *args, exc_info=exc_info)
            return
        self._suppressed += 1
        if self._report is None:
            self._report = loop.call_at(self._interval_end, self._report_suppressed)

    def _report_suppressed(self) -> None:
        if self._report is not None:
            self._report.cancel()
            self._report = None
        if self._suppressed:
            self._logger.log(
                self._level,
                "%d more %s suppressed in the last %.0f s",
                self._suppressed,
                self._what,
                self._interval_s,
            )
            self._suppressed = 0

    def close(self) -> None:
        self._report_suppressed()


class Server:
    """One listener: its address, name and security protocol, and for TLS listeners
    the server context (``ssl_context``; its SNI callback may swap the context of each
    connection for a reloaded one, see ``broker.network.tls``). ``principal_of`` names the
    principal of a new connection from its verified peer certificate (None without)."""

    def __init__(
        self,
        host: str,
        port: int,
        handle: RequestHandler,
        *,
        connections_max_idle_ms: int = CONNECTIONS_MAX_IDLE_MS_DEFAULT,
        max_connections: int = MAX_CONNECTIONS_DEFAULT,
        max_connections_per_ip: int = MAX_CONNECTIONS_PER_IP_DEFAULT,
        listener_name: str = "PLAINTEXT",
        security_protocol: str = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
        principal_of: Callable[[dict[str, Any] | None], str] | None = None,
        connection_counts: ConnectionCounts | None = None,
        max_connections_per_ip_overrides: Mapping[str, int] | None = None,
        listener_max_connections: int | None = None,
        request_max_bytes: int = FRAME_BYTES_MAX,
        unauthenticated_frame_bytes_max: int = FRAME_BYTES_MAX,
        failed_authentication_delay_ms: int = FAILED_AUTHENTICATION_DELAY_MS_DEFAULT,
    ) -> None:
        self.host = host
        self._failed_authentication_delay_ms = failed_authentication_delay_ms
        self._unauthenticated_frame_bytes_max = unauthenticated_frame_bytes_max
        self.port = port
        self.listener_name = listener_name
        self.security_protocol = security_protocol
        self._ssl_context = ssl_context
        self._principal_of = principal_of
        self._handle = handle
        self._connections_max_idle_ms = connections_max_idle_ms
        self._max_connections = max_connections
        self._max_connections_per_ip = max_connections_per_ip
        self._max_connections_per_ip_overrides = dict(max_connections_per_ip_overrides or {})
        self._listener_max_connections = listener_max_connections
        self._request_max_bytes = request_max_bytes
        self._server: asyncio.Server | None = None
        self._counts = connection_counts or ConnectionCounts()
        self._connections: set[asyncio.Task[None]] = set()
        self._malformed_warnings = RateLimitedLog(
            log, logging.WARNING, "warnings about malformed requests"
        )
        self._refused_warnings = RateLimitedLog(log, logging.WARNING, "refused connections")
        self._handshake_failures = RateLimitedLog(log, logging.INFO, "failed TLS handshakes")
        self._internal_errors = RateLimitedLog(log, logging.ERROR, "internal errors")
        self.accepted_total = 0
        self.refused_total = 0
        self.closed_total = 0
        """Connections accepted, refused at once (connection limits) and closed after
        being accepted, since start (metrics)."""
        self.record_bytes_sent = RecordBytesSent()

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    def set_connection_limits(
        self,
        *,
        max_connections: int,
        max_connections_per_ip: int,
        max_connections_per_ip_overrides: Mapping[str, int],
    ) -> None:
        """New connection limits (dynamic broker configs): they count from the next
        connection accepted; open ones stay."""
        self._max_connections = max_connections
        self._max_connections_per_ip = max_connections_per_ip
        self._max_connections_per_ip_overrides = dict(max_connections_per_ip_overrides)

    async def start(self, *, start_serving: bool = True) -> None:
        """Bind the port; accept clients now, or from :meth:`start_serving` on (until
        then, connecting is refused)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: SocketStream(FrameDecoder(), READ_LIMIT_BYTES, self._accepted),
            self.host,
            self.port,
            reuse_address=True,
            start_serving=start_serving,
        )
        sockets = self._server.sockets
        if sockets and self.port == 0:
            self.port = sockets[0].getsockname()[1]

    async def start_serving(self) -> None:
        assert self._server is not None, "start() first"
        await self._server.start_serving()

    def _refusal(self, host: str) -> str | None:
        """Why a new connection from ``host`` must be refused, or None."""
        if len(self._counts.tasks) >= self._max_connections:
            return f"max.connections={self._max_connections} connections are open"
        listener_max = self._listener_max_connections
        if listener_max is not None and len(self._connections) >= listener_max:
            return (
                f"listener.name.{self.listener_name.lower()}.max.connections={listener_max} "
                "connections are open on this listener"
            )
        if host in self._max_connections_per_ip_overrides:
            per_ip, setting = (
                self._max_connections_per_ip_overrides[host],
                "max.connections.per.ip.overrides",
            )
        else:
            per_ip, setting = self._max_connections_per_ip, "max.connections.per.ip"
        if self._counts.per_ip.get(host, 0) >= per_ip:
            return f"{host} already has {setting}={per_ip} connections"
        return None

    def _accepted(self, stream: SocketStream) -> None:
        """A new connection (its transport made): its task serves it from here (the
        stream holds the task, since the loop keeps only a weak reference)."""
        stream.task = asyncio.get_running_loop().create_task(self._on_connection(stream))

    async def _on_connection(self, stream: SocketStream) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer_address = stream.extra("peername")
        peer = str(peer_address)
        host = str(peer_address[0]) if isinstance(peer_address, tuple) else ""
        refusal = self._refusal(host)
        if refusal is not None:
            self._refused_warnings.log("refusing connection from %s: %s", peer, refusal)
            self.refused_total += 1
            assert stream.transport is not None
            stream.transport.abort()
            return
        self._counts.tasks.add(task)
        self._connections.add(task)
        self.accepted_total += 1
        self._counts.per_ip[host] = self._counts.per_ip.get(host, 0) + 1
        info = ConnectionInfo(
            peer,
            host,
            listener_name=self.listener_name,
            security_protocol=self.security_protocol,
        )
        sock = stream.extra("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if self._ssl_context is not None and not await self._handshake(stream, peer, info):
                return
            assert stream.transport is not None
            stream.transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_BYTES)
            await Connection(
                stream,
                self._handle,
                info,
                idle_ms=self._connections_max_idle_ms,
                zero_copy=self._ssl_context is None,
                record_bytes_sent=self.record_bytes_sent,
                request_max_bytes=self._request_max_bytes,
                unauthenticated_frame_bytes_max=self._unauthenticated_frame_bytes_max,
                failed_authentication_delay_ms=self._failed_authentication_delay_ms,
            ).run()
        except* ProtocolError as group:
            self._malformed_warnings.log(
                "closing connection from %s: %s", peer, group.exceptions[0]
            )
        except* ConnectionIdle as group:
            log.debug("closing connection from %s: %s", peer, group.exceptions[0])
        except* ConnectionClosedAfterResponse:
            log.debug("closed connection from %s after its answer", peer)
        except* ConnectionError:
            pass  # the peer went away; nothing to answer
        except* asyncio.CancelledError:
            pass  # stop() cancels connections
        except* Exception as group:
            self._internal_errors.log(
                "closing connection from %s after an internal error", peer, exc_info=group
            )
        finally:
            self.closed_total += 1
            self._counts.tasks.discard(task)
            self._connections.discard(task)
            remaining = self._counts.per_ip.pop(host, 1) - 1
            if remaining:
                self._counts.per_ip[host] = remaining
            with contextlib.suppress(Exception):
                await stream.close()

    async def _handshake(self, stream: SocketStream, peer: str, info: ConnectionInfo) -> bool:
        """TLS on an accepted connection (after the connection limits, so refused
        clients cost no handshake); the principal from the verified client certificate.
        False, logged (rate limited), when the handshake fails: a client without a
        certificate the listener requires, one it does not trust, or not TLS at all."""
        assert self._ssl_context is not None
        try:
            await stream.start_tls(self._ssl_context)
        except (OSError, TimeoutError, ConnectionError) as e:  # ssl.SSLError is an OSError
            self._handshake_failures.log(
                "listener %s: TLS handshake with %s failed: %s", self.listener_name, peer, e
            )
            return False
        if self._principal_of is not None:
            info.principal = self._principal_of(stream.extra("peercert"))
        return True

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
        for rate_limited in (
            self._malformed_warnings,
            self._refused_warnings,
            self._handshake_failures,
            self._internal_errors,
        ):
            rate_limited.close()


def _loop_has_sendfile(loop: asyncio.AbstractEventLoop) -> bool:
    """uvloop has no ``loop.sendfile`` (it raises, even with fallback=True); on such
    a loop record slices go by ``os.sendfile`` on the socket's descriptor instead."""
    return isinstance(loop, asyncio.BaseEventLoop) and type(loop).__module__.startswith("asyncio")


def _slices_bytes(response: list[bytes | FileSlice]) -> int:
    return sum(part.size_bytes for part in response if not isinstance(part, bytes))


class Connection:
    def __init__(
        self,
        stream: SocketStream,
        handle: RequestHandler,
        info: ConnectionInfo,
        *,
        idle_ms: int = CONNECTIONS_MAX_IDLE_MS_DEFAULT,
        zero_copy: bool = True,
        record_bytes_sent: RecordBytesSent | None = None,
        request_max_bytes: int = FRAME_BYTES_MAX,
        unauthenticated_frame_bytes_max: int = FRAME_BYTES_MAX,
        failed_authentication_delay_ms: int = FAILED_AUTHENTICATION_DELAY_MS_DEFAULT,
    ) -> None:
        self._zero_copy = zero_copy
        self._record_bytes_sent = record_bytes_sent or RecordBytesSent()
        self._failed_authentication_delay_s = failed_authentication_delay_ms / 1000
        self._stream = stream
        self._handle = handle
        self._info = info
        self._request_max_bytes = request_max_bytes
        self._unauthenticated_frame_bytes_max = unauthenticated_frame_bytes_max
        self._decoder = stream.decoder
        self._decoder.frame_bytes_max = self._frame_bytes_max()
        self._idle_s = idle_ms / 1000
        self._loop = asyncio.get_running_loop()
        self._partial_frame_since: float | None = None
        """When the connection started waiting for the rest of an incomplete frame."""
        self._running_handlers = 0
        self._unanswered: deque[asyncio.Task[None]] = deque()
        """Tasks writing the answers of Produce requests that wait for their replicas,
        oldest first; each writes after the one before it. Written ones are trimmed from
        the left when the connection next looks."""

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tasks:
            watchdog = tasks.create_task(self._close_when_idle())
            try:
                while True:
                    frame = await self._take_frame()
                    while (muted_s := self._info.muted_until - time.monotonic()) > 0:
                        await asyncio.sleep(muted_s)  # throttled by a quota (broker.quotas)
                    if self._unanswered:
                        await self._make_room(frame[:2] == _PRODUCE_API_KEY)
                    response, close_after = await self._run_handler(frame)
                    del frame
                    if isinstance(response, Deferred):
                        self._answer_later(response, close_after, tasks)
                        continue
                    await self._earlier_answers_written()
                    await self._write(response)
                    if close_after:
                        raise ConnectionClosedAfterResponse
                    if self._decoder.buffered_bytes:
                        # Pipelined: let every other connection (and the listener's
                        # accepts) have its turn before this one's next request; a
                        # handler that never waits would otherwise serve a whole
                        # pipeline in one go. Otherwise the wait for bytes yields.
                        await asyncio.sleep(0)
            finally:
                watchdog.cancel()

    async def _take_frame(self) -> bytes:
        """The next whole frame, reading the socket until it has arrived (its size
        checked against the limit of the connection's current state: smaller before
        SASL authentication)."""
        while (frame := self._next_frame()) is None:
            if self._decoder.buffered_bytes and self._partial_frame_since is None:
                self._partial_frame_since = self._loop.time()
            await self._stream.wait_for_bytes()
        if not self._decoder.buffered_bytes:
            self._partial_frame_since = None
        elif self._partial_frame_since is not None:
            self._partial_frame_since = self._loop.time()
        return frame

    def _frame_bytes_max(self) -> int:
        if self._info.authenticated:
            return self._request_max_bytes
        return min(self._unauthenticated_frame_bytes_max, self._request_max_bytes)

    def _next_frame(self) -> bytes | None:
        self._decoder.frame_bytes_max = self._frame_bytes_max()
        return self._decoder.next_frame()

    async def _make_room(self, produce: bool) -> None:
        """Before handling a request while deferred answers wait: a Produce waits only
        for a place among PRODUCE_PIPELINE_DEPTH, anything else until every earlier
        answer is written (handled as if the connection had been muted)."""
        if not produce:
            await self._earlier_answers_written()
            return
        unanswered = self._unanswered
        while True:
            # Answers are written in order, so the written ones are the oldest. (A task
            # is done before its done-callbacks run: awaiting a done one does not yield,
            # so the deque is trimmed here rather than by a callback.)
            while unanswered and unanswered[0].done():
                unanswered.popleft()
            if len(unanswered) < PRODUCE_PIPELINE_DEPTH:
                return
            await unanswered[0]

    def _answer_later(
        self, deferred: Deferred, close_after: bool, tasks: asyncio.TaskGroup
    ) -> None:
        previous = self._unanswered[-1] if self._unanswered else None
        answering = tasks.create_task(self._answer_after(previous, deferred, close_after))
        # Cancelled before its first step (the connection ended at once: a bad frame
        # already read behind this one), the task never awaits the answer.
        answering.add_done_callback(lambda _: deferred.abandon())
        self._unanswered.append(answering)

    async def _answer_after(
        self, previous: asyncio.Task[None] | None, deferred: Deferred, close_after: bool
    ) -> None:
        """Complete a deferred answer (alongside the earlier ones), then write it once the
        answer before it is written."""
        self._running_handlers += 1
        try:
            response = await deferred.answer
        finally:
            self._running_handlers -= 1
        if previous is not None:
            await previous
        await self._write(response)
        if close_after:
            raise ConnectionClosedAfterResponse

    async def _earlier_answers_written(self) -> None:
        if self._unanswered:
            await self._unanswered[-1]  # written after every one before it
            self._unanswered.clear()

    async def _run_handler(self, frame: bytes) -> tuple[Response, bool]:
        self._running_handlers += 1
        try:
            response = await self._handle(frame, self._info)
            close_after = self._info.close_after_response
            if self._info.authentication_failed and self._failed_authentication_delay_s > 0:
                # Kafka delays a failed authentication's answer and close: one guess
                # per connection per delay. Only this connection waits.
                await asyncio.sleep(self._failed_authentication_delay_s)
        finally:
            self._running_handlers -= 1
        return response, close_after

    async def _close_when_idle(self) -> None:
        """Raise ConnectionIdle once no bytes have moved for the idle time while no
        handler was working for this connection, or once a frame has stayed incomplete
        that long while the reader was waiting for it."""
        while True:
            now = self._loop.time()
            deadline = now + self._idle_s
            reason = ""
            last_activity = self._stream.last_activity
            if self._running_handlers == 0 and last_activity + self._idle_s < deadline:
                deadline = last_activity + self._idle_s
                reason = "no bytes moved"
            partial_since = self._partial_frame_since
            if partial_since is not None and partial_since + self._idle_s < deadline:
                deadline = partial_since + self._idle_s
                reason = f"a request frame stayed incomplete ({self._decoder.buffered_bytes} bytes)"
            if reason and deadline <= now:
                raise ConnectionIdle(
                    f"{reason} for connections.max.idle.ms={self._idle_s * 1000:.0f}"
                )
            await asyncio.sleep(deadline - now)

    async def _write(self, response: Answer) -> None:
        """Hand the response to the transport; wait only while the transport holds more
        than WRITE_BUFFER_HIGH_BYTES (the peer is not reading), or for a sendfile."""
        if response is None:
            return  # acks=0
        loop = self._loop
        stream = self._stream
        if isinstance(response, bytes):
            stream.write(response)
        elif (copied := _slices_bytes(response)) <= SMALL_RESPONSE_COPY_BYTES:
            stream.write(b"".join(p if isinstance(p, bytes) else p.read() for p in response))
            self._record_bytes_sent.copied += copied
        else:
            zero_copy = self._zero_copy
            native_sendfile = zero_copy and _loop_has_sendfile(loop)
            for part in response:
                if isinstance(part, bytes):
                    stream.write(part)
                elif not zero_copy:
                    await self._write_slice(part)
                elif part.size_bytes < ZERO_COPY_SLICE_BYTES_MIN:
                    stream.write(part.read())
                    self._record_bytes_sent.copied += part.size_bytes
                    await self._drain()  # many small slices queue no more than the limit
                elif native_sendfile:
                    await self._drain()
                    assert stream.transport is not None
                    _raise_if_closing(stream.transport)  # loop.sendfile raises RuntimeError
                    await loop.sendfile(stream.transport, part.file, part.position, part.size_bytes)
                    self._record_bytes_sent.zero_copy += part.size_bytes
                    stream.last_activity = loop.time()
                else:
                    await self._sendfile_to_descriptor(part)
        await self._drain()

    async def _sendfile_to_descriptor(self, part: FileSlice) -> None:
        """Send a file slice with ``os.sendfile`` on the socket's own (non-blocking)
        descriptor, for a loop without ``loop.sendfile`` (uvloop).

        The bytes must leave in order: before each sendfile the transport has flushed
        everything written before it (its high-water mark is 0 meanwhile, so ``drain``
        waits exactly until its buffer is empty). When the socket's send buffer is full
        (EAGAIN), SENDFILE_BLOCKED_CHUNK_BYTES of the slice are copied through the
        transport instead; ``drain`` returns once they are flushed, that is once the
        socket takes bytes again, and sendfile resumes after them. So the loop never
        blocks, and what a connection holds in memory stays one small chunk however
        slowly its peer reads."""
        stream = self._stream
        transport = stream.transport
        assert transport is not None
        _raise_if_closing(transport)
        sock = stream.extra("socket")
        if sock is None:
            await self._write_slice(part)
            return
        socket_fd = sock.fileno()
        file_fd = part.file.fileno()
        position, end = part.position, part.position + part.size_bytes
        sent_zero_copy = 0
        transport.set_write_buffer_limits(high=0)
        try:
            while position < end:
                await self._drain()
                try:
                    sent = os.sendfile(socket_fd, file_fd, position, end - position)
                except BlockingIOError:
                    chunk = _read_exactly(
                        part, position, min(SENDFILE_BLOCKED_CHUNK_BYTES, end - position)
                    )
                    stream.write(chunk)
                    self._record_bytes_sent.copied += len(chunk)
                    position += len(chunk)
                    continue
                if sent == 0:  # the file ends before the slice does
                    raise KafkaStorageError(
                        f"{getattr(part.file, 'name', '?')}: wanted {end - position} bytes "
                        f"at {position}, the file ends there"
                    )
                position += sent
                sent_zero_copy += sent
                stream.last_activity = self._loop.time()
        finally:
            self._record_bytes_sent.zero_copy += sent_zero_copy
            if not transport.is_closing():
                transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_BYTES)

    async def _write_slice(self, part: FileSlice) -> None:
        """Copy a file slice to the transport through memory, at most
        TLS_WRITE_CHUNK_BYTES at a time (TLS encrypts in user space, so sendfile cannot
        be used; chunks keep a large fetch from holding its whole size in memory)."""
        self._record_bytes_sent.copied += part.size_bytes
        if part.size_bytes <= TLS_WRITE_CHUNK_BYTES:
            self._stream.write(part.read())
            return
        position, end = part.position, part.position + part.size_bytes
        while position < end:
            wanted = min(TLS_WRITE_CHUNK_BYTES, end - position)
            self._stream.write(_read_exactly(part, position, wanted))
            position += wanted
            await self._drain()

    async def _drain(self) -> None:
        try:
            await self._stream.drain()
        finally:
            self._stream.last_activity = self._loop.time()


def _read_exactly(part: FileSlice, position: int, size_bytes: int) -> bytes:
    """``size_bytes`` of the slice's file from ``position`` (pread: no shared file
    position is touched); KafkaStorageError if the file is shorter."""
    data = os.pread(part.file.fileno(), size_bytes, position)
    if len(data) != size_bytes:
        raise KafkaStorageError(
            f"{getattr(part.file, 'name', '?')}: wanted {size_bytes} bytes at "
            f"{position}, the file has {len(data)}"
        )
    return data


def _raise_if_closing(transport: asyncio.BaseTransport) -> None:
    """The peer went away (or the connection is being closed) while the answer was being
    written: ConnectionResetError, which closes the connection quietly."""
    if transport.is_closing():
        raise ConnectionResetError("the connection closed before its answer was sent")
