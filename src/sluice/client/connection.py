"""One TCP connection to one broker: version negotiation and pipelined requests.

Life of a connection::

    connect() ──► open socket ──► start reader task ──► ApiVersions v0 ──► ready
                      │ refused / unreachable                    │
                      ▼                                          ▼
               BrokerUnreachableError                     request() x N in flight
                                                                 │ EOF, reset, bad frame
                                         close() ◄───────────────┴──► broken: every waiter
                                                                      and every later
                                                                      request gets the error

Requests are pipelined: each gets the next correlation id and a future, its frame is
written whole, and the connection's reader task (owned by the connection, stopped and
awaited by :meth:`BrokerConnection.close`) matches every response to its future by
correlation id. At most ``in_flight_requests_max`` requests wait for answers at once;
a request over the limit waits for a slot.

A request whose caller gives up (timeout, cancellation) keeps its slot until the broker
answers it, because the broker will still send that answer; the answer is then
discarded. Requests sent with ``expect_response=False`` (Produce with acks=0, which the
broker never answers) take no slot and return ``None`` once written.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from kio.schema.api_versions.v0.request import ApiVersionsRequest

from sluice.client.errors import (
    BrokerUnreachableError,
    ClientError,
    ConnectionClosedError,
    MalformedResponseError,
    RequestTimedOutError,
    UnsupportedApiError,
)
from sluice.client.messages import VersionedRequest
from sluice.client.versions import CLIENT_VERSIONS, api_name, negotiate
from sluice.common import errors
from sluice.common.limits import FRAME_BYTES_MAX
from sluice.protocol.codec import decode_response, encode_request
from sluice.protocol.framing import FrameDecoder

CONNECT_TIMEOUT_S_DEFAULT = 10.0
"""How long opening the socket plus the ApiVersions exchange may take."""

REQUEST_TIMEOUT_S_DEFAULT = 30.0
"""How long a request waits for its answer (Kafka's request.timeout.ms is 30 s). Long
polls must ask for less than this."""

IN_FLIGHT_REQUESTS_MAX_DEFAULT = 100
"""Answers awaited at once on one connection; bounds the futures and the broker's queue
(the broker pauses reading past its own limit of the same size)."""

RESPONSE_BYTES_MAX = FRAME_BYTES_MAX
"""Largest response frame accepted; a larger size prefix breaks the connection before
anything is buffered. Fetch answers are bounded by the request's max_bytes, far less."""

READ_CHUNK_BYTES = 256 * 1024
"""Bytes asked of the socket per read by the reader task."""

CORRELATION_ID_MASK = 0x7FFF_FFFF
"""Correlation ids are non-negative int32s and wrap around."""

_CORRELATION_ID = struct.Struct(">i")


@dataclass(slots=True)
class _Pending:
    api_key: int
    version: int
    future: asyncio.Future[Any]


class BrokerConnection:
    """A connection to one broker. Create it with :meth:`connect`.

    Use it as an async context manager, or call :meth:`close` when done::

        async with await BrokerConnection.connect("127.0.0.1", 9092) as connection:
            response = await connection.request(Request(ApiKey.METADATA, {"topics": None}))
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str | None = "sluice",
        request_timeout_s: float = REQUEST_TIMEOUT_S_DEFAULT,
        in_flight_requests_max: int = IN_FLIGHT_REQUESTS_MAX_DEFAULT,
    ) -> None:
        """Prepare a connection; nothing happens on the network until :meth:`open`."""
        assert in_flight_requests_max > 0
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self._in_flight = asyncio.Semaphore(in_flight_requests_max)
        self._pending: dict[int, _Pending] = {}
        self._next_correlation_id = 0
        self._write_lock = asyncio.Lock()
        self._decoder = FrameDecoder(RESPONSE_BYTES_MAX)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._failure: ClientError | None = None
        self._closed = False
        self._broker_ranges: dict[int, tuple[int, int]] = {}
        self._versions: dict[int, int] = {}

    # ── opening ────────────────────────────────────────────────────────────────────

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        client_id: str | None = "sluice",
        connect_timeout_s: float = CONNECT_TIMEOUT_S_DEFAULT,
        request_timeout_s: float = REQUEST_TIMEOUT_S_DEFAULT,
        in_flight_requests_max: int = IN_FLIGHT_REQUESTS_MAX_DEFAULT,
    ) -> BrokerConnection:
        """Open a connection and negotiate API versions with the broker.

        Raises :class:`BrokerUnreachableError` when no connection can be made, and
        :class:`ConnectionClosedError` or :class:`RequestTimedOutError` when the broker accepts the
        connection but does not answer ApiVersions.
        """
        connection = cls(
            host,
            port,
            client_id=client_id,
            request_timeout_s=request_timeout_s,
            in_flight_requests_max=in_flight_requests_max,
        )
        await connection.open(connect_timeout_s)
        return connection

    async def open(self, connect_timeout_s: float = CONNECT_TIMEOUT_S_DEFAULT) -> None:
        """Open the socket, start the reader task and negotiate versions."""
        assert self._writer is None, "a BrokerConnection is opened once"
        try:
            async with asyncio.timeout(connect_timeout_s):
                self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        except ConnectionRefusedError:
            raise BrokerUnreachableError(self.host, self.port, "connection refused") from None
        except TimeoutError:
            raise BrokerUnreachableError(
                self.host, self.port, f"no connection within {connect_timeout_s:g} s"
            ) from None
        except socket.gaierror as e:
            raise BrokerUnreachableError(
                self.host, self.port, e.strerror or str(e), host_unknown=True
            ) from None
        except OSError as e:
            raise BrokerUnreachableError(self.host, self.port, e.strerror or str(e)) from None
        self._reader_task = asyncio.create_task(
            self._read_responses(), name=f"sluice-client-reader-{self.address}"
        )
        try:
            await self._negotiate(connect_timeout_s)
        except BaseException:
            await self.close()
            raise

    async def _negotiate(self, timeout_s: float) -> None:
        response = await self.request(ApiVersionsRequest(), timeout_s=timeout_s)
        if response.error_code != errors.ErrorCode.none:
            raise errors.for_code(response.error_code)(
                f"broker at {self.address} refused ApiVersions v0"
            )
        self._broker_ranges = {
            int(entry.api_key): (int(entry.min_version), int(entry.max_version))
            for entry in response.api_keys
        }
        self._versions = negotiate(self._broker_ranges)

    # ── state ──────────────────────────────────────────────────────────────────────

    @property
    def address(self) -> str:
        """``host:port`` of the broker."""
        return f"{self.host}:{self.port}"

    @property
    def is_usable(self) -> bool:
        """True while requests can be sent: open, not closed, not broken."""
        return self._writer is not None and not self._closed and self._failure is None

    @property
    def versions(self) -> dict[int, int]:
        """The version chosen for each API both sides support (API key → version)."""
        return dict(self._versions)

    @property
    def broker_ranges(self) -> dict[int, tuple[int, int]]:
        """What the broker advertised: API key → (min, max) version."""
        return dict(self._broker_ranges)

    def supports(self, api_key: int) -> bool:
        """True when a version of ``api_key`` was agreed on."""
        return int(api_key) in self._versions

    def version_for(self, api_key: int) -> int:
        """The agreed version of ``api_key``; raises :class:`UnsupportedApiError` if none."""
        version = self._versions.get(int(api_key))
        if version is None:
            raise UnsupportedApiError(self._unsupported_message(int(api_key)))
        return version

    def _unsupported_message(self, api_key: int) -> str:
        client = CLIENT_VERSIONS.get(api_key)
        client_text = f"v{client[0]}-{client[1]}" if client else "no version"
        broker = self._broker_ranges.get(api_key)
        broker_text = f"v{broker[0]}-{broker[1]}" if broker else "does not offer it"
        return (
            f"broker at {self.address} and this client share no version of "
            f"{api_name(api_key)} (client speaks {client_text}, broker {broker_text})"
        )

    # ── requests ───────────────────────────────────────────────────────────────────

    def _payload_for(self, request: VersionedRequest | Any) -> Any:
        if hasattr(request, "__api_key__"):
            payload: Any = request
            api_key, version = int(payload.__api_key__), int(payload.__version__)
            if self._broker_ranges and not (
                (low_high := self._broker_ranges.get(api_key))
                and low_high[0] <= version <= low_high[1]
            ):
                raise UnsupportedApiError(
                    f"broker at {self.address} does not serve {api_name(api_key)} v{version}"
                )
            return payload
        return request.build(self.version_for(request.api_key))

    async def request(
        self,
        request: VersionedRequest | Any,
        *,
        timeout_s: float | None = None,
        expect_response: bool = True,
    ) -> Any:
        """Send one request and return the broker's decoded answer (a kio payload).

        ``request`` is either a :class:`~sluice.client.messages.VersionedRequest` (built
        at the agreed version) or a ready kio request payload (sent at its own version).
        With ``expect_response=False`` the request is only written and ``None`` is
        returned (for Produce with acks=0, which gets no answer).

        Raises :class:`RequestTimedOutError` after ``timeout_s`` (default: the connection's
        ``request_timeout_s``), :class:`ConnectionClosedError` when the connection ends first,
        and :class:`UnsupportedApiError` when the broker does not serve the API. Error codes
        inside the answer are the caller's to check.
        """
        self._raise_if_unusable()
        payload = self._payload_for(request)
        api_key, version = int(payload.__api_key__), int(payload.__version__)
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        pending: _Pending | None = None
        try:
            async with asyncio.timeout(timeout):
                if not expect_response:
                    frame_bytes = encode_request(
                        self._take_correlation_id(), self.client_id, payload
                    )
                    await self._write(frame_bytes)
                    return None
                await self._in_flight.acquire()
                self._raise_if_unusable(release_slot=True)
                correlation_id = self._take_correlation_id()
                future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                pending = _Pending(api_key, version, future)
                self._pending[correlation_id] = pending
                await self._write(encode_request(correlation_id, self.client_id, payload))
                return await future
        except TimeoutError:
            raise RequestTimedOutError(
                f"{api_name(api_key)} v{version} to broker at {self.address} got no answer "
                f"within {timeout:g} s"
            ) from None
        finally:
            if pending is not None and not pending.future.done():
                pending.future.cancel()  # the reader discards the late answer

    def _take_correlation_id(self) -> int:
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & CORRELATION_ID_MASK
        return correlation_id

    def _raise_if_unusable(self, *, release_slot: bool = False) -> None:
        if self.is_usable:
            return
        if release_slot:
            self._in_flight.release()
        if self._failure is not None:
            raise self._failure
        if self._writer is None:
            raise ConnectionClosedError(f"connection to broker at {self.address} is not open yet")
        raise ConnectionClosedError(f"connection to broker at {self.address} is closed")

    async def _write(self, frame_bytes: bytes) -> None:
        writer = self._writer
        assert writer is not None
        async with self._write_lock:
            try:
                writer.write(frame_bytes)
                await writer.drain()
            except OSError as e:
                failure = ConnectionClosedError(
                    f"connection to broker at {self.address} broke while sending: {e.strerror or e}"
                )
                self._fail(failure)
                raise failure from None

    # ── the reader task ────────────────────────────────────────────────────────────

    async def _read_responses(self) -> None:
        reader = self._reader
        assert reader is not None
        try:
            while True:
                try:
                    data = await reader.read(READ_CHUNK_BYTES)
                except OSError as e:
                    raise ConnectionClosedError(
                        f"connection to broker at {self.address} broke: {e.strerror or e}"
                    ) from None
                if not data:
                    raise ConnectionClosedError(f"broker at {self.address} closed the connection")
                try:
                    frames = self._decoder.feed(data)
                except errors.ProtocolError as e:
                    raise MalformedResponseError(f"broker at {self.address} sent {e}") from None
                for frame_bytes in frames:
                    self._dispatch(frame_bytes)
        except ClientError as e:
            self._fail(e)
        except BaseException as e:
            # Cancelled by close(), or a bug: either way no answer will come any more.
            self._fail(ConnectionClosedError(f"connection to broker at {self.address} is closed"))
            if not isinstance(e, asyncio.CancelledError):
                raise

    def _dispatch(self, frame_bytes: bytes) -> None:
        if len(frame_bytes) < _CORRELATION_ID.size:
            raise MalformedResponseError(
                f"broker at {self.address} sent a {len(frame_bytes)}-byte response"
            )
        (correlation_id,) = _CORRELATION_ID.unpack_from(frame_bytes, 0)
        pending = self._pending.pop(correlation_id, None)
        if pending is None:
            raise MalformedResponseError(
                f"broker at {self.address} answered correlation id {correlation_id}, "
                "which no request has"
            )
        self._in_flight.release()
        if pending.future.done():
            return  # its caller gave up (timeout or cancellation)
        try:
            _, payload = decode_response(pending.api_key, pending.version, frame_bytes)
        except errors.ProtocolError as e:
            pending.future.set_exception(
                MalformedResponseError(
                    f"{api_name(pending.api_key)} v{pending.version} answer from broker at "
                    f"{self.address} does not parse: {e}"
                )
            )
            return
        pending.future.set_result(payload)

    def _fail(self, failure: ClientError) -> None:
        """Mark the connection broken and hand ``failure`` to every waiting request."""
        if self._failure is None and not self._closed:
            self._failure = failure
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            self._in_flight.release()
            if not entry.future.done():
                entry.future.set_exception(failure)
        if self._writer is not None:
            self._writer.close()

    # ── closing ────────────────────────────────────────────────────────────────────

    async def close(self) -> None:
        """Close the socket, stop the reader task, fail requests still waiting."""
        if self._closed:
            return
        self._closed = True
        task, self._reader_task = self._reader_task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]  # a bug in the reader
        self._fail(ConnectionClosedError(f"connection to broker at {self.address} is closed"))
        if self._writer is not None:
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()

    async def __aenter__(self) -> BrokerConnection:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "usable" if self.is_usable else "closed" if self._closed else "broken"
        return f"<BrokerConnection {self.address} {state} in_flight={len(self._pending)}>"
