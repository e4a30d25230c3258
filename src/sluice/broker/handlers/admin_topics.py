"""CreateTopics v2-4, DeleteTopics v1-3, CreatePartitions v0-1: topic administration.

Each topic in a request succeeds or fails on its own, with an error code and (where the
version has one) a message. The work is done by :class:`~sluice.broker.topics.TopicManager`
through the metadata store, synchronously, so the request's ``timeout`` never runs out:
when the response is sent the change is already in the store and applied to the local
replicas.

Not supported, refused with INVALID_REQUEST: manual replica assignments (CreateTopics
``assignments``, CreatePartitions ``assignments``). A name given twice in one request is
refused for that name, as Kafka does, since the two entries could disagree.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sluice.broker.dispatcher import handler
from sluice.common import errors
from sluice.common.errors import KafkaError
from sluice.protocol.codec import RequestHeader
from sluice.protocol.messages import make, response_module
from sluice.protocol.versions import ApiKey

if TYPE_CHECKING:
    from types import ModuleType

    from sluice.broker.app import Broker


def _duplicates(names: Iterable[str]) -> set[str]:
    return {name for name, count in Counter(names).items() if count > 1}


def _duplicate_error(name: str) -> KafkaError:
    return errors.InvalidRequest(f"topic {name!r} appears more than once in the request")


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


def _create_result(module: ModuleType, name: str, failure: KafkaError | None) -> Any:
    return make(
        module.CreatableTopicResult,
        name=name,
        error_code=0 if failure is None else failure.code,
        error_message=None if failure is None else failure.message,
    )


@handler(ApiKey.CREATE_TOPICS)
async def handle_create_topics(broker: Broker, header: RequestHeader, request: Any) -> Any:
    module = response_module(header.api_key, header.api_version)
    duplicates = _duplicates(t.name for t in request.topics)
    answered: set[str] = set()
    results = []
    for topic in request.topics:
        if topic.name in answered:
            continue
        answered.add(topic.name)
        failure: KafkaError | None = None
        try:
            if topic.name in duplicates:
                raise _duplicate_error(topic.name)
            _create_one(broker, topic, bool(request.validate_only))
        except KafkaError as e:
            failure = e
        results.append(_create_result(module, topic.name, failure))
    return make(module.CreateTopicsResponse, throttle_time=0, topics=tuple(results))


@handler(ApiKey.DELETE_TOPICS)
async def handle_delete_topics(broker: Broker, header: RequestHeader, request: Any) -> Any:
    module = response_module(header.api_key, header.api_version)
    duplicates = _duplicates(request.topic_names)
    answered: set[str] = set()
    results = []
    for name in request.topic_names:
        if name in answered:
            continue
        answered.add(name)
        error_code = 0
        try:
            if name in duplicates:
                raise _duplicate_error(name)
            broker.topics.delete(name)
        except KafkaError as e:
            error_code = e.code
        results.append(make(module.DeletableTopicResult, name=name, error_code=error_code))
    return make(module.DeleteTopicsResponse, throttle_time=0, responses=tuple(results))


@handler(ApiKey.CREATE_PARTITIONS)
async def handle_create_partitions(broker: Broker, header: RequestHeader, request: Any) -> Any:
    module = response_module(header.api_key, header.api_version)
    duplicates = _duplicates(t.name for t in request.topics)
    answered: set[str] = set()
    results = []
    for topic in request.topics:
        if topic.name in answered:
            continue
        answered.add(topic.name)
        failure: KafkaError | None = None
        try:
            if topic.name in duplicates:
                raise _duplicate_error(topic.name)
            if topic.assignments is not None:
                raise errors.InvalidRequest(
                    "manual replica assignment is not supported; leave assignments null"
                )
            broker.topics.add_partitions(
                topic.name, int(topic.count), validate_only=bool(request.validate_only)
            )
        except KafkaError as e:
            failure = e
        results.append(
            make(
                module.CreatePartitionsTopicResult,
                name=topic.name,
                error_code=0 if failure is None else failure.code,
                error_message=None if failure is None else failure.message,
            )
        )
    return make(module.CreatePartitionsResponse, throttle_time=0, results=tuple(results))
