"""CreateTopics v2-4, DeleteTopics v1-3, CreatePartitions v0-1: topic administration.

Each topic in a request succeeds or fails on its own, with an error code and (where the
version has one) a message. The work is done by :class:`~sluice.broker.topics.TopicManager`
through the metadata store, synchronously, so the request's ``timeout`` never runs out:
when the response is sent the change is already in the store and applied to the local
replicas.

Not supported, refused with INVALID_REQUEST: manual replica assignments (CreateTopics
``assignments``, CreatePartitions ``assignments``). A name given twice in one request is
refused for that name, as Kafka does, since the two entries could disagree.

Internal topics (``__consumer_offsets``…) cannot be deleted or given more partitions:
groups are placed by hashing onto ``__consumer_offsets``' partitions, so either would
lose committed offsets. Kafka's own tools refuse both (``kafka-topics``: "is a kafka
internal topic and is not allowed to be marked for deletion", "the number of partitions
for the internal topic … cannot be changed") but its broker relies on ACLs; Sluice has no
ACLs, so its broker refuses them, with INVALID_TOPIC_EXCEPTION, the code Kafka's broker
gives the internal-topic operations it does refuse (produce, DeleteRecords).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from sluice.broker.dispatcher import handler
from sluice.broker.topics import is_internal_topic
from sluice.common import errors
from sluice.common.errors import KafkaError
from sluice.protocol.codec import RequestHeader
from sluice.protocol.messages import make, response_module
from sluice.protocol.versions import ApiKey

if TYPE_CHECKING:
    from sluice.broker.app import Broker


T = TypeVar("T")


def _per_topic(
    items: Iterable[T], name_of: Callable[[T], str], action: Callable[[T], None]
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
            action(item)
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


def _create_one(broker: Broker, topic: Any, validate_only: bool) -> None:
    if topic.assignments:
        raise errors.InvalidRequest(
            "manual replica assignment is not supported; give num_partitions and "
            "replication_factor instead"
        )
    broker.topics.create(
        topic.name,
        int(topic.num_partitions),
        int(topic.replication_factor),
        _configs_of(topic),
        validate_only=validate_only,
    )


@handler(ApiKey.CREATE_TOPICS)
async def handle_create_topics(broker: Broker, header: RequestHeader, request: Any) -> Any:
    module = response_module(header.api_key, header.api_version)
    validate_only = bool(request.validate_only)
    outcomes = _per_topic(
        request.topics, lambda t: str(t.name), lambda t: _create_one(broker, t, validate_only)
    )
    results = tuple(_result(module.CreatableTopicResult, n, f) for n, f in outcomes)
    return make(module.CreateTopicsResponse, throttle_time=0, topics=results)


def _delete_one(broker: Broker, name: str) -> None:
    if is_internal_topic(name):
        raise errors.InvalidTopicException(
            f"topic {name} is an internal topic and cannot be deleted"
        )
    broker.topics.delete(name)


@handler(ApiKey.DELETE_TOPICS)
async def handle_delete_topics(broker: Broker, header: RequestHeader, request: Any) -> Any:
    module = response_module(header.api_key, header.api_version)
    outcomes = _per_topic(request.topic_names, str, lambda name: _delete_one(broker, name))
    results = tuple(
        make(module.DeletableTopicResult, name=name, error_code=0 if f is None else f.code)
        for name, f in outcomes
    )
    return make(module.DeleteTopicsResponse, throttle_time=0, responses=results)


def _add_partitions(broker: Broker, topic: Any, validate_only: bool) -> None:
    if is_internal_topic(topic.name):
        raise errors.InvalidTopicException(
            f"the number of partitions of internal topic {topic.name} cannot be changed"
        )
    if topic.assignments is not None:
        raise errors.InvalidRequest(
            "manual replica assignment is not supported; leave assignments null"
        )
    broker.topics.add_partitions(topic.name, int(topic.count), validate_only=validate_only)


@handler(ApiKey.CREATE_PARTITIONS)
async def handle_create_partitions(broker: Broker, header: RequestHeader, request: Any) -> Any:
    module = response_module(header.api_key, header.api_version)
    validate_only = bool(request.validate_only)
    outcomes = _per_topic(
        request.topics, lambda t: str(t.name), lambda t: _add_partitions(broker, t, validate_only)
    )
    results = tuple(_result(module.CreatePartitionsTopicResult, n, f) for n, f in outcomes)
    return make(module.CreatePartitionsResponse, throttle_time=0, results=results)
