"""Where a registry call is answered: on this broker when it hosts the registry (leads
``_schemas``-0 and has loaded it), else forwarded to the broker that does.

::

    call (from the HTTP listener) ──▶ _schemas exists? (created on the first call)
        ──▶ leader of _schemas-0 ──this broker──▶ the runtime: shard.handle(call)
                 │                                   loading / just lost it ─▶ again
                 ├──another broker──▶ SCHEMA_REGISTRY_CALL over the registry's own
                 │                    inter-broker connection ─▶ its answer
                 │                    unreachable / closed / "not here" ─▶ again
                 │                    no answer in time: a read ─▶ again
                 │                                       a write ─▶ 50003 at once
                 └──none──▶ again
        again: after RETRY_BACKOFF_MS, with the metadata of then, until
        FORWARD_TIMEOUT_MS has passed; then 500 with error_code 50003 (no leader,
        unreachable) or 50002 (the leader is still loading)

Every wait of a call (for the connection, for the answer) ends by its one deadline,
``FORWARD_TIMEOUT_MS`` after it arrived. A write the leader got no answer for in time,
its connection still open, is not sent again: the leader may still be running it (a soft
delete repeated would answer 40404 although it succeeded), so the caller is told it may
have been applied. A connection the leader closed (it stopped, or died) is not such a
case: the call goes to the next leader, where a registration repeated gets the id it got
(a soft delete whose first try committed just before the leader died answers 40404). The
connection is the registry's own (a ``Peers`` of its own): a slow registration never
holds up the controller channel, transactions or share state between the brokers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

from sluice.broker.network.peer_connection import PeerUnavailable
from sluice.broker.network.peers import Peers, RequestMayHaveArrived
from sluice.broker.registry.answers import (
    error_answer,
    error_code_of,
    forwarding_error,
    loading_timeout,
)
from sluice.cluster.image import MetadataImage
from sluice.cluster.model import NO_LEADER
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition
from sluice.coordinator.api import CoordinatorShard, Effect, RequestToken
from sluice.coordinator.runtime import CoordinatorRuntime
from sluice.protocol.private import SCHEMA_REGISTRY_CALL, BodyNotEncodable, PrivateRequest
from sluice.registry.api import Answer, Call
from sluice.registry.errors import ErrorCode as RegistryErrorCode

log = logging.getLogger(__name__)

REGISTRY_PARTITION: Final = 0
"""The registry's one partition of ``schema.registry.topic``."""
FORWARD_TIMEOUT_MS: Final = 15_000
"""How long a call may take on a broker that does not host the registry: looking for
the registry's leader (a leader election after a broker's death takes a ZooKeeper
session timeout, 6 s by default), waiting for the connection to it and for its answer
(a registration waits for its record to be replicated and for the schema to be parsed)
before it is answered 50003 or 50002. Confluent's clients time out after 30 s."""
RETRY_BACKOFF_MS: Final = 100
"""The wait between two attempts while there is no leader, it is loading, or it cannot
be reached."""
ELSEWHERE: Final = "elsewhere"
"""The key of a forwarded call's response saying the broker asked does not host the
registry (beside the answer's ``status`` and ``body``), and why: :data:`LOADING` or
:data:`MOVED`."""
LOADING: Final = "loading"
MOVED: Final = "moved"


class RegistryShard(CoordinatorShard, Protocol):
    """What the broker asks of the registry's shard (:mod:`sluice.registry.shard`)."""

    def handle(self, now_ms: int, token: RequestToken, call: Call) -> list[Effect]: ...


class _NotHere(Exception):
    """This broker does not (or not yet) answer for the registry."""

    def __init__(self, reason: str, *, loading: bool = False) -> None:
        super().__init__(reason)
        self.loading = loading


class RegistryCalls:
    """Answers registry calls on any broker (``answer``), and those forwarded to this one
    (``answer_here``). ``runtime`` hosts the shard of the partition this broker leads;
    ``ensure_topic`` creates the registry's topic if it does not exist yet."""

    def __init__(
        self,
        node_id: int,
        topic: str,
        image: Callable[[], MetadataImage],
        runtime: CoordinatorRuntime[Any],
        peers: Peers,
        ensure_topic: Callable[[], Awaitable[object]],
        *,
        forward_timeout_ms: int = FORWARD_TIMEOUT_MS,
    ) -> None:
        self._node_id = node_id
        self.topic = topic
        self._image = image
        self._runtime = runtime
        self._peers = peers
        self._ensure_topic = ensure_topic
        self._forward_timeout_ms = forward_timeout_ms

    async def answer(self, call: Call, principal: str | None) -> Answer:
        """The registry's answer to ``call``, from this broker or the one hosting it."""
        deadline = time.monotonic() + self._forward_timeout_ms / 1000
        why = "the registry's topic could not be created"
        loading = False
        while True:
            try:
                await self._ensure_topic()
                return await self._answer_once(call, principal, deadline)
            except _NotHere as e:
                why, loading = str(e), e.loading
            except KafkaError as e:
                why, loading = f"{self.topic} is not ready: {e}", False
            if time.monotonic() >= deadline:
                log.warning("registry call %s %s unanswered: %s", call.method, _path(call), why)
                return loading_timeout(why) if loading else forwarding_error(why)
            await asyncio.sleep(RETRY_BACKOFF_MS / 1000)  # before asking the metadata again

    async def _answer_once(self, call: Call, principal: str | None, deadline: float) -> Answer:
        topic_partition = TopicPartition(self.topic, REGISTRY_PARTITION)
        state = self._image().partition(topic_partition)
        if state is None:
            raise _NotHere(f"{topic_partition} does not exist yet")
        if state.leader == NO_LEADER:
            raise _NotHere(f"{topic_partition} has no leader")
        if state.leader == self._node_id:
            return await self._answer_local(call)
        return await self._forward(state.leader, call, principal, deadline)

    async def answer_here(self, call: Call, principal: str | None) -> dict[str, Any]:
        """The response to a call another broker forwarded (``Answer.to_json()``): the
        shard's answer here; when this broker does not host the registry, 50003 with
        ``"elsewhere": "moved"``, or 50002 with ``"elsewhere": "loading"`` while it
        loads it (the sender looks for the leader again, keeping why)."""
        try:
            return (await self._answer_local(call)).to_json()
        except _NotHere as e:
            if e.loading:
                return {**loading_timeout(str(e)).to_json(), ELSEWHERE: LOADING}
            return {**forwarding_error(str(e)).to_json(), ELSEWHERE: MOVED}

    async def _answer_local(self, call: Call) -> Answer:
        try:
            response = await self._runtime.call(
                REGISTRY_PARTITION,
                lambda shard, now_ms, token: shard.handle(now_ms, token, call),
            )
        except KafkaError as e:
            if e.code is ErrorCode.coordinator_load_in_progress:
                raise _NotHere(f"{self.topic} is being loaded", loading=True) from None
            if e.code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
                raise _NotHere(f"the registry moved off broker {self._node_id}") from None
            raise
        assert isinstance(response, Answer), f"the registry answered {response!r}"
        return response

    async def _forward(
        self, leader: int, call: Call, principal: str | None, deadline: float
    ) -> Answer:
        try:
            request = PrivateRequest(
                SCHEMA_REGISTRY_CALL, {"call": call.to_json(), "principal": principal}
            )
        except BodyNotEncodable as e:  # the same every time: never sent again
            return error_answer(
                RegistryErrorCode.BAD_REQUEST, f"The request cannot be forwarded: {e}"
            )
        remaining_s = max(deadline - time.monotonic(), 0.0)
        try:
            body = await self._peers.request_private(
                leader, request, remaining_s, wait_s=remaining_s
            )
        except RequestMayHaveArrived as e:
            if call.method != "GET":  # the leader may have applied it: never twice
                log.warning(
                    "registry call %s %s sent to broker %d, unanswered: %s",
                    call.method,
                    _path(call),
                    leader,
                    e,
                )
                return forwarding_error(
                    f"broker {leader} (the leader of {self.topic}) did not answer in time; "
                    "the change may have been applied: read before trying again"
                )
            raise _NotHere(f"broker {leader} (the leader of {self.topic}): {e}") from None
        except (PeerUnavailable, errors.ProtocolError, KafkaError) as e:
            raise _NotHere(f"broker {leader} (the leader of {self.topic}): {e}") from None
        try:
            answer = Answer.from_json(body)
        except ValueError as e:
            raise _NotHere(f"broker {leader} answered {body!r}: {e}") from None
        elsewhere = body.get(ELSEWHERE)
        if elsewhere is not None or (
            error_code_of(answer) == RegistryErrorCode.REQUEST_FORWARDING_FAILED
        ):
            message = answer.body.get("message") if isinstance(answer.body, dict) else None
            raise _NotHere(f"broker {leader}: {message}", loading=elsewhere == LOADING)
        return answer


def _path(call: Call) -> str:
    return "/" + "/".join(call.segments)
