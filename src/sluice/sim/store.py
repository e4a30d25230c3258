"""The metadata store of a simulation: the same records and the same conditional writes
as the real stores (``cluster.embedded``, ``cluster.zookeeper``), kept in memory.

Brokers register with a session: a registration gets a broker epoch that grows with
every registration (ZooKeeper's czxid), and a session that ends (the broker crashed,
paused or was cut off past its timeout) removes it. One broker at a time is the
controller, with an epoch that grows with every election. Partition states are written
on their version (StaleVersion when someone wrote since) and, for a controller's write,
its epoch (ControllerFenced when another was elected since), exactly as
:mod:`sluice.cluster.store` documents; every write bumps the version and stamps
``written_at`` with the store's order of events. What the store holds is published as a
:class:`~sluice.cluster.image.MetadataImage`; when each broker sees it is the
simulation's business (it delivers images after a delay)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from types import MappingProxyType

from sluice.cluster.image import ControllerInfo, MetadataImage
from sluice.cluster.model import BrokerInfo, PartitionState, TopicMetadata
from sluice.cluster.store import ControllerFenced, PartitionChange, StaleVersion
from sluice.common.ids import TopicPartition

CLUSTER_ID = "simulated-cluster"


class SimMetadataStore:
    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.controller: ControllerInfo | None = None
        self._controller_epoch = 0
        self.topics: dict[str, TopicMetadata] = {}
        self._order = 0
        self._image: MetadataImage | None = None
        """The store's order of events (ZooKeeper's zxid): registrations and writes."""
        self.writes: list[tuple[int, TopicPartition, PartitionState]] = []
        """Every partition write: (the controller epoch it carried, the partition, the
        state written)."""

    def _next(self) -> int:
        """The next point in the store's order; whatever changes the store takes one, so
        the image is built anew."""
        self._order += 1
        self._image = None
        return self._order

    # ── brokers and the controller ─────────────────────────────────────────────────

    def register(self, node_id: int, *, logs_intact: bool = False) -> BrokerInfo:
        """``node_id`` starts a session; its broker epoch is newer than any before.
        ``logs_intact``: what the registration says of the broker's previous run (a
        broker that only lost its session, and never stopped, says clean, as the real
        one does)."""
        broker = BrokerInfo(
            node_id, f"sim-{node_id}", 9092, epoch=self._next(), logs_intact=logs_intact
        )
        self.brokers[node_id] = broker
        return broker

    def expire(self, node_id: int) -> None:
        """``node_id``'s session ended: it is no longer registered, nor controller."""
        self.brokers.pop(node_id, None)
        if self.controller is not None and self.controller.node_id == node_id:
            self.controller = None
        self._image = None

    def elect_controller(self, node_id: int) -> int | None:
        """Make ``node_id`` the controller if there is none (its epoch), else None."""
        if self.controller is not None or node_id not in self.brokers:
            return None
        self._controller_epoch += 1
        self.controller = ControllerInfo(node_id, self._controller_epoch)
        self._image = None
        return self._controller_epoch

    # ── topics and partitions ──────────────────────────────────────────────────────

    def create_topic(
        self, name: str, assignment: Sequence[tuple[int, ...]], configs: dict[str, str]
    ) -> TopicMetadata:
        """A topic whose partition i has replicas ``assignment[i]``, led by the first,
        all in sync (what a controller would write for a new topic)."""
        written_at = self._next()
        topic = TopicMetadata(
            name,
            uuid.UUID(int=len(self.topics) + 1),
            {
                index: PartitionState(
                    replicas=tuple(replicas),
                    leader=replicas[0],
                    leader_epoch=0,
                    isr=tuple(replicas),
                    written_at=written_at,
                )
                for index, replicas in enumerate(assignment)
            },
            dict(configs),
        )
        self.topics[name] = topic
        return topic

    def state(self, topic_partition: TopicPartition) -> PartitionState:
        return self.topics[topic_partition.topic].partitions[topic_partition.partition]

    def update_partitions(
        self, changes: Sequence[PartitionChange], controller_epoch: int
    ) -> list[PartitionState]:
        """Write every change or none: each on its state's version, and on the
        controller epoch being the current one (as the real stores, the controller is
        the one writer)."""
        if controller_epoch != self._controller_epoch:
            raise ControllerFenced(
                f"controller epoch {controller_epoch} is not the current {self._controller_epoch}"
            )
        for change in changes:
            current = self.topics[change.topic].partitions[change.partition]
            if current.version != change.state.version:
                raise StaleVersion(
                    f"{change.topic}-{change.partition}: version {change.state.version}, "
                    f"stored {current.version}"
                )
        written_at = self._next()
        written = []
        for change in changes:
            state = dataclasses.replace(
                change.state, version=change.state.version + 1, written_at=written_at
            )
            topic = self.topics[change.topic]
            self.topics[change.topic] = dataclasses.replace(
                topic, partitions={**topic.partitions, change.partition: state}
            )
            self.writes.append(
                (controller_epoch, TopicPartition(change.topic, change.partition), state)
            )
            written.append(state)
        return written

    def image(self) -> MetadataImage:
        """What the store holds now (built once per change: clients ask for it often)."""
        if self._image is not None:
            return self._image
        self._image = MetadataImage(
            CLUSTER_ID,
            brokers=MappingProxyType(dict(self.brokers)),
            controller=self.controller,
            topics=MappingProxyType(dict(self.topics)),
        )
        return self._image
