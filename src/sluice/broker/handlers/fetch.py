"""Fetch v4–11: long poll, byte limits, zero-copy record slices.

The response lists every requested partition (the Java client drops a response that
does not). Data is read only below the high watermark, whole batches at a time; the
first batch of the response may exceed the limits so a consumer can always progress
(KIP-74). When less than ``min_bytes`` is available and nothing failed, the request waits
in the purgatory until an append wakes it or ``max_wait_ms`` passes. Fetch sessions
(KIP-227) are declined by answering session id 0: clients then send full fetches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.broker.dispatcher import handler
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition
from sluice.common.limits import FETCH_WAIT_MS_MAX
from sluice.protocol.codec import RequestHeader
from sluice.protocol.fetch_response import FetchPartitionResult, encode_fetch_response
from sluice.protocol.messages import millis
from sluice.protocol.versions import ApiKey

if TYPE_CHECKING:
    from sluice.broker.app import Broker

READ_COMMITTED = 1


def _read_partitions(
    broker: Broker, request: Any
) -> tuple[list[tuple[str, list[FetchPartitionResult]]], int, bool]:
    """(results by topic, record bytes found, whether any partition failed)."""
    # Bounded by the broker's fetch.max.bytes too, whatever the client asks (KIP-74).
    budget = max(min(int(request.max_bytes), broker.config.fetch_max_bytes), 0)
    total = 0
    failed = False
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    topics: list[tuple[str, list[FetchPartitionResult]]] = []
    for fetch_topic in request.topics:
        results: list[FetchPartitionResult] = []
        for wanted in fetch_topic.partitions:
            result = FetchPartitionResult(wanted.partition)
            results.append(result)
            try:
                partition = broker.replicas.get(TopicPartition(fetch_topic.topic, wanted.partition))
                partition.check_leader(getattr(wanted, "current_leader_epoch", -1))
                partition_log = partition.log
                high_watermark = partition.high_watermark
                result.high_watermark = high_watermark
                result.last_stable_offset = high_watermark
                result.log_start_offset = partition_log.log_start_offset
                result.aborted_transactions = [] if read_committed else None
                offset = int(wanted.fetch_offset)
                if not partition_log.log_start_offset <= offset <= partition_log.log_end_offset:
                    raise errors.OffsetOutOfRange(
                        f"offset {offset} is outside [{partition_log.log_start_offset}, "
                        f"{partition_log.log_end_offset}]"
                    )
                limit = min(int(wanted.partition_max_bytes), budget)
                if offset >= high_watermark or (limit <= 0 and total > 0):
                    continue
                read = partition_log.read(
                    offset, max(limit, 0), max_offset=high_watermark, min_one_batch=total == 0
                )
            except KafkaError as e:
                result.error_code = e.code
                failed = True
                continue
            result.records = read.slices
            total += read.size_bytes
            budget -= read.size_bytes
        topics.append((fetch_topic.topic, results))
    return topics, total, failed


@handler(ApiKey.FETCH)
async def handle_fetch(broker: Broker, header: RequestHeader, request: Any) -> Any:
    topics, total, failed = _read_partitions(broker, request)
    min_bytes = max(int(request.min_bytes), 1)
    wait_ms = min(max(millis(request.max_wait), 0), FETCH_WAIT_MS_MAX)
    if total < min_bytes and not failed and wait_ms > 0:
        keys = [TopicPartition(t.topic, p.partition) for t in request.topics for p in t.partitions]

        def enough() -> bool:
            nonlocal topics, total, failed
            topics, total, failed = _read_partitions(broker, request)
            return total >= min_bytes or failed

        await broker.purgatory.wait_until(keys, enough, wait_ms / 1000)
    return encode_fetch_response(
        header.api_version, header.correlation_id, topics, error_code=ErrorCode.none
    )
