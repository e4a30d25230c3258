"""Dead letters of share groups (KIP-1191): a record a consumer rejected, or one that
reached the group's delivery-count limit, is copied to the group's dead-letter topic
(``errors.deadletterqueue.topic.name``) before the share-partition forgets it.

The dead-letter record carries where it came from in headers (``__dlq.errors.topic``,
``__dlq.errors.partition``, ``__dlq.errors.offset``, ``__dlq.errors.group.id``,
``__dlq.errors.delivery.count``, ``__dlq.errors.reason``: ``rejected`` or
``delivery-count-limit``); with ``errors.deadletterqueue.copy.record.enable=true`` it also
carries the record's key, value, timestamp and headers. It goes to the dead-letter topic's
partition ``source partition mod partition count`` (the order of one source partition is
kept), through that partition's leader with acks=all: here, or in a Produce to the
leader's broker. A write that fails is reported to the caller, which keeps the records
unfinished (they are delivered again and archived again later): a dead letter may be
written twice, never lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sluice.broker.network.peer_connection import PeerUnavailable
from sluice.broker.network.peers import Peers
from sluice.broker.replication.partition import settled_acks_all
from sluice.broker.replication.purgatory import Purgatory
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.cluster.image import MetadataImage
from sluice.cluster.model import TopicMetadata
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition
from sluice.protocol.messages import has_field, make, request_module
from sluice.protocol.records.batch import iter_batches
from sluice.protocol.records.builder import ConsumerRecord, RecordInput, build_batch, decode_batch
from sluice.protocol.versions import ApiKey
from sluice.share.partition import Archived
from sluice.storage.log import PartitionLog

log = logging.getLogger(__name__)

WRITE_TIMEOUT_MS = 30_000
"""How long a dead-letter write may wait for the in-sync replicas of its partition."""
READ_BYTES = 1024 * 1024

HEADER_PREFIX = "__dlq.errors."


@dataclass(frozen=True)
class DeadLetterTarget:
    topic: str
    copy_record: bool


def _source_records(
    partition_log: PartitionLog, offsets: Sequence[int], upper: int
) -> dict[int, ConsumerRecord]:
    """The records at ``offsets`` read back from the log (below ``upper``); an offset
    with no record (compacted away) is missing from the answer."""
    wanted = set(offsets)
    found: dict[int, ConsumerRecord] = {}
    offset, last = max(min(wanted), partition_log.log_start_offset), max(wanted)
    while offset <= last and offset < upper:
        read = partition_log.read(offset, READ_BYTES, max_offset=upper)
        data = b"".join(piece.read() for piece in read.slices)
        progressed = False
        for position, header in iter_batches(data):
            if any(header.base_offset <= o <= header.last_offset for o in wanted):
                batch = decode_batch(data[position : position + header.size_bytes])
                found.update((r.offset, r) for r in batch.records if r.offset in wanted)
            if header.last_offset >= offset:
                offset, progressed = header.last_offset + 1, True
        if not progressed:
            break
    return found


def dead_letter_records(
    source: TopicPartition,
    group_id: str,
    archived: Sequence[Archived],
    records: dict[int, ConsumerRecord],
    copy_record: bool,
) -> list[RecordInput]:
    """The dead-letter records of ``archived`` records of ``source``."""
    letters = []
    for item in archived:
        record = records.get(item.offset)
        context = [
            (HEADER_PREFIX + "topic", source.topic.encode()),
            (HEADER_PREFIX + "partition", str(source.partition).encode()),
            (HEADER_PREFIX + "offset", str(item.offset).encode()),
            (HEADER_PREFIX + "group.id", group_id.encode()),
            (HEADER_PREFIX + "delivery.count", str(item.delivery_count).encode()),
            (HEADER_PREFIX + "reason", item.reason.value.encode()),
        ]
        if copy_record and record is not None:
            letters.append(
                RecordInput(
                    record.key,
                    record.value,
                    (*record.headers, *context),
                    timestamp_ms=record.timestamp_ms,
                )
            )
        else:
            letters.append(RecordInput(None, None, context))
    return letters


class TopicEnsurer(Protocol):
    """What the writer needs of the broker's topics (``broker.topics.TopicManager``): a
    dead-letter topic that does not exist yet is auto-created with the broker's defaults."""

    async def ensure_all(
        self, names: Iterable[str]
    ) -> Mapping[str, TopicMetadata | KafkaError | None]: ...


class DeadLetterWriter:
    def __init__(
        self,
        node_id: int,
        replicas: ReplicaManager,
        topics: TopicEnsurer,
        purgatory: Purgatory,
        peers: Peers,
        image: Callable[[], MetadataImage],
    ) -> None:
        self._node_id = node_id
        self._replicas = replicas
        self._topics = topics
        self._purgatory = purgatory
        self._peers = peers
        self._image = image

    async def write(
        self,
        target: DeadLetterTarget,
        source: TopicPartition,
        group_id: str,
        archived: Sequence[Archived],
    ) -> None:
        """Write the dead letters of ``archived`` (records of ``source``, led here) and
        return once they are committed. Raises KafkaError if they were not."""
        if not archived:
            return
        partition = self._replicas.get(source)
        records = _source_records(
            partition.log, [a.offset for a in archived], partition.high_watermark
        )
        letters = dead_letter_records(source, group_id, archived, records, target.copy_record)
        topic = (await self._topics.ensure_all([target.topic]))[target.topic]
        if topic is None:
            raise errors.UnknownTopicOrPartition(
                f"dead-letter topic {target.topic!r} does not exist and may not be created"
            )
        if isinstance(topic, KafkaError):
            raise topic
        destination = TopicPartition(target.topic, source.partition % topic.partition_count)
        batch = build_batch(letters)
        state = topic.partitions.get(destination.partition)
        leader = -1 if state is None else state.leader
        if leader == self._node_id:
            await self._append_here(destination, batch)
        elif leader >= 0:
            await self._append_remote(leader, destination, topic.topic_id, batch)
        else:
            raise errors.for_code(ErrorCode.leader_not_available)(f"{destination} has no leader")
        log.info(
            "share group %s: %d record(s) of %s dead-lettered to %s",
            group_id,
            len(letters),
            source,
            destination,
        )

    async def _append_here(self, destination: TopicPartition, batch: bytes) -> None:
        hosted = self._replicas.get(destination)
        result = hosted.append(bytearray(batch), acks=-1)
        outcome = await settled_acks_all(
            self._purgatory,
            hosted,
            result.last_offset + 1,
            hosted.leader_epoch,
            WRITE_TIMEOUT_MS / 1000,
        )
        if outcome is False:
            raise errors.RequestTimedOut(f"dead letters to {destination} not replicated in time")
        if isinstance(outcome, KafkaError):
            raise outcome

    async def _append_remote(
        self, leader: int, destination: TopicPartition, topic_id: Any, batch: bytes
    ) -> None:
        def build(version: int) -> Any:
            module = request_module(ApiKey.PRODUCE, version)
            by_id = has_field(module.TopicProduceData, "topic_id")
            naming = {"topic_id": topic_id} if by_id else {"name": destination.topic}
            return make(
                module.ProduceRequest,
                transactional_id=None,
                acks=-1,
                timeout=WRITE_TIMEOUT_MS,
                topic_data=(
                    make(
                        module.TopicProduceData,
                        **naming,
                        partition_data=(
                            make(
                                module.PartitionProduceData,
                                index=destination.partition,
                                records=batch,
                            ),
                        ),
                    ),
                ),
            )

        try:
            response = await self._peers.request(
                leader, ApiKey.PRODUCE, build, WRITE_TIMEOUT_MS / 1000 + 5
            )
        except PeerUnavailable as e:
            raise errors.NotLeaderOrFollower(f"dead letters to broker {leader}: {e}") from None
        for topic_response in response.responses:
            for answer in topic_response.partition_responses:
                if answer.error_code != ErrorCode.none:
                    raise errors.for_code(ErrorCode(answer.error_code))(
                        f"dead letters to {destination}: {answer.error_message or ''}"
                    )
