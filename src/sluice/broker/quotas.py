"""Client quotas enforced (KIP-13, KIP-55, KIP-124, KIP-219): byte rates and request time.

The quotas themselves live in the metadata store (AlterClientQuotas writes them); this
broker keeps a copy, changed at once by its own AlterClientQuotas and read again every
QUOTA_REFRESH_INTERVAL_S for those made through other brokers. Which quota applies and
how rates and throttle times are computed is :mod:`sluice.common.quotas`.

After a handler has answered, :meth:`ClientQuotas.apply` records what the request cost:

- a Produce its request size against ``producer_byte_rate``;
- a consumer's Fetch its response size against ``consumer_byte_rate`` (the fetch reads
  no more than the quota admits over the window, :meth:`ClientQuotas.fetch_bytes_max`,
  as Kafka does, though a first batch larger than that still comes whole); when that takes
  the client past its quota the records are not sent: the answer is an empty fetch
  response with the throttle time, and the size is taken back (Kafka does the same, so
  a throttled consumer fetches those records again later);
- every request but ApiVersions, the SASL exchange and followers' fetches its handler
  time against ``request_percentage``. Kafka measures the time request-handler threads
  spend on the request; Sluice has one event loop, so the time measured is the time the
  loop spent running the handler's own steps (awaits on other work, such as a
  long-polling fetch's wait or a worker thread's check of large batches, are not
  counted), and 100 % is the whole loop.

The largest throttle time goes into the response's ``throttle_time_ms``, and the
connection is muted for that long: the server reads nothing more from it (the
response itself leaves at once), as Kafka 2.0 and later do (KIP-219).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import time
from collections.abc import Awaitable, Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any

from sluice.common.quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaEntity,
    SampledRate,
    WindowConfig,
    resolve,
    throttle_ms,
)
from sluice.protocol.fetch_response import FETCH_FIRST_FLEXIBLE_VERSION, encode_fetch_response
from sluice.protocol.versions import ApiKey

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext
    from sluice.broker.network.server import Response
    from sluice.cluster.store import MetadataStore

log = logging.getLogger(__name__)

QUOTA_REFRESH_INTERVAL_S = 5.0
"""How often quotas set through other brokers are read from the metadata store."""

RATES_SWEEP_INTERVAL_S = 60.0
"""How often rates with no recent samples are dropped: one rate is kept per user or
client id a quota applies to, and client ids are the client's choice."""

EXEMPT_FROM_REQUEST_QUOTA = frozenset(
    {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
)
"""Requests a client needs before it can do anything (Kafka exempts them too)."""


def _one_line(error: BaseException) -> str:
    """An error as its type and message (kazoo's often have no message)."""
    message = str(error).strip().splitlines()
    return f"{type(error).__name__}: {message[0]}" if message else type(error).__name__


def user_of(principal: str) -> str:
    """The quota user of a principal: its name (``User:alice`` → ``alice``)."""
    _, _, name = principal.partition(":")
    return name or principal


class ClientQuotas:
    def __init__(self, store: MetadataStore, window: WindowConfig) -> None:
        self._store = store
        self._window = window
        self._quotas: dict[QuotaEntity, dict[str, float]] = {}
        self._rates: dict[tuple[str, str | None, str | None], SampledRate] = {}
        self._last_sweep = time.monotonic()
        self._failed_refreshes = 0

    # -- the quotas ---------------------------------------------------------------

    @property
    def quotas(self) -> Mapping[QuotaEntity, Mapping[str, float]]:
        return self._quotas

    async def load(self) -> None:
        stored = await self._store.client_quotas()
        loaded: dict[QuotaEntity, dict[str, float]] = {}
        for key, values in stored.items():
            try:
                loaded[QuotaEntity.from_key(key)] = dict(values)
            except ValueError:
                log.warning("ignoring a stored client quota with an unknown entity %r", key)
        self._quotas = loaded

    async def refresh_forever(self) -> None:
        """Read the stored quotas again now and then (changes made on other brokers)."""
        while True:
            await asyncio.sleep(QUOTA_REFRESH_INTERVAL_S)
            await self.refresh()

    async def refresh(self) -> bool:
        """Read the stored quotas again; False when the store could not be read (a
        ZooKeeper session expired or lost, say), which keeps the last copy. The first
        failure of a run is logged as one line, the run's end once more."""
        try:
            await self.load()
        except Exception as e:  # the store is unreachable for now: keep the last copy
            self._failed_refreshes += 1
            level = logging.WARNING if self._failed_refreshes == 1 else logging.DEBUG
            log.log(
                level,
                "could not read the client quotas from the metadata store (%s); keeping "
                "the last ones read and trying again every %g s",
                _one_line(e),
                QUOTA_REFRESH_INTERVAL_S,
            )
            return False
        if self._failed_refreshes:
            log.info(
                "read the client quotas again (failed reads before: %d)", self._failed_refreshes
            )
            self._failed_refreshes = 0
        return True

    async def store(self, entity: QuotaEntity, values: Mapping[str, float]) -> None:
        """Replace an entity's quotas durably (empty removes it), effective at once."""
        await self._store.set_client_quotas(entity.key, values)
        if values:
            self._quotas[entity] = dict(values)
        else:
            self._quotas.pop(entity, None)

    # -- enforcement --------------------------------------------------------------

    def _record(self, quota_type: str, user: str, client_id: str, value: float) -> int:
        """Record ``value`` against the client's quota of ``quota_type``: its throttle
        time in ms (0 without a quota)."""
        found = resolve(self._quotas, quota_type, user, client_id)
        if found is None:
            return 0
        now = time.monotonic()
        key = (quota_type, *found.bucket)
        rate = self._rates.get(key)
        if rate is None:
            rate = self._rates[key] = SampledRate(self._window)
        rate.record(value, now)
        return throttle_ms(rate, found.bound, now)

    def _unrecord(self, quota_type: str, user: str, client_id: str, value: float) -> None:
        found = resolve(self._quotas, quota_type, user, client_id)
        if found is not None:
            rate = self._rates.get((quota_type, *found.bucket))
            if rate is not None:
                rate.unrecord(value, time.monotonic())

    def _sweep(self) -> None:
        now = time.monotonic()
        if now - self._last_sweep < RATES_SWEEP_INTERVAL_S:
            return
        self._last_sweep = now
        for key, rate in list(self._rates.items()):
            if rate.measure(now) == 0:
                del self._rates[key]

    def fetch_bytes_max(self, context: RequestContext) -> int | None:
        """Record bytes one fetch response may hold under the client's fetch quota:
        what the rate window admits (Kafka's getMaxValueInQuotaWindow); None without a
        quota. Larger responses would always be throttled and never sent."""
        if not self._quotas:
            return None
        found = resolve(
            self._quotas,
            CONSUMER_BYTE_RATE,
            user_of(context.connection.principal),
            context.header.client_id or "",
        )
        if found is None:
            return None
        window_s = (self._window.samples - 1) * self._window.sample_seconds
        return max(int(found.bound * window_s), 1)

    def apply(
        self,
        context: RequestContext,
        request: Any,
        request_bytes: int,
        response: Response | Any,
        handler_seconds: float,
    ) -> Response | Any:
        """Record what the request cost; the response with its throttle time, the
        connection muted for that long."""
        if not self._quotas:
            return response
        self._sweep()
        header = context.header
        api_key = header.api_key
        user = user_of(context.connection.principal)
        client_id = header.client_id or ""
        if api_key == ApiKey.FETCH and int(getattr(request, "replica_id", -1)) >= 0:
            return response  # a follower: replication is not a client's traffic
        throttle = 0
        if api_key not in EXEMPT_FROM_REQUEST_QUOTA:
            throttle = self._record(REQUEST_PERCENTAGE, user, client_id, handler_seconds * 100)
        if api_key == ApiKey.PRODUCE:
            throttle = max(
                throttle, self._record(PRODUCER_BYTE_RATE, user, client_id, request_bytes)
            )
        elif api_key == ApiKey.FETCH and isinstance(response, list):
            size = _response_bytes(response)
            fetch_throttle = self._record(CONSUMER_BYTE_RATE, user, client_id, size)
            if fetch_throttle:
                self._unrecord(CONSUMER_BYTE_RATE, user, client_id, size)
                throttle = max(throttle, fetch_throttle)
                context.connection.mute_for(throttle / 1000)
                return encode_fetch_response(
                    header.api_version, header.correlation_id, [], throttle_time_ms=throttle
                )
        if throttle <= 0:
            return response
        context.connection.mute_for(throttle / 1000)
        return _with_throttle_time(response, throttle, header.api_version)


def _response_bytes(parts: list[Any]) -> int:
    return sum(len(part) if isinstance(part, bytes) else int(part.size_bytes) for part in parts)


def _with_throttle_time(response: Any, throttle: int, version: int) -> Any:
    """The response with ``throttle_time_ms`` set, where its version has the field."""
    if isinstance(response, list):
        return _fetch_with_throttle_time(response, throttle, version)
    if dataclasses.is_dataclass(response) and not isinstance(response, type):
        names = {f.name for f in dataclasses.fields(response)}
        if "throttle_time" in names:
            return dataclasses.replace(
                response,
                throttle_time=datetime.timedelta(milliseconds=throttle),
            )
    return response


def _fetch_with_throttle_time(parts: list[Any], throttle: int, version: int) -> list[Any]:
    """A fetch response's parts with its throttle time written in: after the size
    prefix (a part of its own, see ``encode_fetch_response``) come the correlation id,
    the header's tagged fields (v12+, one empty byte) and throttle_time_ms (v1+)."""
    offset = 4 + (1 if version >= FETCH_FIRST_FLEXIBLE_VERSION else 0)
    if len(parts) < 2 or version < 1:
        return parts
    head = parts[1]
    if not isinstance(head, bytes) or len(head) < offset + 4:
        return parts
    patched = bytearray(head)
    patched[offset : offset + 4] = throttle.to_bytes(4, "big", signed=True)
    return [parts[0], bytes(patched), *parts[2:]]


class TimedCoroutine:
    """Awaits an awaitable (a handler's coroutine) and adds the time the event loop
    spent in its own steps to ``seconds`` (the waits in between are not counted)."""

    def __init__(self, awaitable: Awaitable[Any]) -> None:
        self._awaitable = awaitable
        self.seconds = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coroutine = self._awaitable.__await__()
        sent: Any = None
        thrown: BaseException | None = None
        clock: Callable[[], float] = time.perf_counter
        while True:
            started = clock()
            try:
                yielded = coroutine.send(sent) if thrown is None else coroutine.throw(thrown)
            except StopIteration as stop:
                self.seconds += clock() - started
                return stop.value
            self.seconds += clock() - started
            try:
                sent = yield yielded
                thrown = None
            except BaseException as e:  # cancellation and the like: pass it in
                sent = None
                thrown = e
