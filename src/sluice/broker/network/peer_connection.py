"""A connection from this broker to another one, for the broker's own requests (the
replica fetcher's Fetch and OffsetForLeaderEpoch; transaction markers and
verifications, through :class:`~sluice.broker.network.peers.Peers`).

The asyncio shell around the sans-IO client protocol (:mod:`sluice.protocol.client`),
kept to what a fetcher needs: one request at a time, each answered before the next is
sent, with a timeout. On a SASL inter-broker listener the connection authenticates
right after it opens (``sasl.mechanism.inter.broker.protocol`` with the user and password
of ``sluice.inter.broker.sasl.username``/``password``), and again on the same connection
before its session ends when the other broker gives sessions a lifetime (KIP-368).
The client library has its own, pipelined shell; the broker does not import the client
library (the layering keeps the broker independent of it).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

from sluice.cluster.model import BrokerInfo
from sluice.protocol.client import NEGOTIATION_REQUEST, ClientProtocol, UndecodableResponse
from sluice.protocol.messages import millis, request_module
from sluice.protocol.private import is_private
from sluice.protocol.sasl import (
    PLAIN,
    SaslAuthenticationFailed,
    ScramClient,
    ScramMechanism,
    plain_token,
)
from sluice.protocol.versions import SUPPORTED, ApiKey

REAUTHENTICATE_AT_FRACTION = 0.8
"""Authenticate again once this much of a SASL session's lifetime has passed."""

READ_CHUNK_BYTES = 256 * 1024

PEER_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.API_VERSIONS: (0, 0),
    ApiKey.SASL_HANDSHAKE: (1, 1),
    ApiKey.SASL_AUTHENTICATE: (1, 2),
    ApiKey.FETCH: (12, 12),
    ApiKey.LIST_OFFSETS: (4, 10),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (3, 4),
    ApiKey.WRITE_TXN_MARKERS: (1, 1),
    ApiKey.ADD_PARTITIONS_TO_TXN: (4, 4),
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.READ_SHARE_GROUP_STATE: (0, 0),
    ApiKey.WRITE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: (0, 0),
    ApiKey.ALTER_PARTITION: (3, 3),
    ApiKey.ELECT_LEADERS: (2, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
}
"""What the broker speaks to other brokers: Fetch v12 (the first with the follower's
last fetched epoch, topics by name), OffsetForLeaderEpoch v3+ (with the replica id),
WriteTxnMarkers v1, AddPartitionsToTxn v4 (verify only), the share-state APIs v0,
AlterPartition v3, and ElectLeaders v2 and AlterPartitionReassignments v0-1 forwarded
(to the controller);
SaslHandshake v1 and SaslAuthenticate v1+ on SASL listeners."""


class PeerUnavailable(Exception):
    """The other broker cannot be reached, closed the connection, or did not answer in
    time; the message says which."""


@dataclass(frozen=True)
class InterBrokerSasl:
    """How this broker authenticates to a SASL inter-broker listener."""

    mechanism: str
    username: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class InterBrokerListener:
    """How this broker reaches the others: the listener name of
    ``inter.broker.listener.name`` (each broker's endpoint of that name) and, for a TLS
    listener, the client context (the truststore, and this broker's certificate for
    listeners that ask for one)."""

    name: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl: InterBrokerSasl | None = None

    def address(self, broker: BrokerInfo) -> tuple[str, int]:
        return broker.address(self.name)

    def connection(self, broker: BrokerInfo, *, client_id: str) -> PeerConnection:
        host, port = self.address(broker)
        return PeerConnection(
            host, port, client_id=client_id, ssl_context=self.ssl_context, sasl=self.sasl
        )


class PeerConnection:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str,
        ssl_context: ssl.SSLContext | None = None,
        sasl: InterBrokerSasl | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self._ssl_context = ssl_context
        self._sasl = sasl
        self._reauthenticate_at: float | None = None
        """When (monotonic s) to authenticate again, if the session has a lifetime."""
        self._protocol = ClientProtocol(
            f"broker at {host}:{port}", PEER_VERSIONS, client_id=client_id
        )
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def open(self, timeout_s: float) -> None:
        """Connect and agree on versions; raises PeerUnavailable."""
        try:
            async with asyncio.timeout(timeout_s):
                self._reader, self._writer = await asyncio.open_connection(
                    self.host,
                    self.port,
                    ssl=self._ssl_context,
                    server_hostname=self.host if self._ssl_context is not None else None,
                )
        except (OSError, TimeoutError, ssl.SSLError) as e:
            raise PeerUnavailable(f"cannot connect to {self.host}:{self.port}: {e!r}") from None
        self._protocol.negotiate(await self._send(NEGOTIATION_REQUEST, timeout_s))
        if self._sasl is not None:
            await self._authenticate(self._sasl, timeout_s)

    async def _authenticate(self, sasl: InterBrokerSasl, timeout_s: float) -> None:
        """SaslHandshake and SaslAuthenticate; raises PeerUnavailable if refused."""
        where = f"{self.host}:{self.port}"
        version = self._protocol.version_for(ApiKey.SASL_HANDSHAKE)
        handshake = request_module(ApiKey.SASL_HANDSHAKE, version).SaslHandshakeRequest
        answer = await self._send(handshake(mechanism=sasl.mechanism), timeout_s)
        if answer.error_code:
            raise PeerUnavailable(
                f"{where} refused SASL mechanism {sasl.mechanism} (it offers "
                f"{', '.join(answer.mechanisms)}): set sasl.mechanism.inter.broker.protocol"
            )
        version = self._protocol.version_for(ApiKey.SASL_AUTHENTICATE)
        authenticate = request_module(ApiKey.SASL_AUTHENTICATE, version).SaslAuthenticateRequest

        async def exchange(token: bytes) -> bytes:
            answer = await self._send(authenticate(auth_bytes=token), timeout_s)
            if answer.error_code:
                raise PeerUnavailable(
                    f"{where}: SASL authentication as {sasl.username} failed: "
                    f"{answer.error_message} (sluice.inter.broker.sasl.username/password)"
                )
            lifetime_ms = millis(getattr(answer, "session_lifetime", 0))
            self._reauthenticate_at = (
                time.monotonic() + lifetime_ms * REAUTHENTICATE_AT_FRACTION / 1000
                if lifetime_ms > 0
                else None
            )
            return bytes(answer.auth_bytes)

        if sasl.mechanism == PLAIN:
            await exchange(plain_token(sasl.username, sasl.password))
            return
        client = ScramClient(ScramMechanism.by_name(sasl.mechanism), sasl.username, sasl.password)
        try:
            server_final = await exchange(client.final(await exchange(client.first())))
            client.verify(server_final)
        except SaslAuthenticationFailed as e:
            raise PeerUnavailable(f"{where}: SASL {sasl.mechanism} failed: {e}") from None

    def version_for(self, api_key: ApiKey | int) -> int:
        """The version agreed on; for an internal API (never advertised, so never
        agreed on), the highest both this table and ``versions.SUPPORTED`` speak: the
        other broker runs the same table; Sluice's own APIs have only version 0."""
        if is_private(api_key):
            return 0
        api_key = ApiKey(api_key)
        served = SUPPORTED.get(api_key)
        if served is not None and served.internal:
            return min(PEER_VERSIONS[api_key][1], served.max_version)
        return self._protocol.version_for(api_key)

    async def request(self, payload: Any, timeout_s: float) -> Any:
        """Send one request and return its decoded answer (authenticating again first
        when the SASL session is near its end). Raises PeerUnavailable, or
        ProtocolError for an answer that does not parse."""
        due = self._reauthenticate_at
        if self._sasl is not None and due is not None and time.monotonic() >= due:
            await self._authenticate(self._sasl, timeout_s)
        return await self._send(payload, timeout_s)

    async def _send(self, payload: Any, timeout_s: float) -> Any:
        reader, writer = self._reader, self._writer
        assert reader is not None and writer is not None, "open() first"
        _, frame_bytes = self._protocol.send_request(payload)
        try:
            async with asyncio.timeout(timeout_s):
                writer.write(frame_bytes)
                await writer.drain()
                while (response := self._protocol.next_response()) is None:
                    data = await reader.read(READ_CHUNK_BYTES)
                    if not data:
                        raise PeerUnavailable(f"{self.host}:{self.port} closed the connection")
                    self._protocol.receive_data(data)
        except (OSError, TimeoutError) as e:
            raise PeerUnavailable(f"{self.host}:{self.port} did not answer: {e!r}") from None
        if isinstance(response, UndecodableResponse):
            raise response.error
        return response.payload

    async def close(self) -> None:
        writer = self._writer
        self._writer = self._reader = None
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass
