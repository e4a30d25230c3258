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

The requests' ``timeout`` is not waited on: every decision here is made and stored
before the answer.

With the authorizer on, ElectLeaders and AlterPartitionReassignments need ALTER and
ListPartitionReassignments DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import CLUSTER_ALTER, CLUSTER_DESCRIBE
from sluice.broker.services import UsesAuthorizer, UsesTopics
from sluice.cluster import leadership
from sluice.cluster.leadership import ElectionOutcome, ElectionType
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.protocol.messages import has_field, make, response_module

if TYPE_CHECKING:
    from types import ModuleType

    from sluice.broker.context import RequestContext
    from sluice.cluster.image import MetadataImage
    from sluice.cluster.model import PartitionState


class AdminPartitionsServices(UsesAuthorizer, UsesTopics, Protocol):
    """What the admin partitions handlers use of the broker."""


def _unknown_partition(
    services: AdminPartitionsServices, topic: str, index: int
) -> KafkaError | None:
    metadata = services.topics.get(topic)
    if metadata is None:
        return errors.UnknownTopicOrPartition(f"No such topic as {topic}")
    if index not in metadata.partitions:
        return errors.UnknownTopicOrPartition(f"No such partition as {topic}-{index}")
    return None


# ── ElectLeaders ───────────────────────────────────────────────────────────────────────


async def _elect(
    services: AdminPartitionsServices, topic: str, index: int, kind: ElectionType
) -> tuple[int, str | None]:
    unknown = _unknown_partition(services, topic, index)
    if unknown is not None:
        return unknown.code, unknown.message
    outcomes: list[ElectionOutcome] = []

    def decide(state: PartitionState, image: MetadataImage) -> PartitionState | None:
        outcome = leadership.elect(state, kind, image.brokers.keys())
        outcomes.append(outcome)
        return outcome.state

    try:
        await services.topics.change_partition(topic, index, decide)
    except KafkaError as e:
        return e.code, e.message
    return outcomes[-1].error_code, outcomes[-1].error_message


async def _election_results(
    module: ModuleType, services: AdminPartitionsServices, request: Any, kind: ElectionType
) -> list[Any]:
    results = []
    if request.topic_partitions is None:
        for name, topic in sorted(services.topics.all().items()):
            partitions = []
            for index in sorted(topic.partitions):
                code, message = await _elect(services, name, index, kind)
                if code != ErrorCode.election_not_needed:
                    partitions.append((index, code, message))
            results.append((name, partitions))
    else:
        for requested in request.topic_partitions:
            results.append(
                (
                    requested.topic,
                    [
                        (int(index), *await _elect(services, requested.topic, int(index), kind))
                        for index in requested.partitions
                    ],
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


async def _reassign(
    services: AdminPartitionsServices,
    topic: str,
    index: int,
    target: Any,
    allow_replication_factor_change: bool,
) -> None:
    metadata = services.topics.get(topic)
    if metadata is None:
        raise errors.UnknownTopicOrPartition(f"Unable to find a topic named {topic}.")
    state = metadata.partitions.get(index)
    if state is None:
        raise errors.UnknownTopicOrPartition(f"Unable to find partition {topic}:{index}.")
    wanted = None if target is None else tuple(int(r) for r in target)

    def decide(current: PartitionState, image: MetadataImage) -> PartitionState | None:
        return leadership.reassigned(
            wanted,
            current,
            image.brokers.keys(),
            allow_replication_factor_change=allow_replication_factor_change,
        )

    await services.topics.change_partition(topic, index, decide)


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
    responses = []
    for topic in request.topics:
        partitions = []
        for partition in topic.partitions:
            index = int(partition.partition_index)
            code, message = ErrorCode.none, None
            try:
                await _reassign(
                    services, topic.name, index, partition.replicas, allow_replication_factor_change
                )
            except KafkaError as e:
                code, message = e.code, e.message
            partitions.append(
                make(
                    module.ReassignablePartitionResponse,
                    partition_index=index,
                    error_code=code,
                    error_message=message,
                )
            )
        responses.append(
            make(module.ReassignableTopicResponse, name=topic.name, partitions=tuple(partitions))
        )
    return make(
        module.AlterPartitionReassignmentsResponse,
        throttle_time=0,
        allow_replication_factor_change=allow_replication_factor_change,
        error_code=ErrorCode.none,
        error_message=None,
        responses=tuple(responses),
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
