"""What a handler knows about the request it answers, beyond the request itself.

The dispatcher builds one :class:`RequestContext` per request; handlers read it and
never reach for the connection any other way; the connection carries the principal the
authorizer checks.
"""

from __future__ import annotations

from dataclasses import dataclass

from sluice.broker.network.server import ConnectionInfo
from sluice.protocol.codec import RequestHeader


@dataclass(frozen=True, slots=True)
class RequestContext:
    header: RequestHeader
    """The request header: API key and version, correlation id, client id."""
    connection: ConnectionInfo
    """The connection the request came on (ApiVersions records the client's software on
    it; Produce orders one connection's appends by it)."""

    @property
    def client_host(self) -> str:
        """The client's IP address ("" when unknown), shown as a group member's host."""
        return self.connection.host
