"""Planning reads on the driver: which partitions, which offset ranges, how many tasks.

The driver asks the brokers (through :mod:`sluice.client`) for the partitions of the
subscribed topics and for each partition's log start offset and high watermark, then
cuts the work into :class:`OffsetRange` s, one Spark task each::

    topic-partition  [start ─────────────────────── end)
    minPartitions=3  [start ──── a)[a ──── b)[b ──── end)   largest range halved first

Streaming offsets are JSON-able dicts ``{"topic": {"0": next_offset, ...}}`` (string
partition keys, because JSON object keys are strings); :func:`rate_limited_end`
spreads ``maxOffsetsPerTrigger`` over partitions in proportion to their backlog, as
Spark's Kafka source does.

The pure functions here take plain data and are unit-tested without a broker.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sluice.client.admin import NO_OFFSET, Admin, OffsetSpec
from sluice.client.cluster import Cluster
from sluice.common import errors
from sluice.common.ids import TopicPartition
from sluice.spark.options import EARLIEST, LATEST, OffsetChoice, SluiceOptionError, Subscription

StreamOffset = dict[str, dict[str, int]]
"""``{"topic": {"partition": offset}}``: the next offset to read of each partition."""


@dataclass(frozen=True, slots=True)
class PartitionBounds:
    """What a partition holds now: ``[log_start_offset, high_watermark)``."""

    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records ``[start, end)`` of one partition: the work of one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


async def subscribed_partitions(
    cluster: Cluster, subscription: Subscription
) -> list[TopicPartition]:
    """The partitions to read, sorted; raises ``UnknownTopicOrPartition`` naming a
    subscribed or assigned topic (or partition) that does not exist."""
    admin = Admin(cluster)
    if subscription.pattern is not None:
        pattern = re.compile(subscription.pattern)
        return sorted(
            TopicPartition(topic.name, p.partition)
            for topic in await admin.list_topics()
            if pattern.fullmatch(topic.name)
            for p in topic.partitions
        )
    if subscription.assigned:
        for topic_partition in subscription.assigned:
            described = await admin.describe_topic(topic_partition.topic)
            described.partition(topic_partition.partition)  # raises if absent
        return sorted(set(subscription.assigned))
    found: list[TopicPartition] = []
    for name in subscription.topics:
        described = await admin.describe_topic(name)
        found.extend(TopicPartition(name, p.partition) for p in described.partitions)
    return sorted(found)


async def partition_bounds(
    cluster: Cluster, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, PartitionBounds]:
    """Log start offset and high watermark of each partition."""
    wanted = list(partitions)
    if not wanted:
        return {}
    admin = Admin(cluster)
    earliest = await admin.list_offsets(wanted, OffsetSpec.EARLIEST)
    latest = await admin.list_offsets(wanted, OffsetSpec.LATEST)
    return {
        tp: PartitionBounds(earliest[tp].offset, latest[tp].offset)
        for tp in wanted
        if tp in earliest and tp in latest
    }


async def offsets_for_timestamp(
    cluster: Cluster, partitions: Iterable[TopicPartition], timestamp_ms: int
) -> dict[TopicPartition, int]:
    """First offset at or after ``timestamp_ms`` per partition; LATEST where none is."""
    wanted = list(partitions)
    if not wanted:
        return {}
    listed = await Admin(cluster).list_offsets(wanted, timestamp_ms)
    return {tp: (LATEST if listed[tp].offset == NO_OFFSET else listed[tp].offset) for tp in listed}


def resolve_offset(
    offset: int, bounds: PartitionBounds, topic_partition: TopicPartition, *, option: str
) -> int:
    """An option's offset (-2, -1 or an offset) as a concrete offset within the log."""
    if offset == EARLIEST:
        return bounds.log_start_offset
    if offset == LATEST:
        return bounds.high_watermark
    if offset > bounds.high_watermark:
        raise SluiceOptionError(
            f"option {option}: offset {offset} of {topic_partition.topic}-"
            f"{topic_partition.partition} is past its end ({bounds.high_watermark})"
        )
    return offset


def check_named_partitions(
    choice: OffsetChoice, partitions: Iterable[TopicPartition], option: str
) -> None:
    """Offsets JSON must only name partitions that are being read."""
    known = set(partitions)
    for topic_partition, _ in choice.per_partition:
        if topic_partition not in known:
            raise SluiceOptionError(
                f"option {option} names {topic_partition.topic}-{topic_partition.partition}, "
                "which is not among the partitions read"
            )


def data_loss(message: str, *, fail_on_data_loss: bool) -> None:
    """Offsets that were asked for are gone (retention, or a truncated log)."""
    if fail_on_data_loss:
        raise errors.OffsetOutOfRange(
            f"{message}; some data may have been lost. Set failOnDataLoss=false to "
            "skip missing offsets instead of failing"
        )


def split_for_min_partitions(
    ranges: list[OffsetRange], min_partitions: int | None
) -> list[OffsetRange]:
    """Halve the largest range until there are ``min_partitions`` ranges (or every range
    is a single offset). Ranges stay sorted by topic, partition, start."""
    result = [r for r in ranges if r.size > 0]
    if min_partitions is None:
        return result
    while len(result) < min_partitions:
        largest = max(result, key=lambda r: r.size, default=None)
        if largest is None or largest.size < 2:
            break
        middle = largest.start + largest.size // 2
        result.remove(largest)
        result.append(OffsetRange(largest.topic, largest.partition, largest.start, middle))
        result.append(OffsetRange(largest.topic, largest.partition, middle, largest.end))
    return sorted(result, key=lambda r: (r.topic, r.partition, r.start))


def to_stream_offset(offsets: Mapping[TopicPartition, int]) -> StreamOffset:
    result: StreamOffset = {}
    for tp in sorted(offsets):
        result.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return result


def from_stream_offset(offset: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {
        TopicPartition(topic, int(partition)): int(value)
        for topic, partitions in offset.items()
        for partition, value in partitions.items()
    }


def rate_limited_end(
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    max_offsets: int | None,
) -> dict[TopicPartition, int]:
    """End offsets reading at most ``max_offsets`` records in total, shared between
    partitions in proportion to their backlog (each backlog's share rounded down, the
    remainder given out largest backlog first, so the total is exactly the cap)."""
    backlog = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(backlog.values())
    if max_offsets is None or total <= max_offsets:
        return dict(latest)
    shares = {tp: backlog[tp] * max_offsets // total for tp in backlog}
    remainder = max_offsets - sum(shares.values())
    for tp in sorted(backlog, key=lambda tp: (-backlog[tp], tp)):
        if remainder == 0:
            break
        if shares[tp] < backlog[tp]:
            shares[tp] += 1
            remainder -= 1
    return {tp: start.get(tp, latest[tp]) + shares[tp] for tp in latest}
