"""From a request frame to a response: version checks, decoding, the handler table.

A handler is ``async def handle(broker, header, request) -> response`` where ``request``
is the kio message and the response is a kio message (encoded here), ready response
parts (Fetch), or None (acks=0 Produce: no response at all). Handlers register with
:func:`handler`; the table is checked against ``versions.SUPPORTED`` at start-up.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from sluice.broker.server import ConnectionInfo
from sluice.common.errors import ErrorCode, ProtocolError
from sluice.protocol import codec
from sluice.protocol.messages import make, response_module
from sluice.protocol.versions import SUPPORTED, ApiKey

if TYPE_CHECKING:
    from sluice.broker.app import Broker
    from sluice.broker.server import Response

log = logging.getLogger(__name__)

Handler = Callable[["Broker", codec.RequestHeader, Any], Awaitable[Any]]
HANDLERS: dict[ApiKey, Handler] = {}

CURRENT_CONNECTION: ContextVar[ConnectionInfo] = ContextVar("current_connection")
"""The connection of the request being handled (each request runs in its own task, so
each sees its own); for the few handlers that care, such as JoinGroup's client host."""


def handler(api_key: ApiKey) -> Callable[[Handler], Handler]:
    def register(function: Handler) -> Handler:
        assert api_key not in HANDLERS, f"two handlers for {api_key.name}"
        HANDLERS[api_key] = function
        return function

    return register


def api_versions_response(version: int, error_code: int = 0, *, with_ranges: bool = True) -> Any:
    """An ApiVersions response of ``version`` listing the ranges of ``SUPPORTED`` (v3+:
    no supported or finalized features, kio's defaults)."""
    module = response_module(ApiKey.API_VERSIONS, version)
    return make(
        module.ApiVersionsResponse,
        error_code=error_code,
        api_keys=tuple(
            make(
                module.ApiVersion,
                api_key=int(key),
                min_version=r.min_version,
                max_version=r.max_version,
            )
            for key, r in sorted(SUPPORTED.items())
        )
        if with_ranges
        else (),
        throttle_time=0,
    )


def api_versions_fallback(correlation_id: int) -> bytes:
    """ApiVersions in v0 format with UNSUPPORTED_VERSION and our ranges: the answer to an
    ApiVersions request newer than we speak (clients then retry with one we do)."""
    response = api_versions_response(0, error_code=ErrorCode.unsupported_version)
    return codec.encode_response(correlation_id, response)


class Dispatcher:
    def __init__(self, broker: Broker) -> None:
        missing = set(SUPPORTED) - set(HANDLERS)
        assert not missing, f"advertised APIs without handlers: {sorted(missing)}"
        self._broker = broker

    async def handle(self, frame: bytes, connection: ConnectionInfo) -> Response:
        api_key, version, correlation_id = codec.peek_header(frame)
        supported = SUPPORTED.get(ApiKey(api_key)) if api_key in ApiKey._value2member_map_ else None
        if supported is None:
            raise ProtocolError(f"unknown or unsupported API key {api_key}")
        if not supported.advertises(version):
            if api_key == ApiKey.API_VERSIONS:
                return api_versions_fallback(correlation_id)
            raise ProtocolError(f"API {ApiKey(api_key).name} version {version} is not supported")
        CURRENT_CONNECTION.set(connection)
        header, body_offset = codec.parse_request_header(frame)
        request = codec.decode_request_body(header, frame, body_offset)
        response = await HANDLERS[ApiKey(api_key)](self._broker, header, request)
        if response is None or isinstance(response, list | bytes):
            return response
        return codec.encode_response(correlation_id, response)
