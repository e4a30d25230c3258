"""The Produce response (v3–13), built straight from kio's classes of the request's version.

The handler settles each partition as a :class:`PartitionOutcome`; :func:`produce_response`
turns them into the kio ``ProduceResponse`` of the version asked for. What a version's
schema has (topic names or ids, ``log_start_offset``, ``record_errors`` and
``error_message``, the current leader and node endpoints of KIP-951) is read from kio's
classes once per version and cached, and each field is given the type kio holds
(``ErrorCode``, a datetime or None for the append time, a timedelta for the throttle
time), so answering a request runs no schema lookup and no per-field conversion::

    outcomes ──▶ PartitionProduceResponse per partition ──▶ TopicProduceResponse per topic
                                                        ──▶ ProduceResponse (+ node endpoints)
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.protocol.messages import response_module
from sluice.protocol.versions import ApiKey

if TYPE_CHECKING:
    from sluice.broker.replication.partition import Partition
    from sluice.cluster.model import BrokerInfo

__all__ = ["PartitionOutcome", "produce_response"]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_NO_THROTTLE = datetime.timedelta(0)


@dataclass(slots=True)
class PartitionOutcome:
    """How one partition of a Produce request was answered."""

    index: int
    error_code: ErrorCode = ErrorCode.none
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: list[tuple[int, str]] = field(default_factory=list)
    """(batch index, reason) of records refused one by one (Produce v8+)."""
    replication: tuple[Partition, int, int] | None = None
    """For acks=all: the partition, the high watermark it must reach, and the leader
    epoch of the append (``Partition.acks_all_outcome``)."""
    current_leader: tuple[int, int] | None = None
    """(leader id, epoch) for a NOT_LEADER_OR_FOLLOWER answer (v10+, KIP-951)."""


@dataclass(frozen=True, slots=True)
class _Schema:
    """kio's Produce response classes of one version, and which fields they have."""

    response: Any
    topic: Any
    partition: Any
    record_error: Any | None
    """``BatchIndexAndErrorMessage`` (v8+: ``record_errors`` and ``error_message``)."""
    leader: Any | None
    """``LeaderIdAndEpoch`` (v10+: ``current_leader``)."""
    node_endpoint: Any | None
    """``NodeEndpoint`` (v10+: ``node_endpoints``)."""
    log_start_offset: bool
    topic_by_id: bool


def _field_names(cls: type[Any]) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


@functools.cache
def _schema(version: int) -> _Schema:
    module = response_module(ApiKey.PRODUCE, version)
    partition_fields = _field_names(module.PartitionProduceResponse)
    return _Schema(
        response=module.ProduceResponse,
        topic=module.TopicProduceResponse,
        partition=module.PartitionProduceResponse,
        record_error=module.BatchIndexAndErrorMessage
        if "record_errors" in partition_fields
        else None,
        leader=module.LeaderIdAndEpoch if "current_leader" in partition_fields else None,
        node_endpoint=module.NodeEndpoint
        if "node_endpoints" in _field_names(module.ProduceResponse)
        else None,
        log_start_offset="log_start_offset" in partition_fields,
        topic_by_id="topic_id" in _field_names(module.TopicProduceResponse),
    )


def _partition_response(schema: _Schema, outcome: PartitionOutcome) -> Any:
    """One partition's answer. Written out per shape, not with a dict of fields: this
    runs for every partition of every Produce."""
    ms = outcome.log_append_time_ms
    append_time = None if ms < 0 else _EPOCH + datetime.timedelta(milliseconds=ms)
    record_error = schema.record_error
    if record_error is None:  # v3-7
        if schema.log_start_offset:
            return schema.partition(
                index=outcome.index,
                error_code=outcome.error_code,
                base_offset=outcome.base_offset,
                log_append_time=append_time,
                log_start_offset=outcome.log_start_offset,
            )
        return schema.partition(
            index=outcome.index,
            error_code=outcome.error_code,
            base_offset=outcome.base_offset,
            log_append_time=append_time,
        )
    record_errors = (
        tuple(
            [
                record_error(batch_index=index, batch_index_error_message=why)
                for index, why in outcome.record_errors
            ]
        )
        if outcome.record_errors
        else ()
    )
    leader: dict[str, Any] = {}
    if schema.leader is not None and outcome.current_leader is not None:
        leader_id, leader_epoch = outcome.current_leader
        leader["current_leader"] = schema.leader(leader_id=leader_id, leader_epoch=leader_epoch)
    return schema.partition(
        index=outcome.index,
        error_code=outcome.error_code,
        base_offset=outcome.base_offset,
        log_append_time=append_time,
        log_start_offset=outcome.log_start_offset,
        record_errors=record_errors,
        error_message=outcome.error_message,
        **leader,
    )


def produce_response(
    version: int,
    answers: Mapping[str | uuid.UUID, Sequence[TopicPartition | PartitionOutcome]],
    outcomes: Mapping[TopicPartition, PartitionOutcome],
    leaders: Iterable[BrokerInfo],
    listener_name: str,
) -> Any:
    """The ``ProduceResponse`` of ``version``: per topic key of the request (its name, or
    its id from v13), each partition's outcome (an item of ``answers`` is the partition
    whose outcome is in ``outcomes``, or the outcome itself); ``leaders``: the brokers
    named as current leaders, listed with their endpoints on ``listener_name`` (v10+)."""
    schema = _schema(version)
    topic = schema.topic
    topics = []
    for key, items in answers.items():
        partitions = tuple(
            [
                _partition_response(
                    schema, outcomes[item] if isinstance(item, TopicPartition) else item
                )
                for item in items
            ]
        )
        if schema.topic_by_id:
            topics.append(topic(topic_id=key, partition_responses=partitions))
        else:
            topics.append(topic(name=key, partition_responses=partitions))
    node_endpoint = schema.node_endpoint
    if node_endpoint is None:
        return schema.response(responses=tuple(topics), throttle_time=_NO_THROTTLE)
    endpoints = []
    for broker in leaders:
        host, port = broker.address(listener_name)
        endpoints.append(
            node_endpoint(node_id=broker.node_id, host=host, port=port, rack=broker.rack)
        )
    return schema.response(
        responses=tuple(topics), throttle_time=_NO_THROTTLE, node_endpoints=tuple(endpoints)
    )
