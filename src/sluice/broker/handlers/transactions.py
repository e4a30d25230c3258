"""Transaction APIs: InitProducerId with a transactional id, AddPartitionsToTxn v0–5,
AddOffsetsToTxn v0–4, EndTxn v0–5, TxnOffsetCommit v0–5, WriteTxnMarkers v1 (v0 is gone
since Kafka 4.0), DescribeTransactions v0, ListTransactions v0–1 (the ranges are in
``protocol.versions``).

These translate between the wire messages and the transaction coordinator's plain
requests (:mod:`sluice.txn.api`); the coordinator (``services.transactions``, a
:class:`~sluice.txn.runtime.TransactionCoordinatorRuntime`) does the work, and the
group coordinator keeps TxnOffsetCommit's offsets. A transactional id's coordinator is
the leader of its ``__transaction_state`` partition; a broker that is not answers
NOT_COORDINATOR and clients look it up again.

Versions from before KIP-588 do not know PRODUCER_FENCED: they are told
INVALID_PRODUCER_EPOCH, which they treat the same way. Transaction version 2 (KIP-890
part 2): EndTxn v5 bumps the producer epoch at every commit and abort and returns the
new one; TxnOffsetCommit v5 adds its partition to the transaction itself.

With the authorizer on (:mod:`sluice.broker.handlers.acl_rules`): AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn and TxnOffsetCommit need WRITE on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), AddPartitionsToTxn WRITE on each topic,
AddOffsetsToTxn and TxnOffsetCommit READ on the group and TxnOffsetCommit READ on each
topic; the brokers' requests (AddPartitionsToTxn v4, WriteTxnMarkers) need CLUSTER_ACTION
(CLUSTER_AUTHORIZATION_FAILED); DescribeTransactions and ListTransactions show only the
transactional ids the principal may DESCRIBE.
"""

from __future__ import annotations

import datetime
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import (
    CLUSTER_ACTION,
    GROUP_READ,
    TOPIC_DESCRIBE,
    TOPIC_READ,
    TOPIC_WRITE,
    TRANSACTIONAL_DESCRIBE,
    TRANSACTIONAL_WRITE,
)
from sluice.broker.services import (
    UsesAuthorizer,
    UsesGroups,
    UsesMarkers,
    UsesTopics,
    UsesTransactions,
    UsesVerifyTransaction,
)
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition
from sluice.group.api import NO_LEADER_EPOCH, OffsetCommitRequest, OffsetToCommit
from sluice.group.config import OFFSETS_TOPIC
from sluice.protocol.messages import has_field, make, millis, response_module
from sluice.protocol.versions import ApiKey
from sluice.txn.api import (
    AddPartitionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ListTransactionsFilter,
    ProducerIdAndEpoch,
)

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext


class TransactionsServices(
    UsesAuthorizer,
    UsesGroups,
    UsesMarkers,
    UsesTopics,
    UsesTransactions,
    UsesVerifyTransaction,
    Protocol,
):
    """What the transactions handlers use of the broker."""


log = logging.getLogger(__name__)

PRODUCER_FENCED_SINCE: Mapping[int, int] = {
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 2,
    ApiKey.ADD_OFFSETS_TO_TXN: 2,
    ApiKey.END_TXN: 2,
    ApiKey.TXN_OFFSET_COMMIT: 3,
}
"""The first version of each API that may answer PRODUCER_FENCED (KIP-588)."""

TXN_OFFSET_COMMIT_IMPLICIT_ADD_VERSION = 5
"""TxnOffsetCommit v5 (transaction version 2) adds the group's ``__consumer_offsets``
partition to the transaction itself; the client sends no AddOffsetsToTxn."""


def client_error(context: RequestContext, error: ErrorCode) -> ErrorCode:
    """``error`` as the request's version knows it."""
    if (
        error is ErrorCode.producer_fenced
        and context.header.api_version < PRODUCER_FENCED_SINCE.get(context.header.api_key, 0)
    ):
        return ErrorCode.invalid_producer_epoch
    return error


def _by_topic(entries: Iterable[tuple[TopicPartition, Any]]) -> dict[str, list[tuple[int, Any]]]:
    grouped: dict[str, list[tuple[int, Any]]] = defaultdict(list)
    for partition, value in entries:
        grouped[partition.topic].append((partition.partition, value))
    return grouped


# ------------------------------------------------------------------ InitProducerId


async def init_transactional_producer(
    services: UsesTransactions, context: RequestContext, request: Any
) -> ProducerIdAndEpoch:
    """InitProducerId with a transactional id (the handler in ``init_producer_id``
    serves the idempotent case and calls this)."""
    transactional = InitProducerIdRequest(
        transactional_id=request.transactional_id,
        transaction_timeout_ms=millis(request.transaction_timeout),
        producer_id=int(getattr(request, "producer_id", -1)),
        producer_epoch=int(getattr(request, "producer_epoch", -1)),
    )
    try:
        answer = await services.transactions.init_producer_id(transactional)
    except KafkaError as e:
        return ProducerIdAndEpoch(e.code)
    return ProducerIdAndEpoch(
        client_error(context, answer.error), answer.producer_id, answer.producer_epoch
    )


# --------------------------------------------------------------- AddPartitionsToTxn


async def handle_add_partitions_to_txn(
    services: TransactionsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    if has_field(type(request), "transactions"):  # v4: batched, from brokers
        if not services.authorizer.allows(context, CLUSTER_ACTION):
            return make(
                module.AddPartitionsToTxnResponse,
                throttle_time=0,
                error_code=CLUSTER_ACTION.error_code,
                results_by_transaction=(),
            )
        results = []
        for transaction in request.transactions:
            errors = await _add_partitions(
                services,
                context,
                transaction.transactional_id,
                int(transaction.producer_id),
                int(transaction.producer_epoch),
                transaction.topics,
                bool(transaction.verify_only),
            )
            results.append(
                make(
                    module.AddPartitionsToTxnResult,
                    transactional_id=transaction.transactional_id,
                    topic_results=_partition_results(module, errors),
                )
            )
        return make(
            module.AddPartitionsToTxnResponse,
            throttle_time=0,
            error_code=ErrorCode.none,
            results_by_transaction=tuple(results),
        )
    errors = _refused_partitions(
        services,
        context,
        request.v3_and_below_transactional_id,
        request.v3_and_below_topics,
    ) or await _add_partitions(
        services,
        context,
        request.v3_and_below_transactional_id,
        int(request.v3_and_below_producer_id),
        int(request.v3_and_below_producer_epoch),
        request.v3_and_below_topics,
        False,
    )
    return make(
        module.AddPartitionsToTxnResponse,
        throttle_time=0,
        results_by_topic_v3_and_below=_partition_results(module, errors),
    )


def _refused_partitions(
    services: TransactionsServices, context: RequestContext, transactional_id: str, topics: Any
) -> dict[TopicPartition, ErrorCode]:
    """A client's AddPartitionsToTxn (v3 and below) needs WRITE on the transactional id
    and on each topic; when refused, the refused partitions are answered with the error
    and the others OPERATION_NOT_ATTEMPTED. Empty when allowed."""
    requested = [TopicPartition(t.name, int(index)) for t in topics for index in t.partitions]
    authorizer = services.authorizer
    if not authorizer.allows(context, TRANSACTIONAL_WRITE, transactional_id):
        return dict.fromkeys(requested, TRANSACTIONAL_WRITE.error_code)
    writable = authorizer.allowed(context, TOPIC_WRITE, {p.topic for p in requested})
    if all(p.topic in writable for p in requested):
        return {}
    return {
        p: ErrorCode.operation_not_attempted if p.topic in writable else TOPIC_WRITE.error_code
        for p in requested
    }


def _partition_results(module: Any, errors: dict[TopicPartition, ErrorCode]) -> tuple[Any, ...]:
    return tuple(
        make(
            module.AddPartitionsToTxnTopicResult,
            name=name,
            results_by_partition=tuple(
                make(
                    module.AddPartitionsToTxnPartitionResult,
                    partition_index=index,
                    partition_error_code=error,
                )
                for index, error in entries
            ),
        )
        for name, entries in _by_topic(errors.items()).items()
    )


async def _add_partitions(
    services: TransactionsServices,
    context: RequestContext,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    topics: Iterable[Any],
    verify_only: bool,
) -> dict[TopicPartition, ErrorCode]:
    requested = [
        TopicPartition(topic.name, int(index)) for topic in topics for index in topic.partitions
    ]
    unknown = [p for p in requested if services.topics.image.partition(p) is None]
    if unknown and not verify_only:
        # Kafka: nothing is added when one partition is unknown; the others are told
        # the operation was not attempted.
        return {
            p: ErrorCode.unknown_topic_or_partition
            if p in unknown
            else ErrorCode.operation_not_attempted
            for p in requested
        }
    add = AddPartitionsRequest(
        transactional_id, producer_id, producer_epoch, tuple(requested), verify_only
    )
    try:
        result = await services.transactions.add_partitions(add)
    except KafkaError as e:
        return {p: e.code for p in requested}
    return {p: client_error(context, error) for p, error in result.errors.items()}


# ----------------------------------------------------------------- AddOffsetsToTxn


async def handle_add_offsets_to_txn(
    services: TransactionsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    error = ErrorCode.none
    try:
        services.authorizer.require(context, TRANSACTIONAL_WRITE, request.transactional_id)
        services.authorizer.require(context, GROUP_READ, request.group_id)
        await services.topics.ensure_offsets_topic()
        partition = TopicPartition(
            OFFSETS_TOPIC, services.groups.coordinator_partition(request.group_id)
        )
        result = await services.transactions.add_partitions(
            AddPartitionsRequest(
                request.transactional_id,
                int(request.producer_id),
                int(request.producer_epoch),
                (partition,),
            )
        )
        error = client_error(context, result.errors[partition])
    except KafkaError as e:
        error = e.code
    return make(module.AddOffsetsToTxnResponse, throttle_time=0, error_code=error)


# -------------------------------------------------------------------------- EndTxn


async def handle_end_txn(
    services: TransactionsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    end = EndTxnRequest(
        request.transactional_id,
        int(request.producer_id),
        int(request.producer_epoch),
        bool(request.committed),
        bump_epoch=context.header.api_version >= 5,
    )
    try:
        services.authorizer.require(context, TRANSACTIONAL_WRITE, request.transactional_id)
        answer = await services.transactions.end_txn(end)
    except KafkaError as e:
        answer = ProducerIdAndEpoch(e.code)
    return make(
        module.EndTxnResponse,
        throttle_time=0,
        error_code=client_error(context, answer.error),
        producer_id=answer.producer_id,
        producer_epoch=answer.producer_epoch,
    )


# ----------------------------------------------------------------- TxnOffsetCommit


async def handle_txn_offset_commit(
    services: TransactionsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    requested: list[tuple[TopicPartition, OffsetToCommit]] = []
    for topic in request.topics:
        for p in topic.partitions:
            offset = OffsetToCommit(
                offset=int(p.committed_offset),
                leader_epoch=int(getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH)),
                metadata=p.committed_metadata,
            )
            requested.append((TopicPartition(topic.name, int(p.partition_index)), offset))
    errors: dict[TopicPartition, ErrorCode] = {}
    known = []
    authorizer = services.authorizer
    refusal: ErrorCode | None = None
    if not authorizer.allows(context, TRANSACTIONAL_WRITE, request.transactional_id):
        refusal = TRANSACTIONAL_WRITE.error_code
    elif not authorizer.allows(context, GROUP_READ, request.group_id):
        refusal = GROUP_READ.error_code
    readable = authorizer.allowed(context, TOPIC_READ, {p.topic for p, _ in requested})
    for partition, offset in requested:
        if refusal is not None:
            errors[partition] = refusal
        elif partition.topic not in readable:
            errors[partition] = TOPIC_READ.error_code
        elif services.topics.image.partition(partition) is not None:
            known.append((partition, offset))
        else:
            errors[partition] = ErrorCode.unknown_topic_or_partition
    commit = OffsetCommitRequest(
        group_id=request.group_id,
        generation_id=int(getattr(request, "generation_id", -1)),
        member_id=getattr(request, "member_id", ""),
        group_instance_id=getattr(request, "group_instance_id", None),
        offsets=tuple(known),
    )
    if known:
        producer_id, producer_epoch = int(request.producer_id), int(request.producer_epoch)
        try:
            offsets_partition = TopicPartition(
                OFFSETS_TOPIC, services.groups.coordinator_partition(request.group_id)
            )
            await services.verify_transaction(
                request.transactional_id,
                producer_id,
                producer_epoch,
                offsets_partition,
                context.header.api_version >= TXN_OFFSET_COMMIT_IMPLICIT_ADD_VERSION,
            )
            response = await services.groups.commit_transactional_offsets(
                commit, producer_id, producer_epoch
            )
            errors.update(response.errors)
        except KafkaError as e:
            code = e.code
            if code is ErrorCode.invalid_producer_epoch:
                code = ErrorCode.producer_fenced
            if code is ErrorCode.not_enough_replicas:
                code = ErrorCode.coordinator_load_in_progress  # retriable for TxnOffsetCommit
            errors.update((partition, code) for partition, _ in known)
    return make(
        module.TxnOffsetCommitResponse,
        throttle_time=0,
        topics=tuple(
            make(
                module.TxnOffsetCommitResponseTopic,
                name=name,
                partitions=tuple(
                    make(
                        module.TxnOffsetCommitResponsePartition,
                        partition_index=index,
                        error_code=client_error(context, errors[TopicPartition(name, index)]),
                    )
                    for index, _ in entries
                ),
            )
            for name, entries in _by_topic(requested).items()
        ),
    )


# ----------------------------------------------------------------- WriteTxnMarkers


async def handle_write_txn_markers(
    services: TransactionsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    results = []
    between_brokers = services.authorizer.allows(context, CLUSTER_ACTION)
    for marker in request.markers:
        errors: dict[TopicPartition, ErrorCode] = {}
        for topic in marker.topics:
            for index in topic.partition_indexes:
                topic_partition = TopicPartition(topic.name, int(index))
                if not between_brokers:
                    errors[topic_partition] = CLUSTER_ACTION.error_code
                    continue
                errors[topic_partition] = await services.markers.append_here(
                    topic_partition,
                    producer_id=int(marker.producer_id),
                    producer_epoch=int(marker.producer_epoch),
                    committed=bool(marker.transaction_result),
                    coordinator_epoch=int(marker.coordinator_epoch),
                )
        results.append(
            make(
                module.WritableTxnMarkerResult,
                producer_id=marker.producer_id,
                topics=tuple(
                    make(
                        module.WritableTxnMarkerTopicResult,
                        name=name,
                        partitions=tuple(
                            make(
                                module.WritableTxnMarkerPartitionResult,
                                partition_index=index,
                                error_code=error,
                            )
                            for index, error in entries
                        ),
                    )
                    for name, entries in _by_topic(errors.items()).items()
                ),
            )
        )
    return make(module.WriteTxnMarkersResponse, markers=tuple(results))


# ------------------------------------------------- DescribeTransactions, ListTransactions


async def handle_describe_transactions(
    services: TransactionsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    authorizer = services.authorizer
    allowed = authorizer.allowed(context, TRANSACTIONAL_DESCRIBE, request.transactional_ids)
    described = {
        d.transactional_id: d
        for d in services.transactions.describe(
            [t for t in request.transactional_ids if t in allowed]
        )
    }
    states = []
    for transactional_id in request.transactional_ids:
        found = described.get(transactional_id)
        if found is None:  # refused (a description exists for every id asked)
            states.append(
                make(
                    module.TransactionState,
                    error_code=TRANSACTIONAL_DESCRIBE.error_code,
                    transactional_id=transactional_id,
                    transaction_state="",
                    transaction_timeout=0,
                    transaction_start_time=_timestamp(-1),
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=(),
                )
            )
            continue
        # Kafka lists only the partitions of topics the principal may DESCRIBE.
        partitions = [
            p for p in found.partitions if authorizer.allows(context, TOPIC_DESCRIBE, p.topic)
        ]
        states.append(
            make(
                module.TransactionState,
                error_code=found.error,
                transactional_id=found.transactional_id,
                transaction_state=found.state,
                transaction_timeout=found.timeout_ms,
                transaction_start_time=_timestamp(found.start_ms),
                producer_id=found.producer_id,
                producer_epoch=found.producer_epoch,
                topics=tuple(
                    make(module.TopicData, topic=name, partitions=tuple(i for i, _ in entries))
                    for name, entries in _by_topic((p, None) for p in partitions).items()
                ),
            )
        )
    return make(
        module.DescribeTransactionsResponse, throttle_time=0, transaction_states=tuple(states)
    )


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _timestamp(milliseconds: int) -> datetime.datetime:
    """The start of an open transaction as kio takes it. With none open (Empty,
    Complete*, an unknown id) Kafka sends -1, which kio-based clients (Sluice's among
    them) cannot decode ("negative timestamp"): Sluice sends 0 instead, the epoch,
    which no real transaction starts at."""
    return _EPOCH + datetime.timedelta(milliseconds=max(milliseconds, 0))


KNOWN_STATES = frozenset(
    {
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    }
)


async def handle_list_transactions(
    services: TransactionsServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(context.header.api_key, context.header.api_version)
    unknown = tuple(s for s in request.state_filters if s not in KNOWN_STATES)
    wanted = ListTransactionsFilter(
        frozenset(request.state_filters),
        frozenset(int(p) for p in request.producer_id_filters),
        int(getattr(request, "duration_filter", -1)),
    )
    error, listed = services.transactions.list_transactions(wanted)
    return make(
        module.ListTransactionsResponse,
        throttle_time=0,
        error_code=error,
        unknown_state_filters=unknown,
        transaction_states=tuple(
            make(
                module.TransactionState,
                transactional_id=entry.transactional_id,
                producer_id=entry.producer_id,
                transaction_state=entry.state,
            )
            for entry in listed
            if services.authorizer.allows(context, TRANSACTIONAL_DESCRIBE, entry.transactional_id)
        ),
    )
