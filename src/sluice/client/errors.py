"""Errors raised by the client itself, as opposed to errors a broker answers with.

A broker's answer that carries a Kafka error code is raised as the matching
:class:`sluice.common.errors.KafkaError` subclass (one table for both). The classes
here cover what happens before or around an answer: the broker cannot be reached, the
connection drops, an answer does not come in time, or the broker and this client share
no version of an API. Every message is one line that says what went wrong and, where
there is one, what to do about it.
"""

from __future__ import annotations

from collections.abc import Sequence


class ClientError(Exception):
    """Base class of every error raised by ``sluice.client`` itself."""

    retriable: bool = False
    """True when the same request may succeed if sent again (on a new connection)."""


class BrokerUnreachableError(ClientError):
    """No TCP connection could be opened to the broker (or to any bootstrap broker:
    :meth:`of_bootstrap`)."""

    retriable = True

    def __init__(
        self,
        host: str,
        port: int,
        reason: str,
        *,
        host_unknown: bool = False,
        timed_out: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self.reason = reason
        self.host_unknown = host_unknown
        self.timed_out = timed_out
        """True when the connection attempt ran out of time (rather than being refused
        at once): trying again would wait as long again."""
        self.hint = (
            f"no host named {host!r} was found" if host_unknown else "is `sluice serve` running?"
        )
        super().__init__(f"cannot reach broker at {host}:{port}: {self.hint} ({reason})")

    @classmethod
    def of_bootstrap(
        cls, failures: Sequence[BrokerUnreachableError], attempts: int
    ) -> BrokerUnreachableError:
        """One error for every bootstrap address that failed, naming each with why
        (``attempts`` rounds over them were made) and what to check."""
        assert failures
        first = failures[0]
        tried = f"{attempts} attempts" if attempts > 1 else "1 attempt"
        if len(failures) == 1:
            error = cls(
                first.host,
                first.port,
                f"{first.reason}; {tried}",
                host_unknown=first.host_unknown,
                timed_out=first.timed_out,
            )
        else:
            error = cls(first.host, first.port, first.reason, timed_out=first.timed_out)
            addresses = ", ".join(f"{f.host}:{f.port}" for f in failures)
            reasons = "; ".join(f"{f.host}:{f.port}: {f.reason}" for f in failures)
            error.args = (
                f"cannot reach any bootstrap broker ({addresses}): is `sluice serve` "
                f"running, and are bootstrap_servers right? ({reasons}; {tried})",
            )
        error.failures = tuple(failures)
        return error

    failures: tuple[BrokerUnreachableError, ...] = ()
    """For an error of every bootstrap address, the error of each."""


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
