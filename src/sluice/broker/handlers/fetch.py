"""Fetch v4–16: long poll, byte limits, zero-copy record slices.

The response lists every requested partition (the Java client drops a response that
does not). Data is read only below the high watermark, whole batches at a time; the
first batch of the response may exceed the limits so a consumer can always progress
(KIP-74). When less than ``min_bytes`` is available and nothing failed, the request waits
in the purgatory until an append wakes it or ``max_wait_ms`` passes. Fetch sessions
(KIP-227, ``broker.replication.fetch_sessions``) decide what is read: the partitions a
full fetch names, or every partition of an incremental fetch's session, whose answer
then lists only the partitions with news.

A fetch with a replica id is a follower's (``broker.replication.replica_fetcher``): it
reads up to the log end rather than the high watermark, its fetch offset tells the
leader where the follower's log ends (which moves the high watermark and the ISR,
``broker.replication.partition``), and it waits for appends rather than for the high
watermark. A follower fetching in a session is also answered once the high watermark
of one of its partitions moved past what the session last told it (as Kafka's KRaft
fetches are since KIP-1166), after at most :data:`FOLLOWER_HIGH_WATERMARK_LINGER_MS` for
records to carry it, so a follower learns it without waiting for the next append or the
end of ``max_wait_ms``.

From v12 a fetcher may send the epoch of the last batch it fetched
(``last_fetched_epoch``). If that epoch ends here before the fetch offset (or is unknown
here), its log has diverged from this one: the partition is answered with the
``diverging_epoch`` (the largest epoch here not above it, and where that epoch ends) and
no records, so the fetcher truncates, as Kafka's leader does. A fetch offset below the
log start is OFFSET_OUT_OF_RANGE first.

From v13 topics are named by id, in the request and in the answer; an id no topic has
(a deleted topic, or one re-created under the same name) is answered with
UNKNOWN_TOPIC_ID for each of its partitions. From v16 a NOT_LEADER_OR_FOLLOWER or
FENCED_LEADER_EPOCH answer names the partition's current leader and epoch, and the
response lists those leaders' endpoints (KIP-951), so the client need not ask Metadata.

With the authorizer on, a consumer needs READ on each topic and a follower CLUSTER_ACTION
on the cluster; the partitions of the others are answered TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.extensions.views import filter_records
from sluice.broker.handlers.acl_rules import CLUSTER_ACTION, TOPIC_READ
from sluice.broker.observability.metrics.traffic import CONSUMER, FOLLOWER
from sluice.broker.replication.fetch_sessions import (
    FetchedTopic,
    FetchSession,
    SessionPartition,
    TopicKey,
    TopicResults,
)
from sluice.broker.replication.partition import log_end_key
from sluice.broker.services import (
    UsesAuthorizer,
    UsesClock,
    UsesConfig,
    UsesFetchSessions,
    UsesPurgatory,
    UsesQuotas,
    UsesReplicas,
    UsesRequestMetrics,
    UsesTopics,
    UsesTraffic,
)
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition
from sluice.common.limits import FETCH_WAIT_MS_MAX
from sluice.protocol.fetch_response import (
    FetchPartitionResult,
    NodeEndpoint,
    encode_fetch_response,
)
from sluice.protocol.messages import millis

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext
    from sluice.broker.replication.purgatory import Purgatory
    from sluice.storage.log import PartitionLog


class FetchServices(
    UsesAuthorizer,
    UsesClock,
    UsesConfig,
    UsesFetchSessions,
    UsesPurgatory,
    UsesQuotas,
    UsesReplicas,
    UsesRequestMetrics,
    UsesTopics,
    UsesTraffic,
    Protocol,
):
    """What the fetch handlers use of the broker."""


READ_COMMITTED = 1
FOLLOWER_HIGH_WATERMARK_LINGER_MS = 100
"""How long a follower's session fetch whose only news is a moved high watermark still
waits for records to carry it. While appends come at least ten times a second the news
rides with their records at no cost (an answer and a fetch per follower saved each
time); when appends stop, the follower learns the high watermark this long after it
moved instead of ``replica.fetch.wait.max.ms`` (500 ms) later."""
FIRST_CURRENT_LEADER_VERSION = 16
_LEADER_CHANGE_ERRORS = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch})
UnknownTopicId = errors.for_code(ErrorCode.unknown_topic_id)
TopicAuthorizationFailed = errors.for_code(ErrorCode.topic_authorization_failed)


def _topic_name(services: FetchServices, key: TopicKey) -> str | None:
    """The name of a requested topic: given (v4–12) or found by its id (v13+)."""
    if not isinstance(key, uuid.UUID):
        return key
    topic = services.topics.by_id(key)
    return None if topic is None else topic.name


def _current_leader(
    services: FetchServices, topic_partition: TopicPartition
) -> tuple[int, int] | None:
    topic = services.topics.get(topic_partition.topic)
    state = None if topic is None else topic.partitions.get(topic_partition.partition)
    return None if state is None else (state.leader, state.leader_epoch)


def replica_id_of(request: Any) -> int:
    """The fetching follower's broker id (``replica_id`` up to v14, ``replica_state``
    from v15), or -1 for a consumer."""
    replica_state = getattr(request, "replica_state", None)
    if replica_state is not None:
        return int(replica_state.replica_id)
    return int(getattr(request, "replica_id", -1))


def _refused_topics(
    services: FetchServices,
    context: RequestContext,
    fetched: Sequence[FetchedTopic],
    replica_id: int,
) -> frozenset[str]:
    """The topics the request may not read: all of them for a follower without
    CLUSTER_ACTION, those without READ for a consumer (Kafka answers both
    TOPIC_AUTHORIZATION_FAILED)."""
    authorizer = services.authorizer
    if not authorizer.enabled:
        return frozenset()
    names = {name for t in fetched if (name := _topic_name(services, t.key)) is not None}
    if replica_id >= 0:
        return frozenset() if authorizer.allows(context, CLUSTER_ACTION) else frozenset(names)
    return frozenset(names - authorizer.allowed(context, TOPIC_READ, names))


def _read_partitions(
    services: FetchServices,
    request: Any,
    fetched: Sequence[FetchedTopic],
    replica_id: int,
    refused: frozenset[str],
    quota_bytes: int | None = None,
) -> tuple[list[tuple[str | uuid.UUID, list[FetchPartitionResult]]], int, bool]:
    """(results by topic, record bytes found, whether any partition failed) for the
    ``fetched`` partitions (what the request names, or its fetch session's); a
    ``replica_id`` of 0 or more is the fetching follower's; ``refused`` topics are
    answered TOPIC_AUTHORIZATION_FAILED; ``quota_bytes``, what the client's fetch quota
    lets one response hold (None: no quota)."""
    # Bounded by the broker's fetch.max.bytes too, whatever the client asks (KIP-74).
    budget = max(min(int(request.max_bytes), services.config.fetch_max_bytes), 0)
    if quota_bytes is not None:
        budget = min(budget, quota_bytes)
    total = 0
    failed = False
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    topics: TopicResults = []
    leader_hints = int(request.__version__) >= FIRST_CURRENT_LEADER_VERSION
    for fetch_topic in fetched:
        name = _topic_name(services, fetch_topic.key)
        results: list[FetchPartitionResult] = []
        for wanted in fetch_topic.partitions:
            result = FetchPartitionResult(wanted.partition)
            results.append(result)
            try:
                if name is None:
                    raise UnknownTopicId(f"no topic has id {fetch_topic.key}")
                if name in refused:
                    raise TopicAuthorizationFailed(f"may not read topic {name!r}")
                source, view = services.topics.resolve(TopicPartition(name, wanted.partition))
                partition = services.replicas.get(source)
                partition.check_leader(getattr(wanted, "current_leader_epoch", -1))
                if view is not None:
                    partition.log.enable_tag_summaries()  # for the batches to come
                partition_log = partition.log
                high_watermark = partition.high_watermark
                last_stable_offset = partition_log.last_stable_offset
                result.high_watermark = high_watermark
                result.last_stable_offset = last_stable_offset
                result.log_start_offset = partition_log.log_start_offset
                result.aborted_transactions = [] if read_committed else None
                offset = int(wanted.fetch_offset)
                last_fetched_epoch = int(getattr(wanted, "last_fetched_epoch", -1))
                if last_fetched_epoch >= 0:
                    result.diverging_epoch = _diverging_epoch(
                        partition_log, offset, last_fetched_epoch
                    )
                    if result.diverging_epoch is not None:
                        failed = True  # answer at once: the fetcher must truncate first
                        continue
                if not partition_log.log_start_offset <= offset <= partition_log.log_end_offset:
                    raise errors.OffsetOutOfRange(
                        f"offset {offset} is outside [{partition_log.log_start_offset}, "
                        f"{partition_log.log_end_offset}]"
                    )
                # A follower reads up to the log end; its fetch offset is its log end. A
                # read_committed consumer reads up to the last stable offset.
                readable_end = last_stable_offset if read_committed else high_watermark
                if replica_id >= 0:
                    partition.record_follower_fetch(replica_id, offset)
                    result.high_watermark = result.last_stable_offset = partition.high_watermark
                    readable_end = partition_log.log_end_offset
                limit = min(int(wanted.partition_max_bytes), budget)
                if offset >= readable_end or (limit <= 0 and total > 0):
                    continue
                read = partition_log.read(
                    offset, max(limit, 0), max_offset=readable_end, min_one_batch=total == 0
                )
                if read_committed and replica_id < 0:
                    result.aborted_transactions = [
                        (aborted.producer_id, aborted.first_offset)
                        for aborted in partition_log.aborted_transactions(offset, readable_end)
                    ]
            except KafkaError as e:
                result.error_code = e.code
                if leader_hints and name is not None and e.code in _LEADER_CHANGE_ERRORS:
                    result.current_leader = _current_leader(
                        services, TopicPartition(name, wanted.partition)
                    )
                failed = True
                continue
            if view is None:
                result.records = read.slices
            else:
                result.records = filter_records(
                    read.slices, view.filter, partition.log.tag_summaries
                )
            total += result.records_size_bytes
            budget -= read.size_bytes
        topics.append((fetch_topic.key, results))
    return topics, total, failed


def _leader_endpoints(
    services: FetchServices,
    topics: TopicResults,
    listener: str,
) -> list[NodeEndpoint]:
    """Endpoints of the brokers named as current leaders (v16+), on the listener the
    request came in on."""
    leaders = {
        result.current_leader[0]
        for _, results in topics
        for result in results
        if result.current_leader is not None
    }
    return [
        (b.node_id, *b.address(listener), b.rack)
        for b in services.topics.image.live_brokers()
        if b.node_id in leaders
    ]


def _diverging_epoch(
    partition_log: PartitionLog, fetch_offset: int, last_fetched_epoch: int
) -> tuple[int, int] | None:
    """(epoch, end offset) if the fetcher's log diverged from this one, else None."""
    if fetch_offset < partition_log.log_start_offset:
        raise errors.OffsetOutOfRange(
            f"offset {fetch_offset} is below the log start offset {partition_log.log_start_offset}"
        )
    epoch, end_offset = partition_log.end_offset_for_epoch(last_fetched_epoch)
    if epoch < 0 or end_offset < 0:
        raise errors.OffsetOutOfRange(
            f"cannot tell where the last fetched epoch {last_fetched_epoch} ends"
        )
    if epoch < last_fetched_epoch or end_offset < fetch_offset:
        return epoch, end_offset
    return None


def _count_fetched(
    services: FetchServices,
    fetched: Sequence[FetchedTopic],
    topics: TopicResults,
    replica_id: int,
) -> None:
    """Count the record bytes sent by topic, and the partitions' errors (the dispatcher
    cannot see them in a response framed here)."""
    traffic = services.traffic
    fetcher = FOLLOWER if replica_id >= 0 else CONSUMER
    errors_found = []
    # One entry of ``topics`` per fetched topic, in its order (_read_partitions).
    for fetch_topic, (_, results) in zip(fetched, topics, strict=False):
        size = 0
        for result in results:
            size += result.records_size_bytes
            if result.error_code:
                errors_found.append(int(result.error_code))
        if size:
            name = _topic_name(services, fetch_topic.key)
            if name is not None:
                traffic.bytes_out[name, fetcher] += size
    if errors_found:
        services.request_metrics.count_errors("Fetch", errors_found)


def _high_watermark_news(session: FetchSession | None, topics: TopicResults) -> bool:
    """Whether a partition of a follower's session has a high watermark other than the
    one the session last answered (KIP-1166's rule: the follower must learn it now)."""
    if session is None:
        return False
    for topic, results in topics:
        for result in results:
            cached = session.partitions.get(SessionPartition(topic, result.partition_index))
            if cached is not None and cached.high_watermark != result.high_watermark:
                return True
    return False


async def _wait_in_session(
    purgatory: Purgatory,
    keys: list[Hashable],
    due: Callable[[], bool],
    high_watermark_news: Callable[[], bool],
    wait_ms: int,
) -> None:
    """A follower's session fetch waits for records as any follower's does, but once a
    high watermark moved past what its session last told it, at most
    :data:`FOLLOWER_HIGH_WATERMARK_LINGER_MS` more: records coming by then carry the
    news (no answer and fetch spent on it alone), else it is answered without them."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_ms / 1000
    news = False

    def due_or_news() -> bool:
        nonlocal news
        if due():
            return True
        news = high_watermark_news()
        return news

    if not await purgatory.wait_until(keys, due_or_news, wait_ms / 1000) or not news:
        return
    linger_s = min(deadline - loop.time(), FOLLOWER_HIGH_WATERMARK_LINGER_MS / 1000)
    if linger_s > 0:
        await purgatory.wait_until(keys, due, linger_s)


async def handle_fetch(services: FetchServices, context: RequestContext, request: Any) -> Any:
    replica_id = replica_id_of(request)
    version = context.header.api_version
    sessions = services.fetch_sessions
    now_ms = services.clock.monotonic_ms()
    fetch_context = sessions.context(request, replica_id >= 0, now_ms)
    if fetch_context.error_code != ErrorCode.none:
        services.request_metrics.count_errors("Fetch", [int(fetch_context.error_code)])
        return encode_fetch_response(
            version, context.header.correlation_id, [], error_code=fetch_context.error_code
        )
    fetched = fetch_context.topics
    follower_session = fetch_context.session if replica_id >= 0 else None
    quotas = services.quotas
    quota_bytes = None if quotas is None or replica_id >= 0 else quotas.fetch_bytes_max(context)
    refused = _refused_topics(services, context, fetched, replica_id)
    topics, total, failed = _read_partitions(
        services, request, fetched, replica_id, refused, quota_bytes
    )
    min_bytes = max(int(request.min_bytes), 1)
    wait_ms = min(max(millis(request.max_wait), 0), FETCH_WAIT_MS_MAX)
    if total < min_bytes and not failed and wait_ms > 0:
        # Consumers wait for the high watermark to move, followers for appends (and, in
        # a session, for the high watermark too: the session knows what they last
        # learnt of it).
        partitions = [
            TopicPartition(name, p.partition)
            for t in fetched
            if (name := _topic_name(services, t.key)) is not None
            for p in t.partitions
        ]
        keys: list[Hashable] = list(partitions)
        if replica_id >= 0:
            keys = [log_end_key(tp) for tp in partitions]
            if follower_session is not None:
                keys += partitions

        def due() -> bool:
            """Read again; whether the answer is due."""
            nonlocal topics, total, failed
            topics, total, failed = _read_partitions(
                services, request, fetched, replica_id, refused, quota_bytes
            )
            return total >= min_bytes or failed

        purgatory = services.purgatory
        if follower_session is None:
            await purgatory.wait_until(keys, due, wait_ms / 1000)
        else:
            session = follower_session
            await _wait_in_session(
                purgatory, keys, due, lambda: _high_watermark_news(session, topics), wait_ms
            )
    _count_fetched(services, fetched, topics, replica_id)
    session_id, topics = sessions.answer(
        fetch_context, request, topics, replica_id >= 0, services.clock.monotonic_ms()
    )
    return encode_fetch_response(
        version,
        context.header.correlation_id,
        topics,
        error_code=ErrorCode.none,
        session_id=session_id,
        node_endpoints=_leader_endpoints(services, topics, context.connection.listener_name),
    )
