"""From a request frame to a response: version checks, decoding, the handler table.

A handler is ``async def handle(services, context, request) -> response`` where
``services`` are the broker's parts handlers use (:mod:`sluice.broker.services`),
``context`` is the request's header and connection (:mod:`sluice.broker.context`),
``request`` is the kio message, and the response is a kio message (encoded here), ready
response parts (Fetch), or None (acks=0 Produce: no response at all). The dispatcher is
given the handler table (:mod:`sluice.broker.handlers.table`) and checks it against
``versions.SUPPORTED`` when built; Sluice's own APIs (:mod:`sluice.protocol.private`)
have a table of their own.

Each request is counted
(:class:`sluice.broker.observability.metrics.requests.RequestMetrics`): by API and
listener, its duration from here to its response, and the error codes of its kio response
(Fetch, framed by its handler, counts its own).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from sluice.broker.context import RequestContext
from sluice.broker.network.server import ConnectionInfo, Deferred
from sluice.broker.observability.metrics.errors import error_codes
from sluice.broker.observability.metrics.requests import RequestMetrics
from sluice.broker.quotas import TimedCoroutine
from sluice.broker.request_limits import check_named_partitions
from sluice.common.errors import ErrorCode, ProtocolError
from sluice.protocol import codec, framing, private
from sluice.protocol.messages import make, response_module
from sluice.protocol.versions import SUPPORTED, ApiKey, advertised, api_name

if TYPE_CHECKING:
    from sluice.broker.network.server import Answer, Response
    from sluice.broker.services import BrokerServices

log = logging.getLogger(__name__)

Handler = Callable[["BrokerServices", RequestContext, Any], Awaitable[Any]]
PrivateHandler = Callable[
    ["BrokerServices", RequestContext, dict[str, Any]], Awaitable[dict[str, Any]]
]
"""A handler of one of Sluice's own APIs (:mod:`sluice.protocol.private`): JSON objects."""


TRANSACTION_VERSION_FEATURE = "transaction.version"
TRANSACTION_VERSION = 2
"""Transaction version 2 (KIP-890 part 2): EndTxn v5 bumps the producer epoch at every
commit and abort, Produce v12 and TxnOffsetCommit v5 add partitions implicitly. Supported
from 0 and finalized at 2, as a Kafka 4 cluster finalizes it; clients that do not look
at features (librdkafka, kafka-python, aiokafka) keep using version 1."""
GROUP_VERSION_FEATURE = "group.version"
GROUP_VERSION = 1
"""Group version 1 (KIP-848): the consumer group protocol is served. Listed, supported
and finalized at 1, only when ``group.coordinator.rebalance.protocols`` enables
``consumer``, as Kafka finalizes it."""
FINALIZED_FEATURES_EPOCH = 1

SERVED_BEFORE_AUTHENTICATION = frozenset(
    {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
)
"""What a SASL listener serves before authentication, and after a session expired
(KIP-368: the client authenticates again on the same connection)."""


def api_versions_response(
    version: int,
    rebalance_protocols: Collection[str],
    error_code: int = 0,
    *,
    with_ranges: bool = True,
) -> Any:
    """An ApiVersions response of ``version`` listing what a broker with these rebalance
    protocols enabled advertises (``versions.advertised``: the internal, broker-to-broker
    APIs are served but not listed); v3+ also lists the supported and finalized features
    (``transaction.version``, and ``group.version`` when the consumer protocol is on)."""
    module = response_module(ApiKey.API_VERSIONS, version)
    features: dict[str, Any] = {}
    if with_ranges and hasattr(module, "SupportedFeatureKey"):
        levels = {TRANSACTION_VERSION_FEATURE: TRANSACTION_VERSION}
        if "consumer" in rebalance_protocols:
            levels[GROUP_VERSION_FEATURE] = GROUP_VERSION
        features = {
            "supported_features": tuple(
                make(module.SupportedFeatureKey, name=name, min_version=0, max_version=level)
                for name, level in levels.items()
            ),
            "finalized_features_epoch": FINALIZED_FEATURES_EPOCH,
            "finalized_features": tuple(
                make(
                    module.FinalizedFeatureKey,
                    name=name,
                    min_version_level=level,
                    max_version_level=level,
                )
                for name, level in levels.items()
            ),
        }
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
            for key, r in sorted(advertised(rebalance_protocols).items())
        )
        if with_ranges
        else (),
        throttle_time=0,
        **features,
    )


def api_versions_fallback(correlation_id: int, rebalance_protocols: Collection[str]) -> bytes:
    """ApiVersions in v0 format with UNSUPPORTED_VERSION and our ranges: the answer to an
    ApiVersions request newer than we speak (clients then retry with one we do)."""
    response = api_versions_response(
        0, rebalance_protocols, error_code=ErrorCode.unsupported_version
    )
    return codec.encode_response(correlation_id, response)


_API_NAMES: dict[bytes, str] = {
    int(key).to_bytes(2, "big", signed=True): api_name(key) for key in ApiKey
}
"""The API label of a request, by the first two bytes of its frame (its API key)."""


_SUPPORTED_BY_KEY = {int(key): served for key, served in SUPPORTED.items()}


def _api_label(frame: bytes) -> str:
    """The label of an API key the table lacks: Sluice's own APIs, or anything else."""
    if len(frame) >= 2 and private.is_private(int.from_bytes(frame[:2], "big", signed=True)):
        return "Sluice"
    return "unknown"


def _is_sasl_authenticate(frame: bytes) -> bool:
    return len(frame) >= 2 and int.from_bytes(frame[:2], "big", signed=True) == (
        ApiKey.SASL_AUTHENTICATE
    )


class Dispatcher:
    def __init__(
        self,
        handlers: Mapping[ApiKey, Handler],
        services: BrokerServices,
        private_handlers: Mapping[int, PrivateHandler] | None = None,
        metrics: RequestMetrics | None = None,
    ) -> None:
        missing = set(SUPPORTED) - set(handlers)
        assert not missing, f"advertised APIs without handlers: {sorted(missing)}"
        self._handlers: dict[int, Handler] = {int(key): h for key, h in handlers.items()}
        """By plain int API key: the frame's key needs no ApiKey() per request."""
        self._private_handlers = private_handlers or {}
        self._services = services
        self.metrics = metrics if metrics is not None else RequestMetrics()

    async def handle(self, frame: bytes, connection: ConnectionInfo) -> Response:
        metrics = self.metrics
        started = time.perf_counter()
        metrics.in_flight += 1
        response: Response = None
        try:
            response = await self._handle(frame, connection)
            if isinstance(response, Deferred):
                response = self._finishing_later(response, frame[:2], connection, started)
            return response
        finally:
            if not isinstance(response, Deferred):
                self._finished(frame[:2], connection, started)

    def _finishing_later(
        self, deferred: Deferred, api: bytes, connection: ConnectionInfo, started: float
    ) -> Deferred:
        """``deferred``, counted as in flight until its answer is done, or abandoned
        unstarted by its connection."""

        def abandoned() -> None:
            deferred.abandon()
            self._finished(api, connection, started)

        return Deferred(self._finish_later(deferred.answer, api, connection, started), abandoned)

    async def _finish_later(
        self,
        answer: Coroutine[Any, Any, Answer],
        api: bytes,
        connection: ConnectionInfo,
        started: float,
    ) -> Answer:
        """A deferred answer counts as in flight, and its duration ends, when it is done."""
        try:
            return await answer
        finally:
            self._finished(api, connection, started)

    def _finished(self, api: bytes, connection: ConnectionInfo, started: float) -> None:
        self.metrics.in_flight -= 1
        self.metrics.finished(
            _API_NAMES.get(api) or _api_label(api),
            connection.listener_name,
            time.perf_counter() - started,
        )

    async def _handle(self, frame: bytes, connection: ConnectionInfo) -> Response:
        if connection.sasl_legacy_framing and not _is_sasl_authenticate(frame):
            raise ProtocolError(
                "SaslHandshake v0 followed by a raw SASL token (Kafka's legacy framing) is "
                "not supported; send SaslHandshake v1 and SaslAuthenticate"
            )
        api_key, version, correlation_id = codec.peek_header(frame)
        self._check_authentication(api_key, connection)
        if private.is_private(api_key):
            return await self._handle_private(frame, connection)
        supported = _SUPPORTED_BY_KEY.get(api_key)
        if supported is None:
            raise ProtocolError(f"unknown or unsupported API key {api_key}")
        if not supported.advertises(version):
            if api_key == ApiKey.API_VERSIONS:
                return api_versions_fallback(
                    correlation_id, self._services.config.group_coordinator_rebalance_protocols
                )
            raise ProtocolError(f"API {ApiKey(api_key).name} version {version} is not supported")
        header, body_offset = codec.parse_request_header(frame)
        request = codec.decode_request_body(header, frame, body_offset)
        check_named_partitions(request, self._services.config.request_max_partitions)
        context = RequestContext(header, connection)
        handling = self._handlers[api_key](self._services, context, request)
        quotas = self._services.quotas
        if quotas is not None and quotas.quotas:
            # Only a broker with client quotas times its handlers' own steps (the
            # request-percentage quota); the wrapper costs every request otherwise.
            timed = TimedCoroutine(handling)
            response = await timed
            if isinstance(response, Deferred):
                # Throttling needs the whole answer: with quotas, no request is deferred.
                response = await response.answer
            response = quotas.apply(context, request, len(frame), response, timed.seconds)
        else:
            response = await handling
        if isinstance(response, Deferred):
            return Deferred(self._encode_later(response.answer, frame[:2], correlation_id))
        return self._encoded(response, frame[:2], correlation_id)

    async def _encode_later(
        self, answer: Coroutine[Any, Any, Any], api: bytes, correlation_id: int
    ) -> Answer:
        return self._encoded(await answer, api, correlation_id)

    def _encoded(self, response: Any, api: bytes, correlation_id: int) -> Answer:
        if response is None or isinstance(response, list | bytes):
            return response
        self.metrics.count_errors(_API_NAMES[api], error_codes(response))
        return codec.encode_response(correlation_id, response)

    def _check_authentication(self, api_key: int, connection: ConnectionInfo) -> None:
        """Close (as Kafka does) a connection that sends anything but ApiVersions and the
        SASL APIs before it authenticated, or after its SASL session ended."""
        if api_key in SERVED_BEFORE_AUTHENTICATION:
            return
        if not connection.authenticated:
            raise ProtocolError(
                f"{api_name(api_key)} request before SASL authentication on a "
                f"{connection.security_protocol} listener"
            )
        ends = connection.sasl_session_ends_ms
        if ends is not None and self._services.clock.monotonic_ms() >= ends:
            raise ProtocolError(
                f"{api_name(api_key)} request after the SASL session of "
                f"{connection.principal} expired (connections.max.reauth.ms) without "
                "re-authentication"
            )

    async def _handle_private(self, frame: bytes, connection: ConnectionInfo) -> Response:
        """One of Sluice's own APIs: a JSON object in, a JSON object out."""
        header, body_offset = codec.parse_request_header(frame)
        handler = self._private_handlers.get(header.api_key)
        if handler is None or header.api_version != 0:
            raise ProtocolError(
                f"Sluice API {header.api_key} version {header.api_version} is not served"
            )
        body = private.decode_request_body(frame, body_offset)
        response = await handler(self._services, RequestContext(header, connection), body)
        return framing.frame(private.encode_response_frame(header.correlation_id, response))
