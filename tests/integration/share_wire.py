"""A share-group member speaking ShareFetch and ShareAcknowledge itself, for tests that
must see exactly what the broker answers (acquired ranges, delivery counts, session
errors) over a real socket."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kafka_wire import KafkaConnection, decode_batches
from kio.schema.incremental_alter_configs.v1 import request as alter_configs_v1
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.share_acknowledge.v1 import request as share_acknowledge_v1
from kio.schema.share_fetch.v1 import request as share_fetch_v1
from kio.schema.share_fetch.v2 import request as share_fetch_v2
from kio.schema.share_group_heartbeat.v1 import request as share_heartbeat_v1

GROUP_RESOURCE_TYPE = 32
SET = 0
DELETE = 1


@dataclass(frozen=True)
class Delivery:
    offset: int
    value: bytes | None
    delivery_count: int


def topic_id(connection: KafkaConnection, topic: str) -> uuid.UUID:
    response = connection.request(
        metadata_v12.MetadataRequest(
            topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name=topic),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    (found,) = response.topics
    assert found.error_code == 0, found
    assert found.topic_id is not None
    return found.topic_id


def set_group_configs(
    connection: KafkaConnection,
    group: str,
    configs: dict[str, str],
    deleted: Sequence[str] = (),
) -> None:
    """IncrementalAlterConfigs on the group: SET ``configs``, DELETE ``deleted``."""
    response = connection.request(
        alter_configs_v1.IncrementalAlterConfigsRequest(
            resources=(
                alter_configs_v1.AlterConfigsResource(
                    resource_type=GROUP_RESOURCE_TYPE,
                    resource_name=group,
                    configs=tuple(
                        alter_configs_v1.AlterableConfig(name=k, config_operation=SET, value=v)
                        for k, v in configs.items()
                    )
                    + tuple(
                        alter_configs_v1.AlterableConfig(
                            name=k, config_operation=DELETE, value=None
                        )
                        for k in deleted
                    ),
                ),
            ),
            validate_only=False,
        )
    )
    assert all(r.error_code == 0 for r in response.responses), response


def share_heartbeat(
    connection: KafkaConnection,
    group: str,
    member_id: str,
    epoch: int,
    topics: tuple[str, ...] | None = None,
) -> Any:
    """One ShareGroupHeartbeat: epoch 0 joins, -1 leaves."""
    return connection.request(
        share_heartbeat_v1.ShareGroupHeartbeatRequest(
            group_id=group,
            member_id=member_id,
            member_epoch=share_heartbeat_v1.i32(epoch),
            rack_id=None,
            subscribed_topic_names=topics,
        )
    )


class ShareMember:
    """One member's share session on one broker, for one partition of one topic."""

    def __init__(
        self,
        connection: KafkaConnection,
        group: str,
        topic: uuid.UUID,
        partition: int = 0,
        member_id: str | None = None,
    ) -> None:
        self.connection = connection
        self.group = group
        self.topic = topic
        self.partition = partition
        self.member_id = member_id or str(uuid.uuid4())
        self.epoch = 0
        self.last_response: object = None

    def _acks(
        self, acks: Iterable[tuple[int, int, Sequence[int]]], module: object
    ) -> tuple[object, ...]:
        return tuple(
            module.AcknowledgementBatch(  # type: ignore[attr-defined]
                first_offset=first, last_offset=last, acknowledge_types=tuple(types)
            )
            for first, last, types in acks
        )

    def fetch(
        self,
        *,
        acks: Iterable[tuple[int, int, Sequence[int]]] = (),
        max_records: int = 100,
        max_wait_ms: int = 0,
        max_bytes: int = 1024 * 1024,
        version: int = 1,
        epoch: int | None = None,
        acquire_mode: int = 0,
    ) -> list[Delivery]:
        """One ShareFetch (the partition named in every request); the records acquired.
        ``acquire_mode`` (v2): 0 batch_optimized, 1 record_limit."""
        module = share_fetch_v2 if version == 2 else share_fetch_v1
        extra = (
            {"share_acquire_mode": share_fetch_v2.i8(acquire_mode), "is_renew_ack": False}
            if version == 2
            else {}
        )
        request = module.ShareFetchRequest(
            group_id=self.group,
            member_id=self.member_id,
            share_session_epoch=self.epoch if epoch is None else epoch,
            max_wait=datetime.timedelta(milliseconds=max_wait_ms),
            min_bytes=1,
            max_bytes=max_bytes,
            max_records=max_records,
            batch_size=max_records,
            topics=(
                module.FetchTopic(
                    topic_id=self.topic,
                    partitions=(
                        module.FetchPartition(
                            partition_index=self.partition,
                            acknowledgement_batches=self._acks(acks, module),
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
            **extra,
        )
        response = self.connection.request(request)
        self.last_response = response
        assert response.error_code == 0, response
        if epoch is None:
            self.epoch += 1
        return deliveries(response)

    def acknowledge(self, acks: Iterable[tuple[int, int, Sequence[int]]]) -> int:
        """One ShareAcknowledge; the partition's error code."""
        request = share_acknowledge_v1.ShareAcknowledgeRequest(
            group_id=self.group,
            member_id=self.member_id,
            share_session_epoch=self.epoch,
            topics=(
                share_acknowledge_v1.AcknowledgeTopic(
                    topic_id=self.topic,
                    partitions=(
                        share_acknowledge_v1.AcknowledgePartition(
                            partition_index=self.partition,
                            acknowledgement_batches=self._acks(acks, share_acknowledge_v1),
                        ),
                    ),
                ),
            ),
        )
        response = self.connection.request(request)
        assert response.error_code == 0, response
        self.epoch += 1
        (topic,) = response.responses
        (partition,) = topic.partitions
        return int(partition.error_code)

    def close(self, acks: Iterable[tuple[int, int, Sequence[int]]] = ()) -> int:
        """ShareAcknowledge with epoch -1: acknowledge, then close the session."""
        self.epoch = -1
        error = 0
        acks = list(acks)
        if acks:
            error = self.acknowledge(acks)
        else:
            self.fetch_closing()
        self.epoch = 0
        return error

    def fetch_closing(self) -> None:
        request = share_acknowledge_v1.ShareAcknowledgeRequest(
            group_id=self.group, member_id=self.member_id, share_session_epoch=-1, topics=()
        )
        response = self.connection.request(request)
        assert response.error_code == 0, response


def deliveries(response: object) -> list[Delivery]:
    """The records a ShareFetch response hands the member: those in acquired ranges."""
    found: list[Delivery] = []
    for topic in response.responses:  # type: ignore[attr-defined]
        for partition in topic.partitions:
            assert partition.error_code == 0, partition
            ranges = [
                (r.first_offset, r.last_offset, r.delivery_count)
                for r in partition.acquired_records
            ]
            for batch in decode_batches(partition.records):
                for record in batch.records:
                    for first, last, count in ranges:
                        if first <= record.offset <= last:
                            found.append(Delivery(record.offset, record.value, count))
    return sorted(found, key=lambda d: d.offset)


def ack_error(response: object) -> int:
    """The acknowledge error code of the one partition of a ShareFetch response."""
    (topic,) = response.responses  # type: ignore[attr-defined]
    (partition,) = topic.partitions
    return int(partition.acknowledge_error_code)
