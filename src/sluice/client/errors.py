"""Errors raised by the client itself, as opposed to errors a broker answers with.

A broker's answer that carries a Kafka error code is raised as the matching
:class:`sluice.common.errors.KafkaError` subclass (one table for both). The classes
here cover what happens before or around an answer: the broker cannot be reached, the
connection drops, an answer does not come in time, or the broker and this client share
no version of an API. Every message is one line that says what went wrong and, where
there is one, what to do about it.
"""

from __future__ import annotations


class ClientError(Exception):
    """Base class of every error raised by ``sluice.client`` itself."""

    retriable: bool = False
    """True when the same request may succeed if sent again (on a new connection)."""


class BrokerUnreachableError(ClientError):
    """No TCP connection could be opened to the broker."""

    retriable = True

    def __init__(self, host: str, port: int, reason: str, *, host_unknown: bool = False) -> None:
        self.host = host
        self.port = port
        self.reason = reason
        hint = f"no host named {host!r} was found" if host_unknown else "is `sluice serve` running?"
        super().__init__(f"cannot reach broker at {host}:{port}: {hint} ({reason})")


class ConnectionClosedError(ClientError):
    """The connection ended (closed by either side, or broken) with requests in flight."""

    retriable = True


class RequestTimedOutError(ClientError):
    """No answer arrived within the request timeout."""

    retriable = True


class UnsupportedApiError(ClientError):
    """The broker and this client have no version of an API in common."""


class MalformedResponseError(ClientError):
    """The broker sent bytes this client cannot parse; the connection is closed."""


class AuthenticationFailedError(ClientError):
    """SASL authentication with the broker failed; the message says why."""


class TlsHandshakeError(ClientError):
    """The TLS handshake with the broker failed (its certificate was refused, or the
    listener does not speak TLS); the message says why."""
