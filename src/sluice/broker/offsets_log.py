"""The ``__consumer_offsets`` partitions hosted here, as the group coordinator sees them.

Appends go through the same leader path as any produce with acks=all: one batch per
call, answered once the high watermark has passed it, so a committed offset is never
acknowledged before it is durable under the topic's settings. Loading reads a partition
from its log start to its high watermark and decodes every record.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from sluice.broker.purgatory import Purgatory
from sluice.broker.replica_manager import ReplicaManager
from sluice.common import errors
from sluice.common.clock import Clock
from sluice.common.ids import TopicPartition
from sluice.protocol.records.builder import RecordInput, build_batch, decode_batches

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_APPEND_TIMEOUT_MS = 5_000
"""How long a group write may wait for the in-sync replicas (Kafka's
offsets.commit.timeout.ms)."""
LOAD_READ_BYTES = 1024 * 1024
"""Bytes read per step while loading a partition."""


class PartitionOffsetsLog:
    def __init__(
        self,
        replicas: ReplicaManager,
        purgatory: Purgatory,
        clock: Clock,
        partition_count: int,
    ) -> None:
        self._replicas = replicas
        self._purgatory = purgatory
        self._clock = clock
        self._partition_count = partition_count

    @property
    def partition_count(self) -> int:
        return self._partition_count

    async def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        topic_partition = TopicPartition(OFFSETS_TOPIC, partition)
        hosted = self._replicas.find(topic_partition)
        if hosted is None:
            raise errors.NotLeaderOrFollower(f"{topic_partition} is not hosted here")
        batch = build_batch(
            [RecordInput(key, value) for key, value in records],
            base_timestamp_ms=self._clock.wall_ms(),
        )
        result = hosted.append(bytearray(batch), acks=-1)
        wanted = result.last_offset + 1
        committed = await self._purgatory.wait_until(
            [topic_partition],
            lambda: hosted.has_high_watermark_reached(wanted),
            OFFSETS_APPEND_TIMEOUT_MS / 1000,
        )
        if not committed:
            raise errors.RequestTimedOut(f"{topic_partition}: group write not replicated in time")

    def read(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        hosted = self._replicas.find(TopicPartition(OFFSETS_TOPIC, partition))
        if hosted is None:
            return
        log = hosted.log
        offset = log.log_start_offset
        end = hosted.high_watermark
        while offset < end:
            chunk = log.read(offset, LOAD_READ_BYTES, max_offset=end).read_bytes()
            start = offset
            for batch in decode_batches(chunk):
                if not batch.header.is_control:
                    for record in batch.records:
                        if record.offset >= offset and record.key is not None:
                            yield record.key, record.value
                offset = batch.header.next_offset
            if offset == start:
                raise errors.CorruptMessage(f"{OFFSETS_TOPIC}-{partition}: no batch at {offset}")
