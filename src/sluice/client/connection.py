"""One TCP connection to one broker: the asyncio shell around the client protocol.

Life of a connection::

    connect() ──► open socket ──► start reader task ──► ApiVersions v0 ──► ready
                      │ refused / unreachable                    │
                      ▼                                          ▼
               BrokerUnreachableError                     request() x N in flight
                                                                 │ EOF, reset, bad frame
                                         close() ◄───────────────┴──► broken: every waiter
                                                                      and every later
                                                                      request gets the error

The protocol itself (correlation ids, the requests awaiting answers, framing, decoding,
version negotiation) is :class:`sluice.protocol.client.ClientProtocol`, which does no
I/O; this module owns the socket, the reader task, timeouts and in-flight limits.

Requests are pipelined: each gets the next correlation id and a future, its frame is
written whole, and the connection's reader task (owned by the connection, stopped and
awaited by :meth:`BrokerConnection.close`) feeds what it reads to the protocol and hands
every decoded response to the future of its correlation id. At most
``in_flight_requests_max`` requests wait for answers at once; a request over the limit
waits for a slot.

A request whose caller gives up (timeout, cancellation) keeps its slot until the broker
answers it, because the broker will still send that answer; the answer is then
discarded. Requests sent with ``expect_response=False`` (Produce with acks=0, which the
broker never answers) take no slot and return ``None`` once written.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from sluice.client.errors import (
    AuthenticationFailedError,
    BrokerUnreachableError,
    ClientError,
    ConnectionClosedError,
    MalformedResponseError,
    RequestTimedOutError,
    TlsHandshakeError,
    UnsupportedApiError,
)
from sluice.client.failure import StoredFailure
from sluice.client.messages import Request, VersionedRequest
from sluice.client.tls import TlsSettings
from sluice.client.versions import CLIENT_VERSIONS
from sluice.common import errors
from sluice.common.limits import FRAME_BYTES_MAX
from sluice.protocol.client import (
    NEGOTIATION_REQUEST,
    ClientProtocol,
    Response,
    UndecodableResponse,
)
from sluice.protocol.sasl import (
    PLAIN,
    SaslAuthenticationFailed,
    ScramClient,
    ScramMechanism,
    plain_token,
)
from sluice.protocol.versions import ApiKey, api_name


@dataclass(frozen=True)
class SaslSettings:
    """SASL credentials for a SASL_PLAINTEXT or SASL_SSL listener: the connection
    authenticates with them right after it negotiates versions. (No re-authentication:
    a connection whose session ends is closed by the broker and opened again on next
    use.)"""

    mechanism: str
    """SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN."""
    username: str
    password: str = field(repr=False)


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

_CERTIFICATE_HINT = (
    "; the broker refused the client's certificate or its absence: does the listener "
    "require one (ssl_certfile), and does it trust the CA that signed it?"
)
"""Said when OpenSSL's reason for a broken TLS connection is about certificates."""


@contextlib.contextmanager
def _unsupported_as_client_error() -> Iterator[None]:
    """The protocol's UnsupportedVersion, raised as the client's UnsupportedApiError."""
    try:
        yield
    except errors.UnsupportedVersion as e:
        raise UnsupportedApiError(e.message) from None


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
        sasl: SaslSettings | None = None,
        tls: TlsSettings | None = None,
    ) -> None:
        """Prepare a connection; nothing happens on the network until :meth:`open`.
        With ``tls`` the socket is wrapped in TLS before anything is sent; with
        ``sasl`` the connection authenticates after negotiating versions."""
        self._sasl = sasl
        self._tls = tls
        assert in_flight_requests_max > 0
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self._in_flight = asyncio.Semaphore(in_flight_requests_max)
        self._protocol = ClientProtocol(
            f"broker at {self.address}",
            CLIENT_VERSIONS,
            client_id=client_id,
            response_bytes_max=RESPONSE_BYTES_MAX,
        )
        self._waiters: dict[int, asyncio.Future[Any]] = {}
        """Correlation id → the future of the request awaiting that answer."""
        self._write_lock = asyncio.Lock()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._failure: StoredFailure[ClientError] | None = None
        self._closed = False

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
        sasl: SaslSettings | None = None,
        tls: TlsSettings | None = None,
    ) -> BrokerConnection:
        """Open a connection and negotiate API versions with the broker.

        Raises :class:`BrokerUnreachableError` when no connection can be made, and
        :class:`ConnectionClosedError` or :class:`RequestTimedOutError` when the broker accepts the
        connection but does not answer ApiVersions, and :class:`TlsHandshakeError` when
        the broker's certificate is refused.
        """
        connection = cls(
            host,
            port,
            client_id=client_id,
            request_timeout_s=request_timeout_s,
            in_flight_requests_max=in_flight_requests_max,
            sasl=sasl,
            tls=tls,
        )
        await connection.open(connect_timeout_s)
        return connection

    async def open(self, connect_timeout_s: float = CONNECT_TIMEOUT_S_DEFAULT) -> None:
        """Open the socket, start the reader task and negotiate versions."""
        assert self._writer is None, "a BrokerConnection is opened once"
        # The context is made at each connect, so new connections read renewed files.
        context = None if self._tls is None else self._tls.context()
        try:
            async with asyncio.timeout(connect_timeout_s):
                self._reader, self._writer = await asyncio.open_connection(
                    self.host,
                    self.port,
                    ssl=context,
                    server_hostname=None if context is None else self.host,
                )
        except ssl.SSLCertVerificationError as e:
            raise TlsHandshakeError(
                f"TLS handshake with broker at {self.address} failed: its certificate was "
                f"refused ({e.verify_message}); check that ssl_cafile holds the CA that "
                f"signed it and that the certificate names {self.host}"
            ) from None
        except ssl.SSLError as e:
            hint = (
                _CERTIFICATE_HINT
                if "CERTIFICATE" in str(e.reason)
                else "; is it a TLS (SSL or SASL_SSL) listener?"
            )
            raise TlsHandshakeError(
                f"TLS handshake with broker at {self.address} failed ({e.reason or e}){hint}"
            ) from None
        except (ConnectionResetError, ConnectionAbortedError) as e:
            if context is None:
                raise BrokerUnreachableError(self.host, self.port, e.strerror or str(e)) from None
            # A plaintext listener reads the ClientHello as a bad frame and hangs up.
            raise TlsHandshakeError(
                f"TLS handshake with broker at {self.address} failed: the broker closed the "
                "connection; is it a TLS (SSL or SASL_SSL) listener?"
            ) from None
        except ConnectionRefusedError:
            raise BrokerUnreachableError(self.host, self.port, "connection refused") from None
        except TimeoutError:
            raise BrokerUnreachableError(
                self.host,
                self.port,
                f"no connection within {connect_timeout_s:g} s",
                timed_out=True,
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
            try:
                await self._negotiate(connect_timeout_s)
            except ConnectionClosedError as e:
                if context is not None:
                    # Under TLS 1.3 a listener that refuses the client's certificate (or
                    # its absence) does so after the handshake: the first read ends.
                    raise ConnectionClosedError(
                        f"{e} right after the TLS handshake{_CERTIFICATE_HINT}"
                    ) from None
                # A TLS listener reads ApiVersions as a bad ClientHello and hangs up.
                raise ConnectionClosedError(
                    f"{e} before answering ApiVersions; if it is a TLS listener, use "
                    "security_protocol SSL or SASL_SSL"
                ) from None
            if self._sasl is not None:
                await self._authenticate(self._sasl, connect_timeout_s)
        except BaseException:
            await self.close()
            raise

    async def _negotiate(self, timeout_s: float) -> None:
        response = await self.request(NEGOTIATION_REQUEST, timeout_s=timeout_s)
        self._protocol.negotiate(response)

    async def _authenticate(self, sasl: SaslSettings, timeout_s: float) -> None:
        """SaslHandshake and SaslAuthenticate; AuthenticationFailedError if refused."""
        handshake = await self.request(
            Request(ApiKey.SASL_HANDSHAKE, {"mechanism": sasl.mechanism}), timeout_s=timeout_s
        )
        if handshake.error_code:
            raise AuthenticationFailedError(
                f"{self.address} does not offer SASL {sasl.mechanism} (it offers "
                f"{', '.join(handshake.mechanisms) or 'nothing'})"
            )

        async def exchange(token: bytes) -> bytes:
            answer = await self.request(
                Request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token}), timeout_s=timeout_s
            )
            if answer.error_code:
                raise AuthenticationFailedError(
                    f"{self.address}: {answer.error_message or 'authentication failed'}"
                )
            return bytes(answer.auth_bytes)

        if sasl.mechanism == PLAIN:
            await exchange(plain_token(sasl.username, sasl.password))
            return
        try:
            client = ScramClient(
                ScramMechanism.by_name(sasl.mechanism), sasl.username, sasl.password
            )
            client.verify(await exchange(client.final(await exchange(client.first()))))
        except (SaslAuthenticationFailed, ValueError) as e:
            raise AuthenticationFailedError(f"{self.address}: SASL {sasl.mechanism}: {e}") from None

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
        return self._protocol.versions

    @property
    def broker_ranges(self) -> dict[int, tuple[int, int]]:
        """What the broker advertised: API key → (min, max) version."""
        return self._protocol.broker_ranges

    def supports(self, api_key: int) -> bool:
        """True when a version of ``api_key`` was agreed on."""
        return self._protocol.supports(api_key)

    def version_for(self, api_key: int) -> int:
        """The agreed version of ``api_key``; raises :class:`UnsupportedApiError` if none."""
        with _unsupported_as_client_error():
            return self._protocol.version_for(api_key)

    # ── requests ───────────────────────────────────────────────────────────────────

    def _payload_for(self, request: VersionedRequest | Any) -> Any:
        if hasattr(request, "__api_key__"):
            payload: Any = request
            with _unsupported_as_client_error():
                self._protocol.check_served(int(payload.__api_key__), int(payload.__version__))
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
        future: asyncio.Future[Any] | None = None
        try:
            async with asyncio.timeout(timeout):
                if not expect_response:
                    _, frame_bytes = self._protocol.send_request(payload, expect_response=False)
                    await self._write(frame_bytes)
                    return None
                await self._in_flight.acquire()
                self._raise_if_unusable(release_slot=True)
                try:
                    correlation_id, frame_bytes = self._protocol.send_request(payload)
                except BaseException:
                    self._in_flight.release()
                    raise
                future = asyncio.get_running_loop().create_future()
                self._waiters[correlation_id] = future
                await self._write(frame_bytes)
                return await future
        except TimeoutError:
            raise RequestTimedOutError(
                f"{api_name(api_key)} v{version} to broker at {self.address} got no answer "
                f"within {timeout:g} s"
            ) from None
        finally:
            if future is not None and not future.done():
                future.cancel()  # the reader discards the late answer

    def _raise_if_unusable(self, *, release_slot: bool = False) -> None:
        if self.is_usable:
            return
        if release_slot:
            self._in_flight.release()
        if self._failure is not None:
            self._failure.raise_again()
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
                except ssl.SSLError as e:
                    # TLS 1.3 clients learn that the broker refused their certificate
                    # only here, from the alert it sends after the handshake.
                    hint = _CERTIFICATE_HINT if "CERTIFICATE" in str(e.reason) else ""
                    raise ConnectionClosedError(
                        f"TLS connection to broker at {self.address} broke: {e.reason or e}{hint}"
                    ) from None
                except OSError as e:
                    raise ConnectionClosedError(
                        f"connection to broker at {self.address} broke: {e.strerror or e}"
                    ) from None
                if not data:
                    raise ConnectionClosedError(f"broker at {self.address} closed the connection")
                self._protocol.receive_data(data)
                try:
                    while (response := self._protocol.next_response()) is not None:
                        self._deliver(response)
                except errors.ProtocolError as e:
                    raise MalformedResponseError(str(e)) from None
        except ClientError as e:
            self._fail(e)
        except BaseException as e:
            # Cancelled by close(), or a bug: either way no answer will come any more.
            self._fail(ConnectionClosedError(f"connection to broker at {self.address} is closed"))
            if not isinstance(e, asyncio.CancelledError):
                raise

    def _deliver(self, response: Response | UndecodableResponse) -> None:
        future = self._waiters.pop(response.correlation_id, None)
        if future is None:
            return  # the connection already failed and gave its waiters the error
        self._in_flight.release()
        if future.done():
            return  # its caller gave up (timeout or cancellation)
        if isinstance(response, UndecodableResponse):
            future.set_exception(MalformedResponseError(str(response.error)))
        else:
            future.set_result(response.payload)

    def _fail(self, failure: ClientError) -> None:
        """Mark the connection broken and hand ``failure`` to every waiting request."""
        if self._failure is None and not self._closed:
            self._failure = StoredFailure(failure)
        waiters, self._waiters = self._waiters, {}
        for future in waiters.values():
            self._in_flight.release()
            if not future.done():
                future.set_exception(failure)
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
        return f"<BrokerConnection {self.address} {state} in_flight={len(self._waiters)}>"
