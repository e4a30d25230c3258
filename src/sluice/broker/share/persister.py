"""The store of share-partition state as a share-partition's leader sees it: the share
coordinator of the key's ``__share_group_state`` partition, here or on another broker.

:class:`BrokerSharePersister` implements :class:`~sluice.share.state.SharePersister`.
It creates ``__share_group_state`` on first need (as FindCoordinator creates
``__transaction_state``), finds the leader of the key's partition in the metadata, and
either calls the runtime hosted here or sends Kafka's internal share-state requests
(InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState,
DeleteShareGroupState, ReadShareGroupStateSummary) to that broker through
:class:`~sluice.broker.network.peers.Peers`. While leadership moves (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, an unreachable broker) it
retries a bounded number of times with a growing backoff, so the metadata can catch up;
any other error, or the last of those, is raised as a KafkaError.

On the wire a share-partition without state has start offset -1. A remote initialize
asks the summary first and sends the next state epoch explicitly (the request carries
it, and the response does not return it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from sluice.broker.network.peer_connection import PeerUnavailable
from sluice.broker.network.peers import Peers
from sluice.broker.share.state_batches import state_batch_messages, state_batches
from sluice.cluster.model import TopicMetadata
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.protocol.messages import make, request_module
from sluice.protocol.versions import ApiKey
from sluice.share.state import ShareState, ShareStateKey
from sluice.share.state_coordinator import INITIAL_STATE_EPOCH, ShareStateSummary
from sluice.share.state_runtime import ShareStateCoordinatorRuntime

log = logging.getLogger(__name__)

_T = TypeVar("_T")

ATTEMPTS = 10
"""Tries of one operation while the coordinator moves: about 5.5 s of backoff in all,
enough for a new leader to load its partition; a broker's death takes longer to notice
(the metadata store's session), and the caller's own retries cover that."""
BACKOFF_INITIAL_S = 0.05
BACKOFF_MAX_S = 1.0
PEER_REQUEST_TIMEOUT_S = 30.0

RETRIABLE = frozenset(
    {
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
    }
)
"""Errors that mean "the coordinator is moving": look it up again and retry."""

_CoordinatorNotAvailable = errors.for_code(ErrorCode.coordinator_not_available)

NO_START_OFFSET = -1
"""A share-partition without state, on the wire."""


_REQUEST_CLASSES: dict[ApiKey, tuple[str, str]] = {
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: (
        "InitializeShareGroupStateRequest",
        "InitializeStateData",
    ),
    ApiKey.READ_SHARE_GROUP_STATE: ("ReadShareGroupStateRequest", "ReadStateData"),
    ApiKey.WRITE_SHARE_GROUP_STATE: ("WriteShareGroupStateRequest", "WriteStateData"),
    ApiKey.DELETE_SHARE_GROUP_STATE: ("DeleteShareGroupStateRequest", "DeleteStateData"),
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: (
        "ReadShareGroupStateSummaryRequest",
        "ReadStateSummaryData",
    ),
}
"""Each share-state request's class and its per-topic class: one group, one topic and one
partition each, so :meth:`BrokerSharePersister._ask` builds them all alike."""


def _first_partition(response: Any) -> Any:
    """The one partition result of a one-partition share-state response."""
    for result in response.results:
        for partition in result.partitions:
            return partition
    raise _CoordinatorNotAvailable("the share coordinator answered no partition")


def _raise_for(partition: Any) -> None:
    if partition.error_code != ErrorCode.none:
        raise errors.for_code(partition.error_code)(partition.error_message or "")


class ShareStateTopic(Protocol):
    """Where ``__share_group_state`` is found (the broker's
    :class:`~sluice.broker.topics.TopicManager`)."""

    async def ensure_share_state_topic(self) -> TopicMetadata:
        """The topic as the metadata now has it, created if it does not exist yet."""
        ...


class BrokerSharePersister:
    def __init__(
        self,
        node_id: int,
        runtime: ShareStateCoordinatorRuntime,
        topics: ShareStateTopic,
        peers: Peers,
        *,
        attempts: int = ATTEMPTS,
    ) -> None:
        self._node_id = node_id
        self._runtime = runtime
        self._topics = topics
        self._peers = peers
        self._attempts = attempts

    # ============================================================ SharePersister

    async def read(self, key: ShareStateKey, leader_epoch: int) -> ShareState | None:
        return await self._at_coordinator(
            key,
            lambda: self._runtime.read(key, leader_epoch),
            lambda node: self._read_remote(node, key, leader_epoch),
        )

    async def initialize(self, key: ShareStateKey, start_offset: int) -> ShareState:
        return await self._at_coordinator(
            key,
            lambda: self._runtime.initialize(key, start_offset),
            lambda node: self._initialize_remote(node, key, start_offset),
        )

    async def write(self, key: ShareStateKey, state: ShareState) -> None:
        await self._at_coordinator(
            key,
            lambda: self._runtime.write(key, state),
            lambda node: self._write_remote(node, key, state),
        )

    async def delete(self, key: ShareStateKey) -> None:
        await self._at_coordinator(
            key,
            lambda: self._runtime.delete(key),
            lambda node: self._delete_remote(node, key),
        )

    async def summary(self, key: ShareStateKey) -> ShareStateSummary | None:
        """Start offset, state epoch and leader epoch (None: no state), for listings."""
        return await self._at_coordinator(
            key,
            lambda: self._runtime.summary(key),
            lambda node: self._summary_remote(node, key),
        )

    # ================================================================== routing

    async def _at_coordinator(
        self,
        key: ShareStateKey,
        local: Callable[[], Awaitable[_T]],
        remote: Callable[[int], Awaitable[_T]],
    ) -> _T:
        last: KafkaError = _CoordinatorNotAvailable("no attempt")
        backoff_s = BACKOFF_INITIAL_S
        for attempt in range(self._attempts):
            if attempt:
                await asyncio.sleep(backoff_s)
                backoff_s = min(BACKOFF_MAX_S, backoff_s * 2)
            try:
                leader = await self._coordinator_of(key)
                if leader == self._node_id:
                    return await local()
                return await remote(leader)
            except (PeerUnavailable, errors.ProtocolError) as e:
                last = _CoordinatorNotAvailable(f"share coordinator unreachable: {e}")
            except KafkaError as e:
                if e.code not in RETRIABLE:
                    raise
                last = e
            log.debug("share state of %s: %s (attempt %d)", key.coordinator_key(), last, attempt)
        raise last

    async def _coordinator_of(self, key: ShareStateKey) -> int:
        """The node leading the key's ``__share_group_state`` partition (creating the
        topic on first need)."""
        try:
            topic = await self._topics.ensure_share_state_topic()
        except KafkaError as e:
            raise _CoordinatorNotAvailable(f"__share_group_state: {e}") from None
        partition = self._runtime.coordinator_partition(key)
        state = topic.partitions.get(partition)
        if state is None or state.leader < 0:
            raise _CoordinatorNotAvailable(f"__share_group_state-{partition} has no leader")
        return state.leader

    async def _ask(
        self,
        node: int,
        key: ShareStateKey,
        api_key: ApiKey,
        partition_fields: Callable[[Any], dict[str, Any]] = lambda m: {},
    ) -> Any:
        """Send ``node`` the one-partition share-state request ``api_key`` for ``key`` and
        return its partition's answer, raising the error it carries.

        ``partition_fields`` gives the partition's fields beyond its index, from the
        request's module (where a field is itself a message, such as the state batches).
        """
        request, topic_data = _REQUEST_CLASSES[api_key]

        def build(m: Any) -> Any:
            partition = make(m.PartitionData, partition=key.partition, **partition_fields(m))
            topic = make(getattr(m, topic_data), topic_id=key.topic_id, partitions=(partition,))
            return make(getattr(m, request), group_id=key.group_id, topics=(topic,))

        answer = _first_partition(
            await self._peers.request(
                node,
                api_key,
                lambda version: build(request_module(api_key, version)),
                PEER_REQUEST_TIMEOUT_S,
            )
        )
        _raise_for(answer)
        return answer

    # =================================================================== remote

    async def _read_remote(
        self, node: int, key: ShareStateKey, leader_epoch: int
    ) -> ShareState | None:
        answer = await self._ask(
            node, key, ApiKey.READ_SHARE_GROUP_STATE, lambda m: {"leader_epoch": leader_epoch}
        )
        if answer.start_offset == NO_START_OFFSET:
            return None
        try:
            batches = state_batches(answer.state_batches)
        except ValueError as e:
            raise errors.CorruptMessage(f"the share coordinator sent {e}") from None
        return ShareState(answer.state_epoch, answer.start_offset, batches, leader_epoch)

    async def _initialize_remote(
        self, node: int, key: ShareStateKey, start_offset: int
    ) -> ShareState:
        current = await self._summary_remote(node, key)
        state_epoch = INITIAL_STATE_EPOCH if current is None else current.state_epoch + 1
        await self._ask(
            node,
            key,
            ApiKey.INITIALIZE_SHARE_GROUP_STATE,
            lambda m: {"state_epoch": state_epoch, "start_offset": start_offset},
        )
        leader_epoch = -1 if current is None else current.leader_epoch
        return ShareState(state_epoch, start_offset, (), leader_epoch)

    async def _write_remote(self, node: int, key: ShareStateKey, state: ShareState) -> None:
        await self._ask(
            node,
            key,
            ApiKey.WRITE_SHARE_GROUP_STATE,
            lambda m: {
                "state_epoch": state.state_epoch,
                "leader_epoch": state.leader_epoch,
                "start_offset": state.start_offset,
                "state_batches": state_batch_messages(m, state.batches),
            },
        )

    async def _delete_remote(self, node: int, key: ShareStateKey) -> None:
        await self._ask(node, key, ApiKey.DELETE_SHARE_GROUP_STATE)

    async def _summary_remote(self, node: int, key: ShareStateKey) -> ShareStateSummary | None:
        answer = await self._ask(
            node, key, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, lambda m: {"leader_epoch": -1}
        )
        if answer.start_offset == NO_START_OFFSET:
            return None
        return ShareStateSummary(answer.state_epoch, answer.leader_epoch, answer.start_offset)
