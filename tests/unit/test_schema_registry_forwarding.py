"""How the broker forwards a registry call (:mod:`sluice.broker.registry.forwarding`,
:mod:`sluice.protocol.private`): what can never be sent is answered at once, not retried,
and the leader's state (loading) survives the trip back to the sender. The runtime and
the other broker are stood in for: what is tested is the decision, not the transport
(tests/cluster/test_schema_registry_cluster.py runs the real thing)."""

from __future__ import annotations

import asyncio
import json
import uuid
from types import MappingProxyType
from typing import Any

import pytest

from sluice.broker.network.peer_connection import PeerUnavailable
from sluice.broker.network.peers import Peers, RequestMayHaveArrived
from sluice.broker.registry.forwarding import RegistryCalls
from sluice.cluster.image import MetadataImage
from sluice.cluster.model import BrokerInfo, PartitionState, TopicMetadata
from sluice.common import errors
from sluice.common.errors import ErrorCode
from sluice.protocol.private import (
    BODY_BYTES_MAX,
    SCHEMA_REGISTRY_CALL,
    BodyNotEncodable,
    PrivateRequest,
    decode_request_body,
    encode_request_frame,
)
from sluice.registry.api import Call

LEADER = 1
TOPIC = "_schemas"


def _deep(depth: int) -> object:
    value: object = []
    for _ in range(depth):
        value = [value]
    return value


def _image(leader: int) -> MetadataImage:
    state = PartitionState(replicas=(leader,), leader=leader, leader_epoch=1, isr=(leader,))
    topic = TopicMetadata(TOPIC, uuid.uuid4(), {0: state})
    return MetadataImage("c", topics=MappingProxyType({TOPIC: topic}))


class _Peers:
    """The other broker: answers with ``answers`` in turn (an exception is raised)."""

    def __init__(self, *answers: Any) -> None:
        self.sent: list[PrivateRequest] = []
        self._answers = list(answers)

    async def request_private(
        self, node_id: int, request: PrivateRequest, timeout_s: float, *, wait_s: float
    ) -> dict[str, Any]:
        assert 0 <= timeout_s <= 60 and wait_s == timeout_s, "bounded by the call's deadline"
        self.sent.append(request)
        answer = self._answers.pop(0) if len(self._answers) > 1 else self._answers[0]
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, dict)
        return answer


def _calls(peers: _Peers, forward_timeout_ms: int = 2_000) -> RegistryCalls:
    async def exists() -> None:
        return None

    return RegistryCalls(
        0,
        TOPIC,
        lambda: _image(LEADER),
        None,  # type: ignore[arg-type]  # never asked: the leader is another broker
        peers,  # type: ignore[arg-type]
        exists,
        forward_timeout_ms=forward_timeout_ms,
    )


def test_a_private_body_is_encoded_once_and_refused_when_it_cannot_be_sent() -> None:
    surrogate = PrivateRequest(SCHEMA_REGISTRY_CALL, {"schema": "\ud800"})
    frame = encode_request_frame(7, "broker-0", surrogate)
    assert decode_request_body(frame, len(frame) - len(surrogate.encoded_body)) == {
        "schema": "\ud800"
    }
    with pytest.raises(BodyNotEncodable, match="cannot be encoded"):
        PrivateRequest(SCHEMA_REGISTRY_CALL, {"deep": _deep(100_000)})
    with pytest.raises(BodyNotEncodable, match="over"):
        PrivateRequest(SCHEMA_REGISTRY_CALL, {"schema": "x" * BODY_BYTES_MAX})
    assert json.loads(PrivateRequest(SCHEMA_REGISTRY_CALL, {"a": "é"}).encoded_body) == {"a": "é"}


def test_a_call_that_cannot_be_forwarded_is_answered_at_once_never_retried() -> None:
    peers = _Peers(PeerUnavailable("unreachable"))
    call = Call("POST", ("subjects", "s-value", "versions"), {}, {"deep": _deep(100_000)})
    answer = asyncio.run(_calls(peers, forward_timeout_ms=60_000).answer(call, None))
    assert answer.status == 400 and answer.body["error_code"] == 400
    assert "cannot be forwarded" in answer.body["message"]
    assert peers.sent == []


class _LoadingRuntime:
    """The coordinator runtime while it loads the registry's partition."""

    async def call(self, partition: int, operation: object) -> object:
        raise errors.for_code(ErrorCode.coordinator_load_in_progress)("loading _schemas-0")


def test_a_leader_still_loading_is_answered_50002_through_the_forwarding() -> None:
    async def exists() -> None:
        return None

    here = RegistryCalls(
        LEADER,
        TOPIC,
        lambda: _image(LEADER),
        _LoadingRuntime(),  # type: ignore[arg-type]
        _Peers(PeerUnavailable("not asked")),  # type: ignore[arg-type]
        exists,
    )
    call = Call("GET", ("subjects",))
    response = asyncio.run(here.answer_here(call, None))
    assert response["status"] == 500 and response["body"]["error_code"] == 50002
    assert response["elsewhere"] == "loading"
    # The sender keeps looking, then answers 50002 (the documented code), not 50003.
    peers = _Peers(response)
    answer = asyncio.run(_calls(peers, forward_timeout_ms=300).answer(call, None))
    assert answer.status == 500 and answer.body["error_code"] == 50002, answer
    assert len(peers.sent) > 1


def test_a_write_sent_and_unanswered_is_never_sent_again_a_read_is() -> None:
    lost = RequestMayHaveArrived("broker 1 did not answer: TimeoutError()")
    delete = Call("DELETE", ("subjects", "s-value"))
    peers = _Peers(lost)
    answer = asyncio.run(_calls(peers, forward_timeout_ms=60_000).answer(delete, None))
    assert answer.status == 500 and answer.body["error_code"] == 50003
    assert "may have been applied" in answer.body["message"]
    assert len(peers.sent) == 1
    read = Call("GET", ("subjects",))
    peers = _Peers(lost, {"status": 200, "body": ["s-value"]})
    answer = asyncio.run(_calls(peers).answer(read, None))
    assert (answer.status, answer.body) == (200, ["s-value"])
    assert len(peers.sent) == 2


def test_waiting_for_a_busy_peer_connection_is_bounded() -> None:
    """A peer that never answers holds its connection; the next request gives up
    after its ``wait_s`` instead of queueing behind it."""

    async def scenario() -> None:
        release = asyncio.Event()

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await release.wait()  # answers nothing until the test is done
            writer.close()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        image = MetadataImage(
            "c", MappingProxyType({LEADER: BrokerInfo(LEADER, "127.0.0.1", port)})
        )
        peers = Peers(0, lambda: image)
        request = PrivateRequest(SCHEMA_REGISTRY_CALL, {"call": {}, "principal": None})
        try:
            first = asyncio.create_task(peers.request_private(LEADER, request, 60.0))
            await asyncio.sleep(0)  # let it take the connection
            with pytest.raises(PeerUnavailable, match="stayed busy"):
                await peers.request_private(LEADER, request, 60.0, wait_s=0.2)
            assert not first.done(), "the second gave up while the first still waited"
            release.set()
            with pytest.raises(PeerUnavailable):
                await first
        finally:
            release.set()
            await peers.close()
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())
