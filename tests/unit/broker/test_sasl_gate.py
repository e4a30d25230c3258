"""The dispatcher's SASL rules, request by request: what a SASL listener serves before
authentication, after a session ended, and after a SaslHandshake v0 (no broker needed:
every refusal happens before a handler runs)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.metadata.v8.request import MetadataRequest

from sluice.broker.dispatcher import Dispatcher
from sluice.broker.handlers.table import HANDLERS
from sluice.broker.network.server import ConnectionInfo
from sluice.common.clock import ManualClock
from sluice.common.config import BrokerConfig
from sluice.common.errors import ProtocolError
from sluice.protocol import private
from sluice.protocol.codec import encode_request


def _frame(payload: Any) -> bytes:
    return encode_request(7, "test", payload)[4:]


METADATA = _frame(
    MetadataRequest(
        topics=(),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
)
API_VERSIONS = _frame(ApiVersionsRequest())


def _dispatcher(clock: ManualClock) -> Dispatcher:
    services: Any = SimpleNamespace(clock=clock, config=BrokerConfig(), quotas=None)
    return Dispatcher(HANDLERS, services)


def _handle(dispatcher: Dispatcher, frame: bytes, connection: ConnectionInfo) -> Any:
    return asyncio.run(dispatcher.handle(frame, connection))


def test_a_sasl_listener_serves_api_versions_but_nothing_else_before_authentication() -> None:
    dispatcher = _dispatcher(ManualClock())
    connection = ConnectionInfo("peer", security_protocol="SASL_PLAINTEXT")
    assert not connection.authenticated
    assert isinstance(_handle(dispatcher, API_VERSIONS, connection), bytes)
    with pytest.raises(ProtocolError, match="Metadata request before SASL authentication"):
        _handle(dispatcher, METADATA, connection)
    private_frame = private.encode_request_frame(
        7, "test", private.PrivateRequest(private.DESCRIBE_DELAYS, {})
    )
    with pytest.raises(ProtocolError, match="before SASL authentication"):
        _handle(dispatcher, private_frame, connection)


def test_plaintext_and_ssl_listeners_need_no_authentication() -> None:
    for protocol in ("PLAINTEXT", "SSL"):
        assert ConnectionInfo("peer", security_protocol=protocol).authenticated


def test_an_ended_session_is_refused_until_re_authenticated() -> None:
    clock = ManualClock()
    dispatcher = _dispatcher(clock)
    connection = ConnectionInfo("peer", security_protocol="SASL_SSL")
    connection.authenticated = True
    connection.principal = "User:alice"
    connection.sasl_session_ends_ms = clock.monotonic_ms() + 1000
    clock.advance(1000)
    with pytest.raises(ProtocolError, match="expired"):
        _handle(dispatcher, METADATA, connection)
    # ApiVersions and the SASL APIs stay open for the re-authentication.
    assert isinstance(_handle(dispatcher, API_VERSIONS, connection), bytes)


def test_a_raw_token_after_handshake_v0_is_refused_by_name() -> None:
    dispatcher = _dispatcher(ManualClock())
    connection = ConnectionInfo("peer", security_protocol="SASL_PLAINTEXT")
    connection.sasl_legacy_framing = True
    with pytest.raises(ProtocolError, match="legacy framing"):
        _handle(dispatcher, b"\0alice\0secret", connection)
