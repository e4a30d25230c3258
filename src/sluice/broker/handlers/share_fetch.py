"""ShareFetch v1–2 and ShareAcknowledge v1–2: share-group members take records of the
partitions this broker leads and acknowledge them one by one (KIP-932).

A ShareFetch first applies the acknowledgements it carries (each partition's outcome in
``acknowledge_error_code``), then acquires records for the member from the partitions of
its share session (:mod:`sluice.broker.share.sessions`): the whole batches holding them
go in ``records``, and ``acquired_records`` says which offsets are the member's (with
their delivery counts); the client hands out only those. When nothing can be acquired it
waits up to ``max_wait_ms`` for records to arrive or be released. Epoch -1 closes the
session: no records, and what the member still holds is released.

v2 adds the RENEW acknowledgement (a longer lock), ``is_renew_ack`` (a ShareFetch that
only renews and acquires nothing) and ``share_acquire_mode`` (KIP-1206): 0,
``batch_optimized`` (v1's only mode), acquires whole producer batches, so ``max_records``
may be exceeded to end on a batch boundary; 1, ``record_limit``, never more than
``max_records``, cutting inside a batch. Another mode is INVALID_REQUEST. A RENEW in a v1
request is refused with INVALID_REQUEST, as Kafka does. ``max_bytes`` 0 acquires
nothing, as in Kafka.

Topics are named by id; an id no topic has is answered with UNKNOWN_TOPIC_ID. Share
sessions and share-partitions are keyed by topic id too (KIP-932): after a topic is
deleted and created again, a session that only knows the old id gets UNKNOWN_TOPIC_ID
for it (and forgets it), never records of the new topic.

With the authorizer on, ShareFetch and ShareAcknowledge need READ on the group (else the
request is answered GROUP_AUTHORIZATION_FAILED) and on each topic (else its partitions
are answered TOPIC_AUTHORIZATION_FAILED, acknowledgements included, and stay out of the
share session).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import GROUP_READ, TOPIC_READ
from sluice.broker.services import (
    UsesAuthorizer,
    UsesClock,
    UsesConfig,
    UsesPurgatory,
    UsesSharePartitions,
    UsesShareSessions,
    UsesTopics,
)
from sluice.broker.share.partitions import share_key
from sluice.broker.share.sessions import FINAL_EPOCH, OPEN_EPOCH, SessionPartition, ShareSession
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition
from sluice.common.limits import FETCH_WAIT_MS_MAX
from sluice.protocol.messages import has_field, make, millis, response_module
from sluice.protocol.versions import ApiKey
from sluice.share.partition import AckType
from sluice.share.state import ShareStateKey

if TYPE_CHECKING:
    from types import ModuleType

    from sluice.broker.context import RequestContext


class ShareFetchServices(
    UsesAuthorizer,
    UsesClock,
    UsesConfig,
    UsesPurgatory,
    UsesSharePartitions,
    UsesShareSessions,
    UsesTopics,
    Protocol,
):
    """What the share fetch handlers use of the broker."""


DEFAULT_MAX_RECORDS = 500
FIRST_RENEW_VERSION = 2
BATCH_OPTIMIZED = 0
RECORD_LIMIT = 1
"""ShareFetch v2's ``share_acquire_mode`` values (KIP-1206)."""
_LEADER_CHANGE_ERRORS = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch})


@dataclass
class _Outcome:
    """What the response says of one partition."""

    topic_id: uuid.UUID
    partition: int
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    ack_error: ErrorCode = ErrorCode.none
    ack_message: str | None = None
    records: bytes | None = None
    acquired: list[tuple[int, int, int]] = field(default_factory=list)
    leader: tuple[int, int] = (-1, -1)


class _Partitions:
    """The outcomes of one request, by partition, in the order first met."""

    def __init__(self, may_read: Callable[[str], bool] = lambda name: True) -> None:
        self.by_partition: dict[tuple[uuid.UUID, int], _Outcome] = {}
        self.may_read = may_read
        """Whether the request may READ a topic (its partitions are refused otherwise)."""

    def of(self, topic_id: uuid.UUID, partition: int) -> _Outcome:
        key = (topic_id, partition)
        outcome = self.by_partition.get(key)
        if outcome is None:
            outcome = self.by_partition[key] = _Outcome(topic_id, partition)
        return outcome


def _name_of(services: ShareFetchServices, topic_id: uuid.UUID | None) -> str | None:
    topic = None if topic_id is None else services.topics.by_id(topic_id)
    return None if topic is None else topic.name


def _leader_of(services: ShareFetchServices, topic_partition: TopicPartition) -> tuple[int, int]:
    topic = services.topics.get(topic_partition.topic)
    state = None if topic is None else topic.partitions.get(topic_partition.partition)
    return (-1, -1) if state is None else (state.leader, state.leader_epoch)


def _fail(
    services: ShareFetchServices, outcome: _Outcome, topic_partition: TopicPartition, e: KafkaError
) -> None:
    outcome.error, outcome.error_message = e.code, str(e) or None
    if e.code in _LEADER_CHANGE_ERRORS:
        outcome.leader = _leader_of(services, topic_partition)


async def _acknowledge(
    services: ShareFetchServices,
    group_id: str,
    member_id: str,
    topics: Iterable[Any],
    outcomes: _Partitions,
    version: int,
) -> None:
    """Apply every partition's acknowledgement batches, concurrently across partitions."""

    async def one(topic_id: uuid.UUID, partition: Any, name: str | None) -> None:
        outcome = outcomes.of(topic_id, int(partition.partition_index))
        batches = [
            (int(b.first_offset), int(b.last_offset), [int(t) for t in b.acknowledge_types])
            for b in partition.acknowledgement_batches
        ]
        if name is None:
            outcome.ack_error = ErrorCode.unknown_topic_id
            return
        if not outcomes.may_read(name):
            outcome.ack_error = TOPIC_READ.error_code
            return
        if version < FIRST_RENEW_VERSION and any(AckType.RENEW in t for _, _, t in batches):
            outcome.ack_error = ErrorCode.invalid_request
            outcome.ack_message = "RENEW needs ShareFetch/ShareAcknowledge v2"
            return
        topic_partition = TopicPartition(name, outcome.partition)
        try:
            hosted = await services.share_partitions.hosted(group_id, topic_partition, topic_id)
            outcome.ack_error = await services.share_partitions.acknowledge(
                hosted, member_id, batches
            )
        except KafkaError as e:
            outcome.ack_error, outcome.ack_message = e.code, str(e) or None
            if e.code in _LEADER_CHANGE_ERRORS:
                outcome.leader = _leader_of(services, topic_partition)

    work = [
        one(topic.topic_id, partition, _name_of(services, topic.topic_id))
        for topic in topics
        for partition in topic.partitions
        if partition.acknowledgement_batches
    ]
    await asyncio.gather(*work)


async def _release_all(
    services: ShareFetchServices, session: ShareSession, group_id: str, member_id: str
) -> None:
    for topic_id, index in session.partitions:
        hosted = services.share_partitions.loaded(ShareStateKey(group_id, topic_id, index))
        if hosted is not None:
            await services.share_partitions.release(hosted, member_id)


def _session(
    services: ShareFetchServices, group_id: str, member_id: str, epoch: int
) -> ShareSession:
    now_ms = services.clock.wall_ms()
    if epoch == OPEN_EPOCH:
        return services.share_sessions.open(group_id, member_id, now_ms)
    return services.share_sessions.use(group_id, member_id, epoch, now_ms)


def _update_partitions(
    services: ShareFetchServices, session: ShareSession, request: Any, outcomes: _Partitions
) -> None:
    for topic in request.topics:
        name = _name_of(services, topic.topic_id)
        for partition in topic.partitions:
            index = int(partition.partition_index)
            if name is None:
                outcome = outcomes.of(topic.topic_id, index)
                outcome.error = ErrorCode.unknown_topic_id
                continue
            if not outcomes.may_read(name):
                outcomes.of(topic.topic_id, index).error = TOPIC_READ.error_code
                continue
            session.partitions[SessionPartition(topic.topic_id, index)] = None
    for forgotten in request.forgotten_topics_data:
        for index in forgotten.partitions:
            session.partitions.pop(SessionPartition(forgotten.topic_id, int(index)), None)


async def _acquire(
    services: ShareFetchServices,
    session: ShareSession,
    member_id: str,
    request: Any,
    outcomes: _Partitions,
) -> int:
    """Acquire records from the session's partitions; returns how many."""
    max_records = int(request.max_records) if int(request.max_records) > 0 else DEFAULT_MAX_RECORDS
    budget = min(int(request.max_bytes), services.config.fetch_max_bytes)
    whole_batches = getattr(request, "share_acquire_mode", BATCH_OPTIMIZED) == BATCH_OPTIMIZED
    taken = 0
    for topic_id, index in session.ordered():
        if taken >= max_records or budget <= 0:
            break
        outcome = outcomes.of(topic_id, index)
        name = _name_of(services, topic_id)
        if name is None:  # deleted (and maybe created again: another id) since it was added
            outcome.error = ErrorCode.unknown_topic_id
            session.partitions.pop(SessionPartition(topic_id, index), None)
            continue
        topic_partition = TopicPartition(name, index)
        if not outcomes.may_read(topic_partition.topic):  # READ revoked during the session
            outcome.error = TOPIC_READ.error_code
        if outcome.error is not ErrorCode.none:
            continue
        try:
            hosted = await services.share_partitions.hosted(
                session.group_id, topic_partition, topic_id
            )
            fetched = await services.share_partitions.acquire(
                hosted, member_id, max_records - taken, budget, whole_batches=whole_batches
            )
        except KafkaError as e:
            _fail(services, outcome, topic_partition, e)
            continue
        if fetched.acquired:
            outcome.records = (outcome.records or b"") + fetched.records
            outcome.acquired += [
                (a.first_offset, a.last_offset, a.delivery_count) for a in fetched.acquired
            ]
            taken += sum(a.last_offset - a.first_offset + 1 for a in fetched.acquired)
            budget -= len(fetched.records)
    return taken


def _has_work(services: ShareFetchServices, session: ShareSession) -> bool:
    return any(
        services.share_partitions.has_work(ShareStateKey(session.group_id, topic_id, index))
        for topic_id, index in session.partitions
    )


async def _acquire_or_wait(
    services: ShareFetchServices,
    session: ShareSession,
    member_id: str,
    request: Any,
    outcomes: _Partitions,
) -> None:
    wait_ms = min(max(millis(request.max_wait), 0), FETCH_WAIT_MS_MAX)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_ms / 1000
    while True:
        taken = await _acquire(services, session, member_id, request, outcomes)
        failed = any(o.error is not ErrorCode.none for o in outcomes.by_partition.values())
        remaining = deadline - loop.time()
        if taken or failed or remaining <= 0 or not session.partitions:
            return
        if int(request.max_bytes) <= 0:
            return  # no record fits, however long it waits
        names = [
            TopicPartition(name, index)
            for topic_id, index in session.partitions
            if (name := _name_of(services, topic_id)) is not None
        ]
        keys = [key for tp in names for key in (tp, share_key(session.group_id, tp))]
        woken = await services.purgatory.wait_until(
            keys, lambda: _has_work(services, session), remaining
        )
        if not woken:
            return


def _node_endpoints(
    services: ShareFetchServices, module: ModuleType, outcomes: _Partitions, listener: str
) -> tuple[Any, ...]:
    leaders = {o.leader[0] for o in outcomes.by_partition.values() if o.leader[0] >= 0}
    return tuple(
        make(
            module.NodeEndpoint,
            node_id=b.node_id,
            host=b.address(listener)[0],
            port=b.address(listener)[1],
            rack=b.rack,
        )
        for b in services.topics.image.live_brokers()
        if b.node_id in leaders
    )


def _by_topic(outcomes: _Partitions) -> dict[uuid.UUID, list[_Outcome]]:
    topics: dict[uuid.UUID, list[_Outcome]] = {}
    for outcome in outcomes.by_partition.values():
        topics.setdefault(outcome.topic_id, []).append(outcome)
    return topics


def _fetch_response(
    services: ShareFetchServices,
    version: int,
    listener: str,
    outcomes: _Partitions,
    *,
    error: ErrorCode = ErrorCode.none,
    message: str | None = None,
    lock_ms: int = 0,
) -> Any:
    module = response_module(ApiKey.SHARE_FETCH, version)
    return make(
        module.ShareFetchResponse,
        throttle_time=0,
        error_code=error,
        error_message=message,
        acquisition_lock_timeout=lock_ms,
        responses=tuple(
            make(
                module.ShareFetchableTopicResponse,
                topic_id=topic_id,
                partitions=tuple(
                    make(
                        module.PartitionData,
                        partition_index=o.partition,
                        error_code=o.error,
                        error_message=o.error_message,
                        acknowledge_error_code=o.ack_error,
                        acknowledge_error_message=o.ack_message,
                        current_leader=make(
                            module.LeaderIdAndEpoch, leader_id=o.leader[0], leader_epoch=o.leader[1]
                        ),
                        records=o.records or b"",
                        acquired_records=tuple(
                            make(
                                module.AcquiredRecords,
                                first_offset=first,
                                last_offset=last,
                                delivery_count=count,
                            )
                            for first, last, count in o.acquired
                        ),
                    )
                    for o in partitions
                ),
            )
            for topic_id, partitions in _by_topic(outcomes).items()
        ),
        node_endpoints=_node_endpoints(services, module, outcomes, listener),
    )


def _outcomes(services: ShareFetchServices, context: RequestContext) -> _Partitions:
    return _Partitions(lambda name: services.authorizer.allows(context, TOPIC_READ, name))


async def handle_share_fetch(
    services: ShareFetchServices, context: RequestContext, request: Any
) -> Any:
    version = context.header.api_version
    outcomes = _outcomes(services, context)
    group_id, member_id = request.group_id or "", request.member_id or ""
    epoch = int(request.share_session_epoch)

    def invalid(message: str) -> Any:
        return _fetch_response(
            services,
            version,
            context.connection.listener_name,
            outcomes,
            error=ErrorCode.invalid_request,
            message=message,
        )

    if not group_id or not member_id:
        return invalid("a share fetch names its group and member")
    if (
        epoch == FINAL_EPOCH
        and request.topics
        and any(not p.acknowledgement_batches for t in request.topics for p in t.partitions)
    ):
        return invalid("the request closing a share session (epoch -1) fetches nothing")
    mode = getattr(request, "share_acquire_mode", BATCH_OPTIMIZED)
    if mode not in (BATCH_OPTIMIZED, RECORD_LIMIT):
        return invalid(f"unknown share acquire mode {mode} (0: batch_optimized, 1: record_limit)")
    try:
        services.authorizer.require(context, GROUP_READ, group_id)
        session = None if epoch == FINAL_EPOCH else _session(services, group_id, member_id, epoch)
    except KafkaError as e:
        return _fetch_response(
            services,
            version,
            context.connection.listener_name,
            outcomes,
            error=e.code,
            message=str(e) or None,
        )
    settings = services.share_partitions.settings(group_id)
    await _acknowledge(services, group_id, member_id, request.topics, outcomes, version)
    if session is None:
        closed = services.share_sessions.close(group_id, member_id)
        if closed is not None:
            await _release_all(services, closed, group_id, member_id)
    else:
        _update_partitions(services, session, request, outcomes)
        if not getattr(request, "is_renew_ack", False):
            await _acquire_or_wait(services, session, member_id, request, outcomes)
    return _fetch_response(
        services,
        version,
        context.connection.listener_name,
        outcomes,
        lock_ms=settings.lock_duration_ms,
    )


async def handle_share_acknowledge(
    services: ShareFetchServices, context: RequestContext, request: Any
) -> Any:
    version = context.header.api_version
    module = response_module(ApiKey.SHARE_ACKNOWLEDGE, version)
    outcomes = _outcomes(services, context)
    group_id, member_id = request.group_id or "", request.member_id or ""
    epoch = int(request.share_session_epoch)
    error, message = ErrorCode.none, None
    try:
        if not group_id or not member_id:
            raise errors.InvalidRequest("a share acknowledgement names its group and member")
        services.authorizer.require(context, GROUP_READ, group_id)
        if epoch == OPEN_EPOCH:
            raise errors.for_code(ErrorCode.invalid_share_session_epoch)(
                "ShareAcknowledge cannot open a share session (epoch 0)"
            )
        if epoch != FINAL_EPOCH:
            _session(services, group_id, member_id, epoch)
    except KafkaError as e:
        error, message = e.code, str(e) or None
    lock_ms = 0
    if group_id:  # read before acknowledging: a config change applies to this request
        lock_ms = services.share_partitions.settings(group_id).lock_duration_ms
    lock: dict[str, int] = {}
    if has_field(module.ShareAcknowledgeResponse, "acquisition_lock_timeout"):  # v2
        lock["acquisition_lock_timeout"] = lock_ms
    if error is ErrorCode.none:
        await _acknowledge(services, group_id, member_id, request.topics, outcomes, version)
        if epoch == FINAL_EPOCH:
            closed = services.share_sessions.close(group_id, member_id)
            if closed is not None:
                await _release_all(services, closed, group_id, member_id)
    return make(
        module.ShareAcknowledgeResponse,
        **lock,
        throttle_time=0,
        error_code=error,
        error_message=message,
        responses=tuple(
            make(
                module.ShareAcknowledgeTopicResponse,
                topic_id=topic_id,
                partitions=tuple(
                    make(
                        module.PartitionData,
                        partition_index=o.partition,
                        error_code=o.ack_error,
                        error_message=o.ack_message,
                        current_leader=make(
                            module.LeaderIdAndEpoch, leader_id=o.leader[0], leader_epoch=o.leader[1]
                        ),
                    )
                    for o in partitions
                ),
            )
            for topic_id, partitions in _by_topic(outcomes).items()
        ),
        node_endpoints=_node_endpoints(
            services, module, outcomes, context.connection.listener_name
        ),
    )
