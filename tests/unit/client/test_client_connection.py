"""BrokerConnection: negotiation, pipelining, timeouts, failures and close.

The peer is a scripted protocol endpoint on a loopback socket that decodes requests and
encodes answers with Sluice's real codec. It is not a broker: it lets a test decide
when, in which order, and whether each answer is sent, which is the behaviour under test
(the connection's); the real broker is exercised by the integration tests. Every wait is
on an event, bounded by the test timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v8.response import MetadataResponse

from sluice.client.connection import BrokerConnection
from sluice.client.errors import (
    BrokerUnreachableError,
    ConnectionClosedError,
    RequestTimedOutError,
    UnsupportedApiError,
)
from sluice.client.messages import Request
from sluice.protocol.codec import (
    RequestHeader,
    decode_request_body,
    encode_response,
    parse_request_header,
)
from sluice.protocol.framing import FrameDecoder
from sluice.protocol.versions import SUPPORTED, ApiKey

TEST_TIMEOUT_S = 10.0

Answer = Callable[[RequestHeader, Any, "ScriptedPeer"], Awaitable[bytes | None]]
"""Given a request, the bytes to answer with, or None to answer nothing (yet)."""


def _metadata_answer(correlation_id: int, cluster_id: str) -> bytes:
    return encode_response(
        correlation_id,
        MetadataResponse(
            throttle_time=datetime.timedelta(0),
            brokers=(),
            cluster_id=cluster_id,
            controller_id=0,
            topics=(),
        ),
    )


class ScriptedPeer:
    """Answers ApiVersions itself and everything else through ``answer``."""

    def __init__(self, answer: Answer, ranges: dict[int, tuple[int, int]] | None = None) -> None:
        self.answer = answer
        self.ranges = ranges or {
            int(key): (r.min_version, r.max_version) for key, r in SUPPORTED.items()
        }
        self.received: list[tuple[RequestHeader, Any]] = []
        self.arrived = asyncio.Condition()
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> ScriptedPeer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.close()
        await self.server.wait_closed()

    async def wait_for_requests(self, count: int) -> None:
        async with self.arrived:
            await self.arrived.wait_for(lambda: len(self.received) >= count)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        decoder = FrameDecoder()
        async with asyncio.TaskGroup() as group:
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    header, body_offset = parse_request_header(frame)
                    body = decode_request_body(header, frame, body_offset)
                    if header.api_key == ApiKey.API_VERSIONS:
                        writer.write(self._api_versions(header.correlation_id))
                        continue
                    async with self.arrived:
                        self.received.append((header, body))
                        self.arrived.notify_all()
                    group.create_task(self._answer(header, body, writer))

    async def _answer(self, header: RequestHeader, body: Any, writer: asyncio.StreamWriter) -> None:
        response = await self.answer(header, body, self)
        if response is not None and not writer.is_closing():
            writer.write(response)

    def _api_versions(self, correlation_id: int) -> bytes:
        return encode_response(
            correlation_id,
            ApiVersionsResponse(
                error_code=ErrorCode.none,
                api_keys=tuple(
                    ApiVersion(api_key=key, min_version=low, max_version=high)
                    for key, (low, high) in self.ranges.items()
                ),
            ),
        )


@contextlib.asynccontextmanager
async def connected(
    answer: Answer, ranges: dict[int, tuple[int, int]] | None = None
) -> AsyncIterator[tuple[ScriptedPeer, BrokerConnection]]:
    async with contextlib.AsyncExitStack() as stack:
        peer = await stack.enter_async_context(ScriptedPeer(answer, ranges))
        connection = await BrokerConnection.connect("127.0.0.1", peer.port)
        stack.push_async_callback(connection.close)
        yield peer, connection


def _metadata_request(topic: str = "t") -> Request:
    return Request(
        ApiKey.METADATA,
        {
            "topics": [{"name": topic}],
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )


def run(coroutine: Awaitable[None]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(TEST_TIMEOUT_S):
            await coroutine

    asyncio.run(bounded())


def test_negotiates_the_highest_common_versions() -> None:
    async def answer(header: RequestHeader, _body: Any, _peer: ScriptedPeer) -> bytes:
        return _metadata_answer(header.correlation_id, f"v{header.api_version}")

    async def scenario() -> None:
        async with connected(answer) as (_peer, connection):
            assert connection.version_for(ApiKey.METADATA) == 8
            assert connection.version_for(ApiKey.FETCH) == 11
            response = await connection.request(_metadata_request())
            assert response.cluster_id == "v8"

    run(scenario())


def test_pipelined_answers_in_any_order_reach_their_callers() -> None:
    requests_in_flight = 5

    async def answer(header: RequestHeader, _body: Any, peer: ScriptedPeer) -> None:
        if len(peer.received) < requests_in_flight:
            return  # held back until every request is in
        # All five are in flight at once: answer them last first, in one write.
        assert header.correlation_id == peer.received[-1][0].correlation_id
        peer.writers[0].write(
            b"".join(
                _metadata_answer(h.correlation_id, body.topics[0].name)
                for h, body in reversed(peer.received)
            )
        )

    async def scenario() -> None:
        async with connected(answer) as (_peer, connection):
            names = [f"topic-{n}" for n in range(requests_in_flight)]
            responses = await asyncio.gather(
                *(connection.request(_metadata_request(name)) for name in names)
            )
            assert [r.cluster_id for r in responses] == names

    run(scenario())


def test_a_request_without_answer_times_out_and_the_connection_keeps_working() -> None:
    release_first = asyncio.Event()

    async def answer(header: RequestHeader, body: Any, _peer: ScriptedPeer) -> bytes:
        if body.topics[0].name == "slow":
            await release_first.wait()
        return _metadata_answer(header.correlation_id, body.topics[0].name)

    async def scenario() -> None:
        async with connected(answer) as (_peer, connection):
            with pytest.raises(RequestTimedOutError, match=r"Metadata v8 .* within 0.05 s"):
                await connection.request(_metadata_request("slow"), timeout_s=0.05)
            release_first.set()  # the late answer arrives and is discarded
            response = await connection.request(_metadata_request("fast"))
            assert response.cluster_id == "fast"
            assert connection.is_usable

    run(scenario())


def test_requests_without_answers_are_only_written() -> None:
    async def answer(header: RequestHeader, body: Any, _peer: ScriptedPeer) -> bytes | None:
        if header.api_key == ApiKey.PRODUCE:
            return None  # acks=0: the broker never answers
        return _metadata_answer(header.correlation_id, body.topics[0].name)

    async def scenario() -> None:
        async with connected(answer) as (peer, connection):
            produce = Request(
                ApiKey.PRODUCE,
                {"acks": 0, "timeout": datetime.timedelta(seconds=1), "topic_data": []},
            )
            assert await connection.request(produce, expect_response=False) is None
            response = await connection.request(_metadata_request("after"))
            assert response.cluster_id == "after"
            assert [h.api_key for h, _ in peer.received] == [ApiKey.PRODUCE, ApiKey.METADATA]

    run(scenario())


def test_waiting_requests_fail_when_the_broker_hangs_up() -> None:
    async def answer(_header: RequestHeader, _body: Any, peer: ScriptedPeer) -> None:
        for writer in peer.writers:
            writer.close()

    async def scenario() -> None:
        async with ScriptedPeer(answer) as peer:
            connection = await BrokerConnection.connect("127.0.0.1", peer.port)
            with pytest.raises(ConnectionClosedError, match="closed the connection"):
                await connection.request(_metadata_request())
            assert not connection.is_usable
            with pytest.raises(ConnectionClosedError):
                await connection.request(_metadata_request())
            await connection.close()

    run(scenario())


def test_close_fails_requests_still_waiting() -> None:
    async def answer(_header: RequestHeader, _body: Any, _peer: ScriptedPeer) -> None:
        await asyncio.Event().wait()  # never answers

    async def scenario() -> None:
        async with ScriptedPeer(answer) as peer:
            connection = await BrokerConnection.connect("127.0.0.1", peer.port)
            waiting = asyncio.create_task(connection.request(_metadata_request()))
            await peer.wait_for_requests(1)
            await connection.close()
            with pytest.raises(ConnectionClosedError, match="is closed"):
                await waiting

    run(scenario())


def test_an_api_the_broker_does_not_offer_is_refused_before_sending() -> None:
    async def answer(header: RequestHeader, _body: Any, _peer: ScriptedPeer) -> bytes:
        return _metadata_answer(header.correlation_id, "x")

    async def scenario() -> None:
        ranges = {int(ApiKey.METADATA): (0, 8)}
        async with connected(answer, ranges) as (peer, connection):
            with pytest.raises(UnsupportedApiError, match="share no version of Fetch"):
                connection.version_for(ApiKey.FETCH)
            assert not peer.received

    run(scenario())


def test_a_closed_port_says_how_to_start_the_broker() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens here once the socket closes

    async def scenario() -> None:
        with pytest.raises(BrokerUnreachableError) as caught:
            await BrokerConnection.connect("127.0.0.1", port)
        assert str(caught.value) == (
            f"cannot reach broker at 127.0.0.1:{port}: is `sluice serve` running? "
            "(connection refused)"
        )

    run(scenario())
