"""The metadata image: an immutable snapshot of the cluster's metadata, and the delta
between two of them.

A metadata store (embedded or ZooKeeper) publishes a new :class:`MetadataImage` after
every change it sees, whoever made it. A broker keeps the image it last applied and
works out what changed for itself with :meth:`MetadataDelta.for_node`::

    store ──image N──▶ broker's metadata task ──delta(N-1 → N).for_node(me)──▶ apply:
                                                   create / open local logs
                                                   become leader (new leader epoch)
                                                   stop leading (follower, offline)
                                                   delete local logs of deleted topics
                                                   load / unload coordinators
                                                   new topic configs
                                                   new dynamic broker configs (every
                                                   hosted partition takes new defaults)

Group configs (config resource GROUP) are in the image too, so requests read them
without I/O (each ShareFetch does): a change is seen by a broker once its image has it.

An image is never changed: everything in it is frozen or a fresh dict nobody else
holds, so handlers may read it without locks while the next image is being built.
A topic appears in an image only with all of its partitions (a store that reads a new
topic piece by piece publishes it once whole).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from sluice.cluster.model import BrokerInfo, PartitionState, TopicId, TopicMetadata
from sluice.common.authorizer import AclBinding
from sluice.common.ids import TopicPartition

_NO_OVERRIDES: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class ControllerInfo:
    """The broker acting as controller, and its epoch (grows with every election)."""

    node_id: int
    epoch: int


@dataclass(frozen=True)
class MetadataImage:
    """The cluster as one broker last saw it: the live brokers, the controller, every
    topic with its partitions, the ACLs, the dynamic broker configs and the groups'
    config overrides."""

    cluster_id: str
    brokers: Mapping[int, BrokerInfo] = field(default_factory=lambda: MappingProxyType({}))
    """Live (registered) brokers by node id."""
    controller: ControllerInfo | None = None
    topics: Mapping[str, TopicMetadata] = field(default_factory=lambda: MappingProxyType({}))
    acls: frozenset[AclBinding] = frozenset()
    """Every ACL binding (the authorizer indexes them when they change)."""
    broker_configs: Mapping[str, Mapping[str, str]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """Dynamic broker configs by resource name: ``""`` the cluster-wide default level,
    ``"<node id>"`` one broker's (see :mod:`sluice.common.dynamic_config`)."""
    group_configs: Mapping[str, Mapping[str, str]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """Config overrides by group id (config resource GROUP; a group without overrides
    is absent)."""
    _by_id: dict[TopicId, TopicMetadata] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def topic(self, name: str) -> TopicMetadata | None:
        return self.topics.get(name)

    def topic_by_id(self, topic_id: TopicId) -> TopicMetadata | None:
        if not self._by_id and self.topics:
            self._by_id.update((t.topic_id, t) for t in self.topics.values())
        return self._by_id.get(topic_id)

    def partition(self, topic_partition: TopicPartition) -> PartitionState | None:
        topic = self.topics.get(topic_partition.topic)
        return None if topic is None else topic.partitions.get(topic_partition.partition)

    @property
    def controller_id(self) -> int:
        """The live controller's node id; -1 while there is none (an election is under
        way), as Metadata and DescribeCluster answer it."""
        controller = self.controller
        if controller is None or controller.node_id not in self.brokers:
            return -1
        return controller.node_id

    def dynamic_broker_configs(self, node_id: int) -> tuple[Mapping[str, str], Mapping[str, str]]:
        """The cluster-wide and ``node_id``'s own dynamic broker configs."""
        empty: Mapping[str, str] = MappingProxyType({})
        return (
            self.broker_configs.get("", empty),
            self.broker_configs.get(str(node_id), empty),
        )

    def group_overrides(self, group_id: str) -> Mapping[str, str]:
        """The group's config overrides; empty when it has none."""
        return self.group_configs.get(group_id, _NO_OVERRIDES)

    def live_brokers(self) -> list[BrokerInfo]:
        return sorted(self.brokers.values(), key=lambda b: b.node_id)

    def leader_of(self, topic_partition: TopicPartition) -> BrokerInfo | None:
        """The live broker leading the partition; None when it is offline or unknown."""
        state = self.partition(topic_partition)
        return None if state is None else self.brokers.get(state.leader)

    def offline_partitions(self) -> list[TopicPartition]:
        """Partitions with no live leader."""
        return [
            TopicPartition(topic.name, index)
            for topic in self.topics.values()
            for index, state in sorted(topic.partitions.items())
            if state.leader not in self.brokers
        ]


@dataclass(frozen=True)
class LocalChanges:
    """What one broker must do to go from one image to the next."""

    deleted_topics: tuple[TopicMetadata, ...] = ()
    """Topics gone (or replaced by a new topic of the same name) that this broker hosted
    partitions of: close and remove their logs."""
    hosted: tuple[tuple[TopicMetadata, int], ...] = ()
    """Partitions (topic as now stored, index) this broker is a replica of and that are
    new here or whose state changed: open or create the log, then take the new state."""
    removed: tuple[TopicPartition, ...] = ()
    """Partitions this broker hosted and no longer is a replica of."""
    reconfigured: tuple[TopicMetadata, ...] = ()
    """Topics hosted here whose config overrides changed."""

    def __bool__(self) -> bool:
        return bool(self.deleted_topics or self.hosted or self.removed or self.reconfigured)


@dataclass(frozen=True)
class MetadataDelta:
    """The change from ``previous`` to ``image``."""

    previous: MetadataImage
    image: MetadataImage

    @property
    def brokers_changed(self) -> bool:
        return self.previous.brokers != self.image.brokers

    def broker_configs_changed(self, node_id: int) -> bool:
        """Whether the dynamic broker configs that apply to ``node_id`` changed."""
        return self.previous.dynamic_broker_configs(node_id) != self.image.dynamic_broker_configs(
            node_id
        )

    def for_node(self, node_id: int) -> LocalChanges:
        """The changes that concern the replicas hosted by ``node_id``."""
        before, after = self.previous.topics, self.image.topics
        deleted: list[TopicMetadata] = []
        hosted: list[tuple[TopicMetadata, int]] = []
        removed: list[TopicPartition] = []
        reconfigured: list[TopicMetadata] = []
        for name, gone in before.items():
            now = after.get(name)
            if (now is None or now.topic_id != gone.topic_id) and _hosts(gone, node_id):
                deleted.append(gone)
        for name, new in after.items():
            old: TopicMetadata | None = before.get(name)
            if old is not None and old.topic_id != new.topic_id:
                old = None  # a new topic under an old name: everything is new
            if old is new:
                continue
            for index, state in new.partitions.items():
                old_state = None if old is None else old.partitions.get(index)
                if node_id in state.replicas:
                    if old_state != state:
                        hosted.append((new, index))
                elif old_state is not None and node_id in old_state.replicas:
                    removed.append(TopicPartition(name, index))
            if old is not None and old.configs != new.configs and _hosts(new, node_id):
                reconfigured.append(new)
        return LocalChanges(tuple(deleted), tuple(hosted), tuple(removed), tuple(reconfigured))


def _hosts(topic: TopicMetadata, node_id: int) -> bool:
    return any(node_id in state.replicas for state in topic.partitions.values())
