"""CreateTopics v2-7, DeleteTopics v1-6, CreatePartitions v0-3: topic administration.

From CreateTopics v5 a created (or, with ``validate_only``, checked) topic is answered
with its partition count, replication factor and every topic config with its effective
value and source, as DescribeConfigs would list them (KIP-525); from v7 with its id.
DeleteTopics v6 names each topic by name or by id (not both); an unknown id is answered
with UNKNOWN_TOPIC_ID, and each answer carries both the name and the id.

Each topic in a request succeeds or fails on its own, with an error code and (where the
version has one) a message. The work is done by :class:`~sluice.broker.topics.TopicManager`
through the metadata store (topic creation in batches, off the event loop); the
response waits for it, so when it is sent the change is already in the store and
applied to the local replicas. A disk that cannot take the change answers
KAFKA_STORAGE_ERROR for the topics concerned.

Manual replica assignments (CreateTopics and CreatePartitions ``assignments``) are
checked and stored as given (see :mod:`sluice.cluster.controller`): a bad one is refused
with INVALID_REPLICA_ASSIGNMENT, and CreateTopics with both an assignment and a partition
count or replication factor other than -1 with INVALID_REQUEST, as in Kafka. A name given
twice in one request is refused for that name, as Kafka does, since the two entries could
disagree.

Internal topics (``__consumer_offsets``…) cannot be deleted or given more partitions:
groups are placed by hashing onto ``__consumer_offsets``' partitions, so either would
lose committed offsets. Kafka's own tools refuse both (``kafka-topics``: "is a kafka
internal topic and is not allowed to be marked for deletion", "the number of partitions
for the internal topic … cannot be changed") but its broker relies on ACLs; Sluice's
broker refuses them whatever the ACLs, with INVALID_TOPIC_EXCEPTION, the code Kafka's
broker gives the internal-topic operations it does refuse (produce, DeleteRecords).

With the authorizer on (:mod:`sluice.broker.handlers.acl_rules`): creating a topic needs
CREATE on the cluster or the topic, and its configs are returned only with
DESCRIBE_CONFIGS on it; deleting needs DELETE (a topic named by an id the principal may
not DESCRIBE is answered UNKNOWN_TOPIC_ID, so ids do not reveal topics); adding
partitions needs ALTER. Refused topics are answered TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sluice.broker.handlers.acl_rules import (
    CLUSTER_CREATE,
    TOPIC_ALTER,
    TOPIC_CREATE,
    TOPIC_DELETE,
    TOPIC_DESCRIBE,
    TOPIC_DESCRIBE_CONFIGS,
)
from sluice.broker.handlers.admin_configs import describe_topic_configs
from sluice.broker.services import UsesAuthorizer, UsesConfig, UsesTopics
from sluice.broker.topics import is_internal_topic
from sluice.cluster.model import ZERO_TOPIC_ID, TopicMetadata
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.protocol.messages import has_field, make, response_module

if TYPE_CHECKING:
    from types import ModuleType

    from sluice.broker.context import RequestContext


class AdminTopicsServices(UsesAuthorizer, UsesConfig, UsesTopics, Protocol):
    """What the admin topics handlers use of the broker."""


TopicAuthorizationFailed = errors.for_code(ErrorCode.topic_authorization_failed)
UnknownTopicId = errors.for_code(ErrorCode.unknown_topic_id)


T = TypeVar("T")


async def _per_topic(
    items: Iterable[T], name_of: Callable[[T], str], action: Callable[[T], Awaitable[None]]
) -> list[tuple[str, KafkaError | None]]:
    """Run ``action`` once per distinct topic name, in request order, and return each
    name with its failure (None for success). A name given twice is answered once, with
    INVALID_REQUEST, and not acted on: its two entries could disagree."""
    items = list(items)
    duplicates = {name for name, count in Counter(map(name_of, items)).items() if count > 1}
    outcomes: dict[str, KafkaError | None] = {}
    for item in items:
        name = name_of(item)
        if name in outcomes:
            continue
        try:
            if name in duplicates:
                raise errors.InvalidRequest(f"topic {name!r} appears more than once in the request")
            await action(item)
            outcomes[name] = None
        except KafkaError as e:
            outcomes[name] = e
    return list(outcomes.items())


def _result(cls: type[Any], name: str, failure: KafkaError | None) -> Any:
    return make(
        cls,
        name=name,
        error_code=0 if failure is None else failure.code,
        error_message=None if failure is None else failure.message,
    )


def _configs_of(topic: Any) -> dict[str, str | None]:
    configs: dict[str, str | None] = {}
    for entry in topic.configs:
        if entry.name in configs:
            raise errors.InvalidRequest(f"config {entry.name!r} is given more than once")
        configs[entry.name] = entry.value
    return configs


def _assignments_of(topic: Any) -> list[tuple[int, list[int]]]:
    return [(int(a.partition_index), [int(b) for b in a.broker_ids]) for a in topic.assignments]


def _create_one(
    services: AdminTopicsServices,
    topic: Any,
    validate_only: bool,
    checked: dict[str, TopicMetadata],
    pending: dict[str, asyncio.Future[TopicMetadata]],
) -> None:
    """Check one topic now; create it in the background (``pending``) unless
    ``validate_only``, when the topic as it would be is kept in ``checked``."""
    arguments = (
        str(topic.name),
        int(topic.num_partitions),
        int(topic.replication_factor),
        _configs_of(topic),
    )
    if validate_only:
        checked[topic.name] = services.topics.validate_create(
            *arguments, assignments=_assignments_of(topic)
        )
        return
    creation = services.topics.begin_create(*arguments, assignments=_assignments_of(topic))
    assert creation is not None
    pending[topic.name] = creation


def _created_topic_result(
    module: ModuleType,
    services: AdminTopicsServices,
    name: str,
    topic: TopicMetadata | None,
    failure: Any,
    validate_only: bool,
    configs_allowed: bool = True,
) -> Any:
    """One CreateTopics answer; v5+ describe the topic, v7+ name its id (the zero id
    with ``validate_only``: no topic was made). Without DESCRIBE_CONFIGS on the topic its
    configs are left out and ``topic_config_error_code`` says why, as in Kafka."""
    result_class = module.CreatableTopicResult
    outcome = {
        "name": name,
        "error_code": 0 if failure is None else failure.code,
        "error_message": None if failure is None else failure.message,
    }
    if not has_field(result_class, "configs"):
        return make(result_class, **outcome)
    if topic is None:
        return make(result_class, **outcome, configs=(), topic_id=ZERO_TOPIC_ID)
    if not configs_allowed:
        return make(
            result_class,
            **outcome,
            topic_id=ZERO_TOPIC_ID if validate_only else topic.topic_id,
            num_partitions=topic.partition_count,
            replication_factor=len(topic.partitions[0].replicas),
            configs=(),
            topic_config_error_code=TOPIC_DESCRIBE_CONFIGS.error_code,
        )
    configs = tuple(
        make(
            module.CreatableTopicConfigs,
            name=entry.name,
            value=entry.value,
            read_only=entry.read_only,
            config_source=int(entry.source),
            is_sensitive=entry.sensitive,
        )
        for entry in describe_topic_configs(topic.configs, services.config)
    )
    return make(
        result_class,
        **outcome,
        topic_id=ZERO_TOPIC_ID if validate_only else topic.topic_id,
        num_partitions=topic.partition_count,
        replication_factor=len(topic.partitions[0].replicas),
        configs=configs,
    )


async def handle_create_topics(
    services: AdminTopicsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    validate_only = bool(request.validate_only)
    created: dict[str, TopicMetadata] = {}
    pending: dict[str, asyncio.Future[TopicMetadata]] = {}
    authorizer = services.authorizer
    may_create_any = authorizer.allows(context, CLUSTER_CREATE)

    async def create(topic: Any) -> None:
        if not may_create_any and not authorizer.allows(context, TOPIC_CREATE, str(topic.name)):
            raise TopicAuthorizationFailed(f"may not create topic {topic.name!r}")
        _create_one(services, topic, validate_only, created, pending)

    outcomes = await _per_topic(request.topics, lambda t: str(t.name), create)
    # The topics are created together off the event loop; each answers once durable.
    failures: dict[str, KafkaError] = {}
    for name, creation in pending.items():
        try:
            created[name] = await asyncio.shield(creation)
        except KafkaError as e:
            failures[name] = e
    outcomes = [(n, failures.get(n, f)) for n, f in outcomes]
    results = tuple(
        _created_topic_result(
            module,
            services,
            name,
            created.get(name),
            failure,
            validate_only,
            authorizer.allows(context, TOPIC_DESCRIBE_CONFIGS, name),
        )
        for name, failure in outcomes
    )
    return make(module.CreateTopicsResponse, throttle_time=0, topics=results)


def _refuse_internal(name: str, what: str) -> None:
    if is_internal_topic(name):
        raise errors.InvalidTopicException(f"topic {name} is an internal topic and {what}")


def _topic_key(name: str | None, topic_id: uuid.UUID | None) -> str:
    return str(topic_id) if topic_id is not None else (name or "")


async def handle_delete_topics(
    services: AdminTopicsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    wanted: list[tuple[str | None, uuid.UUID | None]]
    if has_field(type(request), "topics"):  # v6+: by name or by id
        wanted = [
            (t.name, None if t.topic_id in (None, ZERO_TOPIC_ID) else t.topic_id)
            for t in request.topics
        ]
    else:
        wanted = [(name, None) for name in request.topic_names]
    deleted: dict[str, TopicMetadata] = {}

    async def delete(entry: tuple[str | None, uuid.UUID | None]) -> None:
        name, topic_id = entry
        if topic_id is not None:
            if name is not None:
                raise errors.InvalidRequest("give a topic's name or its id, not both")
            topic = services.topics.by_id(topic_id)
            if topic is None or not services.authorizer.allows(context, TOPIC_DESCRIBE, topic.name):
                raise UnknownTopicId(f"no topic has id {topic_id}")
            if not services.authorizer.allows(context, TOPIC_DELETE, topic.name):
                raise TopicAuthorizationFailed(f"may not delete topic {topic.name!r}")
        elif name is None:
            raise errors.InvalidRequest("a topic to delete needs a name or an id")
        else:
            if not services.authorizer.allows(context, TOPIC_DELETE, name):
                raise TopicAuthorizationFailed(f"may not delete topic {name!r}")
            topic = services.topics.require(name)
        _refuse_internal(topic.name, "cannot be deleted")
        await services.topics.delete(topic.name)
        deleted[_topic_key(name, topic_id)] = topic

    outcomes = await _per_topic(wanted, lambda entry: _topic_key(*entry), delete)
    requested = {_topic_key(*entry): entry for entry in wanted}
    results = []
    for key, failure in outcomes:
        name, topic_id = requested[key]
        topic = deleted.get(key)
        results.append(
            make(
                module.DeletableTopicResult,
                name=topic.name if topic is not None else name,
                topic_id=topic.topic_id if topic is not None else topic_id,
                error_code=0 if failure is None else failure.code,
                error_message=None if failure is None else failure.message,
            )
        )
    return make(module.DeleteTopicsResponse, throttle_time=0, responses=tuple(results))


async def _add_partitions(services: AdminTopicsServices, topic: Any, validate_only: bool) -> None:
    _refuse_internal(topic.name, "the number of its partitions cannot be changed")
    assignments = (
        None
        if topic.assignments is None
        else [[int(b) for b in a.broker_ids] for a in topic.assignments]
    )
    await services.topics.add_partitions(
        topic.name, int(topic.count), validate_only=validate_only, assignments=assignments
    )


async def handle_create_partitions(
    services: AdminTopicsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    validate_only = bool(request.validate_only)

    async def add(topic: Any) -> None:
        if not services.authorizer.allows(context, TOPIC_ALTER, str(topic.name)):
            raise TopicAuthorizationFailed(f"may not add partitions to topic {topic.name!r}")
        await _add_partitions(services, topic, validate_only)

    outcomes = await _per_topic(request.topics, lambda t: str(t.name), add)
    results = tuple(_result(module.CreatePartitionsTopicResult, n, f) for n, f in outcomes)
    return make(module.CreatePartitionsResponse, throttle_time=0, results=results)
