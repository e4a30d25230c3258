"""A share-partition leader's side of the share-state path, run in the test process: a
:class:`~sluice.broker.share.persister.BrokerSharePersister` standing for a broker that
coordinates nothing (its node id is no broker's), so every call goes over the wire to
the broker that coordinates the key, through the broker's own peer connections.

Its view of the cluster is what a Metadata request to a running broker answers, asked
again on every attempt (as a broker's metadata would catch up).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Sequence
from types import MappingProxyType

from kafka_wire import KafkaConnection, metadata_request

from sluice.broker.network.peers import Peers
from sluice.broker.share.persister import BrokerSharePersister
from sluice.cluster.image import MetadataImage
from sluice.cluster.model import BrokerInfo, PartitionState, TopicMetadata
from sluice.common import errors
from sluice.common.errors import ErrorCode
from sluice.coordinator.api import LoggedRecord, Record
from sluice.share.config import SHARE_STATE_TOPIC
from sluice.share.state_runtime import ShareStateCoordinatorRuntime

OUTSIDE_NODE_ID = 99
"""The node id the persister's broker is given: no broker of the test has it."""


class WireMetadata:
    """The cluster as the first reachable broker of ``bootstraps()`` describes it."""

    def __init__(self, bootstraps: Callable[[], Iterable[tuple[str, int]]]) -> None:
        self._bootstraps = bootstraps
        self._image = MetadataImage("test")

    def image(self) -> MetadataImage:
        return self._image

    def _refresh(self) -> None:
        for host, port in self._bootstraps():
            try:
                with KafkaConnection(host, port, timeout_s=5.0) as connection:
                    response = connection.request(
                        metadata_request([SHARE_STATE_TOPIC], allow_auto_topic_creation=False)
                    )
            except OSError:
                continue
            brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port) for b in response.brokers}
            topics = {
                t.name: TopicMetadata(
                    t.name,
                    uuid.UUID(int=0),
                    {
                        p.partition_index: PartitionState(
                            replicas=tuple(p.replica_nodes),
                            leader=p.leader_id,
                            leader_epoch=p.leader_epoch,
                            isr=tuple(p.isr_nodes),
                        )
                        for p in t.partitions
                    },
                )
                for t in response.topics
                if t.error_code == ErrorCode.none
            }
            self._image = MetadataImage(
                "test", brokers=MappingProxyType(brokers), topics=MappingProxyType(topics)
            )
            return
        raise errors.for_code(ErrorCode.coordinator_not_available)("no broker answers")

    async def ensure_share_state_topic(self) -> TopicMetadata:
        await asyncio.to_thread(self._refresh)
        topic = self._image.topics.get(SHARE_STATE_TOPIC)
        if topic is None:
            raise errors.for_code(ErrorCode.coordinator_not_available)("no share state topic")
        return topic


class _NoLog:
    """The coordinator log of a broker that leads no ``__share_group_state`` partition:
    its runtime only routes keys (by the partition count)."""

    def __init__(self, partition_count: int) -> None:
        self._partition_count = partition_count

    @property
    def topic(self) -> str:
        return SHARE_STATE_TOPIC

    @property
    def partition_count(self) -> int:
        return self._partition_count

    async def append(
        self,
        partition: int,
        records: Sequence[Record],
        transaction: tuple[int, int] | None = None,
    ) -> None:
        raise AssertionError("nothing is coordinated here")

    def read(self, partition: int) -> Iterable[LoggedRecord]:
        raise AssertionError("nothing is coordinated here")


def outside_persister(
    bootstraps: Callable[[], Iterable[tuple[str, int]]],
    partition_count: int,
    *,
    attempts: int = 8,
) -> tuple[BrokerSharePersister, Peers]:
    """The persister of a broker outside the cluster's coordinators, and its peer
    connections (close them at the end)."""
    metadata = WireMetadata(bootstraps)
    peers = Peers(OUTSIDE_NODE_ID, metadata.image)
    runtime = ShareStateCoordinatorRuntime(_NoLog(partition_count))
    return (
        BrokerSharePersister(OUTSIDE_NODE_ID, runtime, metadata, peers, attempts=attempts),
        peers,
    )
