"""Fetch v4–12: long poll, byte limits, zero-copy record slices.

The response lists every requested partition (the Java client drops a response that
does not). Data is read only below the high watermark, whole batches at a time; the
first batch of the response may exceed the limits so a consumer can always progress
(KIP-74). When less than ``min_bytes`` is available and nothing failed, the request waits
in the purgatory until an append wakes it or ``max_wait_ms`` passes. Fetch sessions
(KIP-227) are declined by answering session id 0: clients then send full fetches.

From v12 a fetcher may send the epoch of the last batch it fetched
(``last_fetched_epoch``). If that epoch ends here before the fetch offset (or is unknown
here), its log has diverged from this one: the partition is answered with the
``diverging_epoch`` (the largest epoch here not above it, and where that epoch ends) and
no records, so the fetcher truncates, as Kafka's leader does. A fetch offset below the
log start is OFFSET_OUT_OF_RANGE first.
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
    from sluice.storage.log import PartitionLog

READ_COMMITTED = 1


def _read_partitions(
    broker: Broker, request: Any
) -> tuple[list[tuple[str, list[FetchPartitionResult]]], int, bool]:
    """(results by topic, record bytes found, whether any partition failed)."""
    budget = max(int(request.max_bytes), 0)
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
