"""Dead-letter topics as an operator sees them: which topics hold dead letters, what
each dead letter is (where it came from, after how many attempts, why), and replaying
them to where they came from (what ``sluice dlq`` does).

A replay reads the dead-letter topic from where the replay group
(``sluice-dlq-replay``, or another) last stopped to the end the topic had when the replay
began, and produces each record to its original topic (the ``x-sluice-original-topic``
header, see :mod:`sluice.client.retries`) or to another, with its key, value, timestamp
and own headers (not those of the retry convention, so it starts afresh). Each record
and the replay group's offsets past them commit in one transaction (a transaction per
batch read), so running a replay again, or after a crash, replays nothing twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sluice.client.admin import Admin, OffsetSpec
from sluice.client.cluster import Cluster
from sluice.client.consumer_api import Consumer, ConsumerRecord
from sluice.client.producer_api import Producer
from sluice.client.retries import ERROR, attempts_of, origin_of, own_headers
from sluice.common.ids import TopicPartition

DEAD_LETTER_SUFFIX = "-dlq"
REPLAY_GROUP = "sluice-dlq-replay"


@dataclass(frozen=True)
class DeadLetter:
    record: ConsumerRecord
    original_topic: str
    original_partition: int
    original_offset: int
    attempts: int
    error: str


async def dead_letter_topics(
    cluster: Cluster, bootstrap_servers: str | Sequence[str]
) -> dict[str, int]:
    """Topics named ``…-dlq`` and how many dead letters each holds (counted by reading
    them: offsets also count the transactions' markers)."""
    admin = Admin(cluster)
    names = [t.name for t in await admin.list_topics() if t.name.endswith(DEAD_LETTER_SUFFIX)]
    counts: dict[str, int] = {}
    for name in sorted(names):
        partitions = await _partitions(admin, name)
        ends = await admin.list_offsets(partitions, OffsetSpec.LATEST)
        async with Consumer(
            bootstrap_servers=bootstrap_servers,
            client_id="sluice-dlq",
            isolation_level="read_committed",
        ) as consumer:
            consumer.assign(partitions)
            consumer.seek_to_beginning(*partitions)
            counts[name] = len(await _read_to(consumer, {tp: ends[tp].offset for tp in partitions}))
    return counts


async def _partitions(admin: Admin, topic: str) -> list[TopicPartition]:
    metadata = await admin.describe_topic(topic)
    return [TopicPartition(topic, p.partition) for p in metadata.partitions]


def as_dead_letter(record: ConsumerRecord) -> DeadLetter:
    origin = origin_of(record)
    error = next((v for k, v in reversed(record.headers) if k == ERROR), None)
    return DeadLetter(
        record,
        origin.topic,
        origin.partition,
        origin.offset,
        attempts_of(record),
        (error or b"").decode(errors="replace"),
    )


async def read_dead_letters(
    cluster: Cluster, bootstrap_servers: str | Sequence[str], topic: str, *, limit: int
) -> list[DeadLetter]:
    """The first ``limit`` dead letters of ``topic`` (by partition, then offset)."""
    admin = Admin(cluster)
    partitions = await _partitions(admin, topic)
    ends = await admin.list_offsets(partitions, OffsetSpec.LATEST)
    found: list[DeadLetter] = []
    async with Consumer(
        bootstrap_servers=bootstrap_servers,
        client_id="sluice-dlq",
        isolation_level="read_committed",
    ) as consumer:
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        for record in await _read_to(consumer, {tp: ends[tp].offset for tp in partitions}):
            found.append(as_dead_letter(record))
    found.sort(key=lambda d: (d.record.partition, d.record.offset))
    return found[:limit]


async def _read_to(consumer: Consumer, ends: dict[TopicPartition, int]) -> list[ConsumerRecord]:
    """Every record before ``ends``, from each partition's current position."""
    records: list[ConsumerRecord] = []
    left = {tp for tp, end in ends.items() if await consumer.position(tp) < end}
    while left:
        batches = await consumer.getmany(timeout_ms=500)
        for tp, batch in batches.items():
            records.extend(r for r in batch if r.offset < ends[tp])
        left = {tp for tp in left if await consumer.position(tp) < ends[tp]}
    return records


async def replay_dead_letters(
    cluster: Cluster,
    bootstrap_servers: str | Sequence[str],
    topic: str,
    *,
    to_topic: str | None = None,
    group_id: str = REPLAY_GROUP,
) -> int:
    """Produce the dead letters of ``topic`` not replayed yet (by ``group_id``) to their
    original topics (or ``to_topic``); returns how many were replayed."""
    admin = Admin(cluster)
    partitions = await _partitions(admin, topic)
    ends = await admin.list_offsets(partitions, OffsetSpec.LATEST)
    replayed = 0
    async with (
        Consumer(
            bootstrap_servers=bootstrap_servers,
            client_id="sluice-dlq-replay",
            group_id=group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        ) as consumer,
        Producer(
            bootstrap_servers,
            client_id="sluice-dlq-replay",
            transactional_id=f"{group_id}-{topic}-{uuid.uuid4().hex}",
        ) as producer,
    ):
        consumer.assign(partitions)
        end = {tp: ends[tp].offset for tp in partitions}
        left = {tp for tp in partitions if await consumer.position(tp) < end[tp]}
        while left:
            batches = await consumer.getmany(timeout_ms=500)
            records = [r for tp, batch in batches.items() for r in batch if r.offset < end[tp]]
            if records:
                await producer.begin_transaction()
                for record in records:
                    await producer.send(
                        to_topic or as_dead_letter(record).original_topic,
                        record.value,
                        key=record.key,
                        headers=own_headers(record),
                        timestamp_ms=record.timestamp,
                    )
                offsets: dict[TopicPartition, int] = {}
                for record in records:
                    offsets[record.topic_partition] = record.offset + 1
                await producer.send_offsets_to_transaction(offsets, group_id)
                await producer.commit_transaction()
                replayed += len(records)
            left = {tp for tp in left if await consumer.position(tp) < end[tp]}
    return replayed
