"""broker.quotas with a real embedded metadata store: what a request's cost does to its
response and its connection."""

from __future__ import annotations

import asyncio
import datetime
import time
from pathlib import Path

from kio.schema.metadata.v8.response import MetadataResponse

from sluice.broker.context import RequestContext
from sluice.broker.network.server import ConnectionInfo
from sluice.broker.quotas import ClientQuotas, TimedCoroutine
from sluice.cluster.embedded import EmbeddedMetadataStore
from sluice.common.quotas import DEFAULT, QuotaEntity, WindowConfig
from sluice.protocol.codec import RequestHeader
from sluice.protocol.fetch_response import encode_fetch_response
from sluice.protocol.versions import ApiKey


class _Request:
    replica_id = -1


def _context(api_key: int, client_id: str, version: int = 8) -> RequestContext:
    return RequestContext(RequestHeader(api_key, version, 7, client_id), ConnectionInfo("peer"))


def _metadata_response() -> MetadataResponse:
    return MetadataResponse(
        throttle_time=datetime.timedelta(0),
        brokers=(),
        cluster_id=None,
        controller_id=0,  # type: ignore[arg-type]
        topics=(),
        cluster_authorized_operations=-2147483648,  # type: ignore[arg-type]
    )


def test_quotas_throttle_mute_and_survive_a_reopen(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = EmbeddedMetadataStore(tmp_path)
        await store.start()
        quotas = ClientQuotas(store, WindowConfig(samples=3, sample_seconds=1))
        await quotas.store(QuotaEntity(None, "app"), {"producer_byte_rate": 1000.0})
        await quotas.store(QuotaEntity(None, DEFAULT), {"consumer_byte_rate": 1000.0})

        # A produce over the rate: throttled, and its connection muted that long.
        produce = _context(ApiKey.PRODUCE, "app")
        before_s = time.monotonic()
        answer = quotas.apply(produce, _Request(), 4000, _metadata_response(), 0.0)
        after_s = time.monotonic()
        assert answer.throttle_time == datetime.timedelta(milliseconds=2000)
        # Muted for the throttle time from the moment of the answer, however long the
        # call took (read around it, not after it).
        assert before_s + 2.0 <= produce.connection.muted_until <= after_s + 2.0
        # Another client id has no produce quota.
        other = _context(ApiKey.PRODUCE, "other")
        assert quotas.apply(other, _Request(), 4000, None, 0.0) is None
        assert other.connection.muted_until == 0.0

        # A consumer over its default client-id quota gets an empty fetch response.
        fetch = _context(ApiKey.FETCH, "reader", version=11)
        assert quotas.fetch_bytes_max(fetch) == 2000
        parts = encode_fetch_response(11, 7, [])
        big = [*parts, b"x" * 5000]
        throttled = quotas.apply(fetch, _Request(), 100, big, 0.0)
        assert throttled != big and sum(map(len, throttled)) == sum(map(len, parts))
        assert int.from_bytes(throttled[1][4:8], "big") > 0
        # What was not sent is not counted: a small fetch then goes through.
        small = encode_fetch_response(11, 7, [])
        assert quotas.apply(fetch, _Request(), 100, small, 0.0) is small

        await store.close()
        reopened = EmbeddedMetadataStore(tmp_path)
        await reopened.start()
        again = ClientQuotas(reopened, WindowConfig())
        await again.load()
        assert again.quotas == quotas.quotas
        await reopened.close()

    asyncio.run(scenario())


def test_timed_coroutine_counts_the_steps_not_the_waits() -> None:
    async def handler() -> str:
        deadline = time.perf_counter() + 0.02
        while time.perf_counter() < deadline:
            pass  # 20 ms of work on the loop
        await asyncio.sleep(0.5)  # waiting: not counted
        return "done"

    async def scenario() -> None:
        timed = TimedCoroutine(handler())
        assert await timed == "done"
        # Far below the wait, with room for a busy machine to preempt the steps.
        assert 0.02 <= timed.seconds < 0.25

    asyncio.run(scenario())
