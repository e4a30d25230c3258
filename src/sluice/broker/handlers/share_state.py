"""Kafka's internal share-state APIs (KIP-932), which brokers send one another:
InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState,
DeleteShareGroupState and ReadShareGroupStateSummary.

A share-partition's leader sends them to the share coordinator of the share-partition's
``__share_group_state`` partition (:mod:`sluice.broker.share.persister`); this broker
answers for the partitions it coordinates and NOT_COORDINATOR for the others (the
sender looks the leader up again). They are served but never advertised in ApiVersions
(``VersionRange.internal``). Each partition of a request is answered on its own: a
share-partition without state reads as start offset -1 (state epoch 0, Kafka's
"uninitialized"); an InitializeShareGroupState with state epoch -1 takes the next one.

With the authorizer on, each needs CLUSTER_ACTION on the cluster (the brokers' principal
is a super user); others are answered CLUSTER_AUTHORIZATION_FAILED for every partition.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import CLUSTER_ACTION
from sluice.broker.services import UsesAuthorizer, UsesShareStates
from sluice.broker.share.state_batches import state_batch_messages, state_batches
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.protocol.messages import make, response_module
from sluice.share.state import ShareState, ShareStateKey

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext


class ShareStateServices(UsesAuthorizer, UsesShareStates, Protocol):
    """What the share state handlers use of the broker."""


UNINITIALIZED_START_OFFSET = -1
UNINITIALIZED_STATE_EPOCH = 0
NO_LEADER_EPOCH = -1

_PartitionAnswer = Callable[[ShareStateKey, Any], Awaitable[dict[str, Any]]]


def _no_fields(e: KafkaError) -> dict[str, Any]:
    return {}


async def _answer_each(
    services: ShareStateServices,
    context: RequestContext,
    request: Any,
    names: tuple[str, str],
    answer: _PartitionAnswer,
    failed: Callable[[KafkaError], dict[str, Any]] = _no_fields,
) -> Any:
    """The response (``names``: its class and its per-topic result class):
    ``answer(key, partition)`` for each partition of the request; for one it raised a
    KafkaError for, the error and ``failed(error)`` (the fields a failed partition
    still has)."""
    module = response_module(context.header.api_key, context.header.api_version)
    response_class, result_class = names
    between_brokers = services.authorizer.allows(context, CLUSTER_ACTION)
    results = []
    for topic in request.topics:
        partitions = []
        for partition in topic.partitions:
            try:
                if not between_brokers:
                    raise errors.for_code(CLUSTER_ACTION.error_code)("needs CLUSTER_ACTION")
                if topic.topic_id is None or topic.topic_id.int == 0:
                    raise errors.InvalidRequest("a share-partition is named by its topic id")
                key = ShareStateKey(request.group_id, topic.topic_id, int(partition.partition))
                fields = await answer(key, partition)
            except KafkaError as e:
                fields = {"error_code": e.code, "error_message": e.message or None} | failed(e)
            else:
                fields = {"error_code": ErrorCode.none} | fields
            partitions.append(make(module.PartitionResult, partition=partition.partition, **fields))
        results.append(
            make(
                getattr(module, result_class),
                topic_id=topic.topic_id,
                partitions=tuple(partitions),
            )
        )
    return make(getattr(module, response_class), results=tuple(results))


# ---------------------------------------------------------- InitializeShareGroupState


async def handle_initialize_share_group_state(
    services: ShareStateServices, context: RequestContext, request: Any
) -> Any:
    async def initialize(key: ShareStateKey, partition: Any) -> dict[str, Any]:
        state_epoch = int(partition.state_epoch)
        await services.share_states.initialize(
            key, int(partition.start_offset), None if state_epoch < 0 else state_epoch
        )
        return {}

    return await _answer_each(
        services,
        context,
        request,
        ("InitializeShareGroupStateResponse", "InitializeStateResult"),
        initialize,
    )


# ---------------------------------------------------------------- ReadShareGroupState


_UNINITIALIZED: dict[str, Any] = {
    "state_epoch": UNINITIALIZED_STATE_EPOCH,
    "start_offset": UNINITIALIZED_START_OFFSET,
    "state_batches": (),
}
"""A share-partition without state (also the fields of a failed partition)."""


async def handle_read_share_group_state(
    services: ShareStateServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)

    async def read(key: ShareStateKey, partition: Any) -> dict[str, Any]:
        state = await services.share_states.read(key, int(partition.leader_epoch))
        if state is None:
            return _UNINITIALIZED
        return {
            "state_epoch": state.state_epoch,
            "start_offset": state.start_offset,
            "state_batches": state_batch_messages(module, state.batches),
        }

    return await _answer_each(
        services,
        context,
        request,
        ("ReadShareGroupStateResponse", "ReadStateResult"),
        read,
        lambda e: _UNINITIALIZED,
    )


# --------------------------------------------------------------- WriteShareGroupState


def _state_written(partition: Any) -> ShareState:
    try:
        batches = state_batches(partition.state_batches)
    except ValueError as e:
        raise errors.InvalidRequest(f"a state batch: {e}") from None
    return ShareState(
        int(partition.state_epoch),
        int(partition.start_offset),
        batches,
        int(partition.leader_epoch),
    )


async def handle_write_share_group_state(
    services: ShareStateServices, context: RequestContext, request: Any
) -> Any:
    async def write(key: ShareStateKey, partition: Any) -> dict[str, Any]:
        await services.share_states.write(key, _state_written(partition))
        return {}

    return await _answer_each(
        services, context, request, ("WriteShareGroupStateResponse", "WriteStateResult"), write
    )


# -------------------------------------------------------------- DeleteShareGroupState


async def handle_delete_share_group_state(
    services: ShareStateServices, context: RequestContext, request: Any
) -> Any:
    async def delete(key: ShareStateKey, partition: Any) -> dict[str, Any]:
        await services.share_states.delete(key)
        return {}

    return await _answer_each(
        services, context, request, ("DeleteShareGroupStateResponse", "DeleteStateResult"), delete
    )


# --------------------------------------------------------- ReadShareGroupStateSummary


_NO_SUMMARY: dict[str, Any] = {
    "state_epoch": UNINITIALIZED_STATE_EPOCH,
    "leader_epoch": NO_LEADER_EPOCH,
    "start_offset": UNINITIALIZED_START_OFFSET,
}


async def handle_read_share_group_state_summary(
    services: ShareStateServices, context: RequestContext, request: Any
) -> Any:
    async def summary(key: ShareStateKey, partition: Any) -> dict[str, Any]:
        found = await services.share_states.summary(key)
        if found is None:
            return _NO_SUMMARY
        return {
            "state_epoch": found.state_epoch,
            "leader_epoch": found.leader_epoch,
            "start_offset": found.start_offset,
        }

    return await _answer_each(
        services,
        context,
        request,
        ("ReadShareGroupStateSummaryResponse", "ReadStateSummaryResult"),
        summary,
        lambda e: _NO_SUMMARY,
    )
