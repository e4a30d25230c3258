"""SaslHandshake and SaslAuthenticate: SASL authentication on a SASL_* listener.

The connection's state (:class:`~sluice.broker.network.server.ConnectionInfo`) goes::

    unauthenticated ──SaslHandshake(mech)──▶ mechanism chosen ──SaslAuthenticate…──▶
        authenticated (principal User:<name>, session ending after
        connections.max.reauth.ms when it is set) ──SaslHandshake──▶ re-authenticating
        (KIP-368: the same principal; other requests keep being served meanwhile)

Until the first authentication the dispatcher serves nothing but ApiVersions and these
two APIs. A refused mechanism, a request out of order or a failed authentication is
answered with its error after ``connection.failed.authentication.delay.ms`` (the server
waits, on that connection alone) and the connection is then closed, as Kafka does.

SCRAM users are looked up in the metadata store at each authentication, so a user
created, changed or deleted through any broker counts on every broker at once. PLAIN
checks the password against the same SCRAM credential (SCRAM-SHA-512's if the user has
one, else SCRAM-SHA-256's): one user database for both mechanisms. An unknown user costs
PLAIN the same PBKDF2 as a known one, so timing does not reveal who exists.

SaslHandshake v0 means Kafka's legacy framing (raw SASL tokens after the handshake,
outside any request). No client in use needs it: librdkafka, the Java client,
kafka-python and aiokafka send SaslAuthenticate whenever the broker lists it. Sluice
accepts SaslAuthenticate after a v0 handshake too, and closes a connection that sends a
raw token with a log line that says so (:mod:`sluice.broker.dispatcher`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.services import UsesClock, UsesConfig, UsesStore
from sluice.common.config import SASL_PROTOCOLS
from sluice.common.errors import ErrorCode
from sluice.protocol.messages import make, response_module
from sluice.protocol.sasl import (
    PLAIN,
    SaslAuthenticationFailed,
    ScramMechanism,
    ScramServer,
    parse_plain,
    plain_password_matches,
)
from sluice.protocol.versions import ApiKey

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext
    from sluice.broker.network.server import ConnectionInfo


class SaslServices(UsesClock, UsesConfig, UsesStore, Protocol):
    """What the sasl handlers use of the broker."""


log = logging.getLogger(__name__)


def _handshake_response(version: int, error: ErrorCode, mechanisms: tuple[str, ...]) -> Any:
    module = response_module(ApiKey.SASL_HANDSHAKE, version)
    return make(module.SaslHandshakeResponse, error_code=error, mechanisms=mechanisms)


def _authenticate_response(
    version: int,
    error: ErrorCode = ErrorCode.none,
    message: str | None = None,
    auth_bytes: bytes = b"",
    session_lifetime_ms: int = 0,
) -> Any:
    module = response_module(ApiKey.SASL_AUTHENTICATE, version)
    return make(
        module.SaslAuthenticateResponse,
        error_code=error,
        error_message=message,
        auth_bytes=auth_bytes,
        session_lifetime=session_lifetime_ms,
    )


def _refuse(connection: ConnectionInfo) -> None:
    """The answer being computed refuses the authentication: the server writes it after
    connection.failed.authentication.delay.ms, then closes the connection (Kafka's
    failed authentications, a refused mechanism and SASL requests out of order alike)."""
    connection.authentication_failed = True
    connection.close_after_response = True


def _reset(connection: ConnectionInfo) -> None:
    connection.sasl_mechanism = None
    connection.sasl_exchange = None
    connection.sasl_legacy_framing = False


async def handle_sasl_handshake(
    services: SaslServices, context: RequestContext, request: Any
) -> Any:
    connection = context.connection
    version = context.header.api_version
    offered = services.config.sasl_mechanisms_offered(
        connection.listener_name, connection.security_protocol
    )
    if connection.security_protocol not in SASL_PROTOCOLS or connection.sasl_mechanism:
        _refuse(connection)
        return _handshake_response(version, ErrorCode.illegal_sasl_state, offered)
    mechanism = request.mechanism
    if mechanism not in offered:
        log.info(
            "connection from %s: SASL mechanism %r refused (offered: %s)",
            connection.peer,
            mechanism,
            ", ".join(offered),
        )
        _refuse(connection)
        return _handshake_response(version, ErrorCode.unsupported_sasl_mechanism, offered)
    connection.sasl_mechanism = mechanism
    connection.sasl_exchange = None
    connection.sasl_legacy_framing = version == 0
    return _handshake_response(version, ErrorCode.none, offered)


async def handle_sasl_authenticate(
    services: SaslServices, context: RequestContext, request: Any
) -> Any:
    connection = context.connection
    version = context.header.api_version
    mechanism = connection.sasl_mechanism
    connection.sasl_legacy_framing = False
    if mechanism is None:
        _refuse(connection)
        return _authenticate_response(
            version,
            ErrorCode.illegal_sasl_state,
            "SaslAuthenticate without a SaslHandshake choosing a mechanism first",
        )
    try:
        if mechanism == PLAIN:
            user = await _authenticate_plain(services, request.auth_bytes)
            return _authenticated(services, connection, version, user, b"")
        scram = ScramMechanism.by_name(mechanism)
        exchange = connection.sasl_exchange
        if not isinstance(exchange, ScramServer):
            user = ScramServer.username_of(request.auth_bytes)
            credential = (await services.store.scram_credentials(user)).get(scram)
            exchange = ScramServer(scram)
            server_first = exchange.first(request.auth_bytes, credential)
            connection.sasl_exchange = exchange
            return _authenticate_response(version, auth_bytes=server_first)
        server_final = exchange.final(request.auth_bytes)
        assert exchange.username is not None
        return _authenticated(services, connection, version, exchange.username, server_final)
    except SaslAuthenticationFailed as failure:
        log.info(
            "connection from %s: SASL %s authentication failed: %s",
            connection.peer,
            mechanism,
            failure,
        )
        _reset(connection)
        _refuse(connection)
        return _authenticate_response(
            version,
            ErrorCode.sasl_authentication_failed,
            f"Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {mechanism}: {failure}",
        )


async def _authenticate_plain(services: SaslServices, token: bytes) -> str:
    plain = parse_plain(token)
    credentials = await services.store.scram_credentials(plain.username)
    # PBKDF2 takes milliseconds, for an unknown user too: off the event loop.
    if await asyncio.to_thread(plain_password_matches, credentials, plain.username, plain.password):
        return plain.username
    raise SaslAuthenticationFailed("invalid credentials")


def _authenticated(
    services: SaslServices,
    connection: ConnectionInfo,
    version: int,
    user: str,
    auth_bytes: bytes,
) -> Any:
    principal = f"User:{user}"
    if connection.authenticated and connection.principal != principal:
        raise SaslAuthenticationFailed(
            f"re-authentication must keep the principal {connection.principal}"
        )
    reauthenticated = connection.authenticated
    _reset(connection)
    connection.principal = principal
    connection.authenticated = True
    lifetime_ms = services.config.connections_max_reauth_ms
    connection.sasl_session_ends_ms = (
        services.clock.monotonic_ms() + lifetime_ms if lifetime_ms > 0 else None
    )
    log.debug(
        "connection from %s %s as %s",
        connection.peer,
        "re-authenticated" if reauthenticated else "authenticated",
        principal,
    )
    return _authenticate_response(version, auth_bytes=auth_bytes, session_lifetime_ms=lifetime_ms)
