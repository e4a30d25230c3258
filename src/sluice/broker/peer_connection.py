"""A connection from this broker to another one, for the broker's own requests (the
replica fetcher's Fetch and OffsetForLeaderEpoch; transaction markers and
verifications, through :class:`~sluice.broker.peers.Peers`).

The asyncio shell around the sans-IO client protocol (:mod:`sluice.protocol.client`),
kept to what a fetcher needs: one request at a time, each answered before the next is
sent, with a timeout. The client library has its own, pipelined shell; the broker does
not import the client library (the layering keeps the broker independent of it).
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from typing import Any

from sluice.cluster.model import BrokerInfo
from sluice.protocol.client import NEGOTIATION_REQUEST, ClientProtocol, UndecodableResponse
from sluice.protocol.versions import SUPPORTED, ApiKey

READ_CHUNK_BYTES = 256 * 1024

PEER_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.API_VERSIONS: (0, 0),
    ApiKey.FETCH: (12, 12),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (3, 4),
    ApiKey.WRITE_TXN_MARKERS: (1, 1),
    ApiKey.ADD_PARTITIONS_TO_TXN: (4, 4),
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.READ_SHARE_GROUP_STATE: (0, 0),
    ApiKey.WRITE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: (0, 0),
}
"""What the broker speaks to other brokers: Fetch v12 (the first with the follower's
last fetched epoch, topics by name), OffsetForLeaderEpoch v3+ (with the replica id),
WriteTxnMarkers v1, AddPartitionsToTxn v4 (verify only), the share-state APIs v0."""


class PeerUnavailable(Exception):
    """The other broker cannot be reached, closed the connection, or did not answer in
    time; the message says which."""


@dataclass(frozen=True)
class InterBrokerListener:
    """How this broker reaches the others: the listener name of
    ``inter.broker.listener.name`` (each broker's endpoint of that name) and, for a TLS
    listener, the client context (the truststore, and this broker's certificate for
    listeners that ask for one)."""

    name: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None

    def address(self, broker: BrokerInfo) -> tuple[str, int]:
        return broker.address(self.name)

    def connection(self, broker: BrokerInfo, *, client_id: str) -> PeerConnection:
        host, port = self.address(broker)
        return PeerConnection(host, port, client_id=client_id, ssl_context=self.ssl_context)


class PeerConnection:
    def __init__(
        self, host: str, port: int, *, client_id: str, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self.host = host
        self.port = port
        self._ssl_context = ssl_context
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
        self._protocol.negotiate(await self.request(NEGOTIATION_REQUEST, timeout_s))

    def version_for(self, api_key: ApiKey) -> int:
        """The version agreed on; for an internal API (never advertised, so never
        agreed on), the highest both this table and ``versions.SUPPORTED`` speak: the
        other broker runs the same table."""
        served = SUPPORTED.get(api_key)
        if served is not None and served.internal:
            return min(PEER_VERSIONS[api_key][1], served.max_version)
        return self._protocol.version_for(api_key)

    async def request(self, payload: Any, timeout_s: float) -> Any:
        """Send one request and return its decoded answer. Raises PeerUnavailable, or
        ProtocolError for an answer that does not parse."""
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
