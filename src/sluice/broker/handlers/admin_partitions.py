"""ElectLeaders v0-2, AlterPartitionReassignments v0-1, ListPartitionReassignments v0:
partition leadership and placement, decided as Kafka's controller decides them
(:mod:`sluice.cluster.leadership`) and written through the metadata store.

On a single node every partition is led by its preferred (and only) replica, so a
preferred or unclean election answers ELECTION_NOT_NEEDED per partition. With a null
topic list an election covers every partition and, as in Kafka, leaves out of the
answer the partitions whose leader is already the right one (each topic is still
listed).

A reassignment that adds brokers is answered once it is stored as in progress (KIP-455):
the added replicas then copy the partition, and the controller completes it once they
are in sync; ListPartitionReassignments lists those in progress with their adding and
removing replicas, and a cancel of a partition with none answers
NO_REASSIGNMENT_IN_PROGRESS.

The controller decides and writes (the one writer of partition state): on the
controller broker the handler asks it (``Controller.change_partitions``) and answers
once the stored states are applied here; any other broker forwards the request to the
controller the metadata names and passes its answer back, as Kafka's
brokers forward admin requests to the KRaft controller (an unreachable controller is
answered NOT_CONTROLLER per partition: clients retry). Each state is written
conditionally on its version and the controller's epoch; one that loses to a newer
state is decided again from the newer image.

The requests' ``timeout`` is not waited on: every decision here is made and stored
before the answer.

With the authorizer on, ElectLeaders and AlterPartitionReassignments need ALTER and
ListPartitionReassignments DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import CLUSTER_ALTER, CLUSTER_DESCRIBE
from sluice.broker.network.peer_connection import PeerUnavailable
from sluice.broker.services import UsesAuthorizer, UsesConfig, UsesController, UsesPeers, UsesTopics
from sluice.cluster import leadership
from sluice.cluster.controller import PartitionDecision
from sluice.cluster.leadership import ElectionType
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition
from sluice.protocol.messages import has_field, make, request_module, response_module
from sluice.protocol.versions import ApiKey

if TYPE_CHECKING:
    from types import ModuleType

    from sluice.broker.context import RequestContext
    from sluice.cluster.image import MetadataImage
    from sluice.cluster.model import PartitionState


class AdminPartitionsServices(
    UsesAuthorizer, UsesConfig, UsesController, UsesPeers, UsesTopics, Protocol
):
    """What the admin partitions handlers use of the broker."""


FORWARD_TIMEOUT_S = 30.0
"""How long a broker waits for the controller's answer to a request it forwarded."""


def _unknown_partition(
    services: AdminPartitionsServices, topic: str, index: int
) -> KafkaError | None:
    metadata = services.topics.get(topic)
    if metadata is None:
        return errors.UnknownTopicOrPartition(f"No such topic as {topic}")
    if index not in metadata.partitions:
        return errors.UnknownTopicOrPartition(f"No such partition as {topic}-{index}")
    return None


def _controller_elsewhere(services: AdminPartitionsServices) -> int | None:
    """The controller's node id when it is another broker (the request is forwarded)."""
    controller = services.topics.image.controller
    if controller is None or controller.node_id == services.config.node_id:
        return None
    return controller.node_id


async def _decide(
    services: AdminPartitionsServices, decisions: list[PartitionDecision]
) -> list[tuple[int, str | None]]:
    """The controller's (this broker's) outcome of each decision, once what it stored is
    applied here too."""
    outcomes = await services.controller.change_partitions(decisions)
    written = {
        TopicPartition(o.topic, o.partition): o.state.version
        for o in outcomes
        if o.state is not None and o.error_code == ErrorCode.none
    }
    if written:

        def applied(image: MetadataImage) -> bool:
            return all(
                (state := image.partition(tp)) is None or state.version >= version
                for tp, version in written.items()
            )

        try:
            await services.topics.wait_applied(applied)
        except KafkaError as e:
            return [(e.code, e.message) for _ in outcomes]
    return [(o.error_code, o.error_message) for o in outcomes]


async def _decide_known(
    services: AdminPartitionsServices,
    topic: str,
    asked: list[tuple[int, Callable[[], PartitionDecision]]],
) -> list[tuple[int, int, str | None]]:
    """Each asked partition's (index, error code, message), in order: unknown ones
    refused here, the others decided by the controller (``asked``: each index and
    how to make its decision)."""
    refused: dict[int, tuple[int, str | None]] = {}
    decisions = []
    for position, (index, decision) in enumerate(asked):
        unknown = _unknown_partition(services, topic, index)
        if unknown is not None:
            refused[position] = (unknown.code, unknown.message)
        else:
            decisions.append(decision())
    answers = iter(await _decide(services, decisions))
    return [
        (index, *(refused[position] if position in refused else next(answers)))
        for position, (index, _) in enumerate(asked)
    ]


async def _forward(
    services: AdminPartitionsServices, controller_id: int, api_key: ApiKey, fields: dict[str, Any]
) -> Any:
    """Send the request (its ``fields``) to the controller; its answer, or None when the
    controller cannot be reached (the caller answers NOT_CONTROLLER: clients retry)."""
    request_class = _REQUEST_CLASSES[api_key]
    try:
        return await services.peers.request(
            controller_id,
            api_key,
            lambda version: make(
                getattr(request_module(api_key, version), request_class), **fields
            ),
            FORWARD_TIMEOUT_S,
        )
    except (PeerUnavailable, errors.ProtocolError, KafkaError):
        return None


_REQUEST_CLASSES = {
    ApiKey.ELECT_LEADERS: "ElectLeadersRequest",
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: "AlterPartitionReassignmentsRequest",
}

_NOT_CONTROLLER = (ErrorCode.not_controller, "the controller could not be reached; try again")


# ── ElectLeaders ───────────────────────────────────────────────────────────────────────


def _election(topic: str, index: int, *, kind: ElectionType) -> PartitionDecision:
    def decide(state: PartitionState, image: MetadataImage) -> PartitionState | None:
        outcome = leadership.elect(state, kind, image.brokers.keys())
        if outcome.error_code != ErrorCode.none:
            raise errors.for_code(outcome.error_code)(outcome.error_message or "")
        return outcome.state

    return PartitionDecision(topic, index, decide)


async def _election_results(
    module: ModuleType, services: AdminPartitionsServices, request: Any, kind: ElectionType
) -> list[Any]:
    results: list[tuple[str, list[tuple[int, int, str | None]]]] = []
    controller_id = _controller_elsewhere(services)
    if controller_id is not None:
        results = await _forwarded_elections(services, controller_id, request, kind)
    elif request.topic_partitions is None:
        asked = [
            (name, index)
            for name, topic in sorted(services.topics.all().items())
            for index in sorted(topic.partitions)
        ]
        answers = await _decide(services, [_election(n, i, kind=kind) for n, i in asked])
        by_topic: dict[str, list[tuple[int, int, str | None]]] = {
            name: [] for name in sorted(services.topics.all())
        }
        for (name, index), (code, message) in zip(asked, answers, strict=True):
            if code != ErrorCode.election_not_needed:
                by_topic[name].append((index, code, message))
        results = list(by_topic.items())
    else:
        for requested in request.topic_partitions:
            name = requested.topic
            results.append(
                (
                    name,
                    await _decide_known(
                        services,
                        name,
                        [
                            (int(i), functools.partial(_election, name, int(i), kind=kind))
                            for i in requested.partitions
                        ],
                    ),
                )
            )
    return [
        make(
            module.ReplicaElectionResult,
            topic=name,
            partition_result=tuple(
                make(
                    module.PartitionResult,
                    partition_id=index,
                    error_code=code,
                    error_message=message,
                )
                for index, code, message in partitions
            ),
        )
        for name, partitions in results
    ]


async def _forwarded_elections(
    services: AdminPartitionsServices, controller_id: int, request: Any, kind: ElectionType
) -> list[tuple[str, list[tuple[int, int, str | None]]]]:
    """The controller's answer to the election request, forwarded to it."""
    answer = await _forward(
        services,
        controller_id,
        ApiKey.ELECT_LEADERS,
        {
            "election_type": int(kind),
            "topic_partitions": None
            if request.topic_partitions is None
            else tuple(
                {"topic": t.topic, "partitions": tuple(t.partitions)}
                for t in request.topic_partitions
            ),
            "timeout": getattr(request, "timeout", 30_000),
        },
    )
    if answer is None or answer.error_code != ErrorCode.none:
        code, message = _NOT_CONTROLLER if answer is None else (ErrorCode(answer.error_code), None)
        return [
            (t.topic, [(int(i), code, message) for i in t.partitions])
            for t in request.topic_partitions or ()
        ]
    return [
        (
            result.topic,
            [
                (int(p.partition_id), ErrorCode(p.error_code), p.error_message)
                for p in result.partition_result
            ],
        )
        for result in answer.replica_election_results
    ]


async def handle_elect_leaders(
    services: AdminPartitionsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    try:
        services.authorizer.require(context, CLUSTER_ALTER)
        kind = (
            leadership.election_type(int(request.election_type))
            if has_field(type(request), "election_type")
            else ElectionType.PREFERRED
        )
    except KafkaError as refused:
        # Kafka's ElectLeadersRequest.getErrorResponse: the error at the top and on every
        # partition asked for.
        return make(
            module.ElectLeadersResponse,
            throttle_time=0,
            error_code=refused.code,
            replica_election_results=tuple(
                make(
                    module.ReplicaElectionResult,
                    topic=requested.topic,
                    partition_result=tuple(
                        make(
                            module.PartitionResult,
                            partition_id=index,
                            error_code=refused.code,
                            error_message=refused.message,
                        )
                        for index in requested.partitions
                    ),
                )
                for requested in request.topic_partitions or ()
            ),
        )
    return make(
        module.ElectLeadersResponse,
        throttle_time=0,
        error_code=ErrorCode.none,
        replica_election_results=tuple(await _election_results(module, services, request, kind)),
    )


# ── AlterPartitionReassignments ────────────────────────────────────────────────────────


def _reassignment(
    topic: str, index: int, target: Any, *, allow_replication_factor_change: bool
) -> PartitionDecision:
    wanted = None if target is None else tuple(int(r) for r in target)

    def decide(current: PartitionState, image: MetadataImage) -> PartitionState | None:
        return leadership.reassigned(
            wanted,
            current,
            image.brokers.keys(),
            allow_replication_factor_change=allow_replication_factor_change,
        )

    return PartitionDecision(topic, index, decide)


async def _reassignment_results(
    services: AdminPartitionsServices, request: Any, allow_replication_factor_change: bool
) -> list[tuple[str, list[tuple[int, int, str | None]]]]:
    controller_id = _controller_elsewhere(services)
    if controller_id is not None:
        answer = await _forward(
            services,
            controller_id,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS,
            {
                "timeout": getattr(request, "timeout", 30_000),
                "allow_replication_factor_change": allow_replication_factor_change,
                "topics": tuple(
                    {
                        "name": t.name,
                        "partitions": tuple(
                            {"partition_index": p.partition_index, "replicas": p.replicas}
                            for p in t.partitions
                        ),
                    }
                    for t in request.topics
                ),
            },
        )
        if answer is None or answer.error_code != ErrorCode.none:
            code, message = (
                _NOT_CONTROLLER
                if answer is None
                else (ErrorCode(answer.error_code), answer.error_message)
            )
            return [
                (t.name, [(int(p.partition_index), code, message) for p in t.partitions])
                for t in request.topics
            ]
        return [
            (
                t.name,
                [
                    (int(p.partition_index), ErrorCode(p.error_code), p.error_message)
                    for p in t.partitions
                ],
            )
            for t in answer.responses
        ]
    results = []
    for topic in request.topics:
        name = topic.name
        results.append(
            (
                name,
                await _decide_known(
                    services,
                    name,
                    [
                        (
                            int(p.partition_index),
                            functools.partial(
                                _reassignment,
                                name,
                                int(p.partition_index),
                                p.replicas,
                                allow_replication_factor_change=allow_replication_factor_change,
                            ),
                        )
                        for p in topic.partitions
                    ],
                ),
            )
        )
    return results


async def handle_alter_partition_reassignments(
    services: AdminPartitionsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    allow_replication_factor_change = bool(
        getattr(request, "allow_replication_factor_change", True)
    )
    if not services.authorizer.allows(context, CLUSTER_ALTER):
        return make(
            module.AlterPartitionReassignmentsResponse,
            throttle_time=0,
            allow_replication_factor_change=allow_replication_factor_change,
            error_code=CLUSTER_ALTER.error_code,
            error_message=None,
            responses=(),
        )
    results = await _reassignment_results(services, request, allow_replication_factor_change)
    return make(
        module.AlterPartitionReassignmentsResponse,
        throttle_time=0,
        allow_replication_factor_change=allow_replication_factor_change,
        error_code=ErrorCode.none,
        error_message=None,
        responses=tuple(
            make(
                module.ReassignableTopicResponse,
                name=name,
                partitions=tuple(
                    make(
                        module.ReassignablePartitionResponse,
                        partition_index=index,
                        error_code=code,
                        error_message=message,
                    )
                    for index, code, message in partitions
                ),
            )
            for name, partitions in results
        ),
    )


# ── ListPartitionReassignments ─────────────────────────────────────────────────────────


async def handle_list_partition_reassignments(
    services: AdminPartitionsServices, context: RequestContext, request: Any
) -> Any:
    """The reassignments in progress: of every topic, or of the named partitions
    (unknown ones are left out, as Kafka leaves them out)."""
    module = response_module(context.header.api_key, context.header.api_version)
    if not services.authorizer.allows(context, CLUSTER_DESCRIBE):
        return make(
            module.ListPartitionReassignmentsResponse,
            throttle_time=0,
            error_code=CLUSTER_DESCRIBE.error_code,
            error_message=None,
            topics=(),
        )
    image = services.topics.image
    wanted: dict[str, set[int] | None]
    if request.topics is None:
        wanted = dict.fromkeys(image.topics)
    else:
        wanted = {}
        for named in request.topics:
            indexes = wanted.setdefault(named.name, set())
            assert indexes is not None
            indexes.update(int(i) for i in named.partition_indexes)
    topics = []
    for name, indexes in sorted(wanted.items()):
        topic = image.topics.get(name)
        if topic is None:
            continue
        ongoing = [
            make(
                module.OngoingPartitionReassignment,
                partition_index=index,
                replicas=state.replicas,
                adding_replicas=state.adding_replicas,
                removing_replicas=state.removing_replicas,
            )
            for index, state in sorted(topic.partitions.items())
            if state.reassigning and (indexes is None or index in indexes)
        ]
        if ongoing:
            topics.append(
                make(module.OngoingTopicReassignment, name=name, partitions=tuple(ongoing))
            )
    return make(
        module.ListPartitionReassignmentsResponse,
        throttle_time=0,
        error_code=ErrorCode.none,
        error_message=None,
        topics=tuple(topics),
    )
