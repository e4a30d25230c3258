"""The partitions of a coordinator's internal topic hosted here (``__consumer_offsets``
for groups, …), as the coordinator runtime sees them: the broker's
:class:`~sluice.coordinator.api.CoordinatorLog`.

Appends go through the same leader path as any produce with acks=all: one batch per
call, answered once the high watermark has passed it, so a coordinator's write (a
committed offset, …) is never acknowledged before it is durable under the topic's
settings. A transactional append (TxnOffsetCommit) is a transactional batch of its
producer, so the partition's producer state holds its transaction open until the
marker. Loading reads a partition from its log start to its log end and decodes every
record and marker (a new leader's high watermark may lag behind what its predecessor
committed).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from sluice.broker.replication.partition import settled_acks_all
from sluice.broker.replication.purgatory import Purgatory
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.common import errors
from sluice.common.clock import Clock
from sluice.common.ids import TopicPartition
from sluice.coordinator.api import (
    LoggedRecord,
    Record,
    TransactionalRecord,
    TransactionMarker,
)
from sluice.protocol.records.batch import NO_SEQUENCE
from sluice.protocol.records.builder import (
    ControlRecordType,
    RecordInput,
    build_batch,
    decode_batches,
    decode_control_record,
)

LOAD_READ_BYTES = 1024 * 1024
"""Bytes read per step while loading a partition."""


class PartitionCoordinatorLog:
    """``topic``'s partitions in the replica manager; an append waits for the in-sync
    replicas at most ``append_timeout_ms``."""

    def __init__(
        self,
        topic: str,
        replicas: ReplicaManager,
        purgatory: Purgatory,
        clock: Clock,
        partition_count: int,
        append_timeout_ms: int,
    ) -> None:
        self._topic = topic
        self._replicas = replicas
        self._purgatory = purgatory
        self._clock = clock
        self._partition_count = partition_count
        self._append_timeout_ms = append_timeout_ms

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def partition_count(self) -> int:
        return self._partition_count

    async def append(
        self,
        partition: int,
        records: Sequence[Record],
        transaction: tuple[int, int] | None = None,
    ) -> None:
        topic_partition = TopicPartition(self._topic, partition)
        hosted = self._replicas.find(topic_partition)
        if hosted is None:
            raise errors.NotLeaderOrFollower(f"{topic_partition} is not hosted here")
        producer_id, producer_epoch = (-1, -1) if transaction is None else transaction
        batch = build_batch(
            [RecordInput(key, value) for key, value in records],
            base_timestamp_ms=self._clock.wall_ms(),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=NO_SEQUENCE,
            transactional=transaction is not None,
        )
        result = hosted.append(bytearray(batch), acks=-1)
        outcome = await settled_acks_all(
            self._purgatory,
            hosted,
            result.last_offset + 1,
            hosted.leader_epoch,
            self._append_timeout_ms / 1000,
        )
        if outcome is False:
            raise errors.RequestTimedOut(
                f"{topic_partition}: coordinator write not replicated in time"
            )
        if isinstance(outcome, errors.KafkaError):
            raise outcome

    def read(self, partition: int) -> Iterator[LoggedRecord]:
        hosted = self._replicas.find(TopicPartition(self._topic, partition))
        if hosted is None:
            return
        log = hosted.log
        offset = log.log_start_offset
        # To the log end, as Kafka's coordinator loads: a new leader's high watermark
        # may still lag behind records the old leader had committed.
        end = log.log_end_offset
        while offset < end:
            chunk = log.read(offset, LOAD_READ_BYTES, max_offset=end).read_bytes()
            start = offset
            for batch in decode_batches(chunk):
                header = batch.header
                if header.is_control:
                    first = batch.records[0] if batch.records else None
                    if first is not None and first.offset >= offset:
                        yield _marker(header.producer_id, first.key, first.value)
                elif header.is_transactional:
                    for record in batch.records:
                        if record.offset >= offset and record.key is not None:
                            yield TransactionalRecord(header.producer_id, record.key, record.value)
                else:
                    for record in batch.records:
                        if record.offset >= offset and record.key is not None:
                            yield record.key, record.value
                offset = header.next_offset
            if offset == start:
                raise errors.CorruptMessage(f"{self._topic}-{partition}: no batch at {offset}")


def _marker(producer_id: int, key: bytes | None, value: bytes | None) -> TransactionMarker:
    marker, _coordinator_epoch = decode_control_record(key, value)
    return TransactionMarker(producer_id, marker is ControlRecordType.COMMIT)
