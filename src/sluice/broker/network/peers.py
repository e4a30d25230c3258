"""Requests from this broker to the others, outside replication: one connection per
peer, opened on first use, one request at a time on it.

The transaction coordinator's marker writer, the produce path's transaction
verification and the share-state persister (a share-partition leader's state at
another broker's share coordinator) use it; each sends little (a request per
transaction and partition leader, per share-state read or write), so a connection each,
reused, is enough. A connection that fails is dropped
and opened again by the next request. The Schema Registry's forwarded calls, which may
take seconds at the other broker, have a ``Peers`` of their own, so they never hold up
these.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from sluice.broker.network.peer_connection import (
    InterBrokerListener,
    PeerConnection,
    PeerUnavailable,
)
from sluice.cluster.image import MetadataImage
from sluice.common import errors
from sluice.protocol.private import PrivateRequest
from sluice.protocol.versions import ApiKey

CONNECT_TIMEOUT_S = 5.0


class RequestMayHaveArrived(PeerUnavailable):
    """The request was sent and no answer came in time while the connection stayed open:
    the other broker may still be acting on it, and sending it again may repeat what it
    does. (A connection the other broker closed raises plain PeerUnavailable: it is
    stopping or gone, and what it was doing ended with it.)"""


class Peers:
    def __init__(
        self,
        node_id: int,
        image: Callable[[], MetadataImage],
        listener: InterBrokerListener | None = None,
    ) -> None:
        self._node_id = node_id
        self._listener = listener or InterBrokerListener()
        self._image = image
        self._connections: dict[int, PeerConnection] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def request(
        self,
        node_id: int,
        api_key: ApiKey | int,
        build: Callable[[int], Any],
        timeout_s: float,
        *,
        wait_s: float | None = None,
    ) -> Any:
        """Send ``build(version)`` to broker ``node_id`` and return its answer, waiting
        at most ``wait_s`` (None: as long as it takes) for the connection to be free of
        the request before. Raises PeerUnavailable when the broker is not live, cannot be
        reached, the connection stayed busy or closed, or (RequestMayHaveArrived) the
        request was sent and no answer came in time."""
        assert node_id != self._node_id, "a request to this broker is a local call"
        lock = self._locks.setdefault(node_id, asyncio.Lock())
        try:
            async with asyncio.timeout(wait_s):
                await lock.acquire()
        except TimeoutError:
            raise PeerUnavailable(
                f"the connection to broker {node_id} stayed busy for {wait_s:.1f} s"
            ) from None
        try:
            connection = self._connections.get(node_id)
            try:
                if connection is None:
                    broker = self._image().brokers.get(node_id)
                    if broker is None:
                        raise PeerUnavailable(f"broker {node_id} is not live")
                    connection = self._listener.connection(
                        broker, client_id=f"broker-{self._node_id}"
                    )
                    await connection.open(min(CONNECT_TIMEOUT_S, timeout_s))
                    self._connections[node_id] = connection
                payload = build(connection.version_for(api_key))
                try:
                    # This bound ends first: a timeout is told from a closed connection.
                    async with asyncio.timeout(timeout_s):
                        return await connection.request(payload, timeout_s + CONNECT_TIMEOUT_S)
                except TimeoutError:
                    raise RequestMayHaveArrived(
                        f"broker {node_id} did not answer within {timeout_s:.1f} s"
                    ) from None
            except (PeerUnavailable, errors.ProtocolError, errors.KafkaError):
                self._connections.pop(node_id, None)
                if connection is not None:
                    await connection.close()
                raise
        finally:
            lock.release()

    async def request_private(
        self,
        node_id: int,
        request: PrivateRequest,
        timeout_s: float,
        *,
        wait_s: float | None = None,
    ) -> dict[str, Any]:
        """Send one of Sluice's own APIs (:mod:`sluice.protocol.private`, never
        negotiated: the other broker runs the same code) and return its JSON answer.
        Raises as :meth:`request`."""
        answer = await self.request(
            node_id, request.api_key, lambda _version: request, timeout_s, wait_s=wait_s
        )
        assert isinstance(answer, dict), f"a private API answered {answer!r}"
        return answer

    async def close(self) -> None:
        for connection in list(self._connections.values()):
            await connection.close()
        self._connections.clear()
