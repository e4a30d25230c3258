"""The metadata model: plain data, serialisable to JSON for any store backend.

Every topic has an id (KIP-516): a random UUID made once, when the topic is created,
and stored with it, so it stays the same across restarts and tells a topic apart from a
later one of the same name. Clients see it in Metadata v10+, CreateTopics v7+ and
DescribeTopicPartitions, and name topics by it in Fetch v13+ and Produce v13.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TopicId = uuid.UUID
"""A topic's id (KIP-516)."""

ZERO_TOPIC_ID = TopicId(int=0)
"""Kafka's "no topic id" (what a request carries when it names a topic by name)."""

_RESERVED_TOPIC_IDS = frozenset({ZERO_TOPIC_ID, uuid.UUID(int=1)})
"""The zero id and Kafka's id of its own metadata topic are never given to a topic."""


def new_topic_id() -> uuid.UUID:
    """A random topic id as Kafka makes them: never a reserved id, and never one whose
    base64 text starts with ``-`` (it would read as an option on a command line)."""
    while True:
        topic_id = uuid.uuid4()
        text = base64.urlsafe_b64encode(topic_id.bytes).decode()
        if topic_id not in _RESERVED_TOPIC_IDS and not text.startswith("-"):
            return topic_id


NO_LEADER = -1
"""A partition's leader while none of its in-sync replicas is live (offline)."""
NOT_ORDERED = -1
"""A partition state's ``written_at`` where the store does not order its writes with the
broker registrations."""


@dataclass(frozen=True)
class Endpoint:
    """One advertised listener of a broker: its name, address and security protocol."""

    listener: str
    host: str
    port: int
    security_protocol: str

    def to_json(self) -> dict[str, Any]:
        return {
            "listener": self.listener,
            "host": self.host,
            "port": self.port,
            "security_protocol": self.security_protocol,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Endpoint:
        return cls(
            str(data["listener"]),
            str(data["host"]),
            int(data["port"]),
            str(data.get("security_protocol", data["listener"])),
        )


@dataclass(frozen=True)
class BrokerInfo:
    """A live broker as registered in the metadata store. ``epoch`` tells one
    registration from the next of the same node id (Kafka's broker epoch): the store
    gives it, and it grows each time the broker registers, so the controller sees a
    restart even when no moment passed without the broker registered.

    ``host`` and ``port`` are the inter-broker listener's address (what other brokers
    connect to); ``endpoints`` lists every advertised listener. A registration stored
    before listeners had names holds only ``host`` and ``port``: it reads as one
    endpoint-less broker whose address serves every listener name."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    epoch: int = -1
    endpoints: tuple[Endpoint, ...] = ()
    logs_intact: bool = False
    """Whether the broker's logs hold everything its previous run appended: that run
    shut down cleanly (its data directory held the clean-shutdown marker, every log
    flushed and closed), or it ended while the machine stayed up (a process crash or
    kill -9: appends had reached the page cache, :mod:`sluice.storage.machine_boot`).
    False when the machine may have gone down (its unsynced tail may be lost), for a new
    data directory and for a registration that does not say (Kafka counts every
    registration whose previous broker epoch it cannot match as an unclean shutdown). A
    broker that registers again on a lost session without stopping says True."""

    def endpoint(self, listener: str) -> Endpoint | None:
        """The advertised endpoint of ``listener``; for a registration without
        endpoints, its one address; None when the broker does not have that listener."""
        for endpoint in self.endpoints:
            if endpoint.listener == listener:
                return endpoint
        if not self.endpoints:
            return Endpoint(listener, self.host, self.port, "PLAINTEXT")
        return None

    def address(self, listener: str) -> tuple[str, int]:
        """Where a client that came in on ``listener`` reaches this broker: that
        listener's endpoint, else (a broker without that listener, in a cluster whose
        brokers are configured differently) the inter-broker address."""
        endpoint = self.endpoint(listener)
        return (endpoint.host, endpoint.port) if endpoint is not None else (self.host, self.port)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "node_id": self.node_id,
            "host": self.host,
            "port": self.port,
            "rack": self.rack,
            "logs_intact": self.logs_intact,
        }
        if self.endpoints:
            data["endpoints"] = [endpoint.to_json() for endpoint in self.endpoints]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any], epoch: int = -1) -> BrokerInfo:
        rack = data.get("rack")
        endpoints = tuple(Endpoint.from_json(e) for e in data.get("endpoints", ()))
        return cls(
            int(data["node_id"]),
            str(data["host"]),
            int(data["port"]),
            rack,
            epoch,
            endpoints,
            # Written as "clean_shutdown" before a process crash counted as intact.
            bool(data.get("logs_intact", data.get("clean_shutdown", False))),
        )


@dataclass(frozen=True)
class PartitionState:
    """One partition's replicas and leadership, a record of its own in the store (apart
    from the topic's config, so that a leader change and a config change never contend
    for one version). ``leader_epoch`` only ever grows; it is bumped on every leader
    change and stamped into every batch the leader appends. ``version`` is the record's
    version in the store (Kafka's partition epoch): every write bumps it, and a write
    made from a stale read loses. ``leader`` is :data:`NO_LEADER` while the partition is
    offline."""

    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    version: int = 0
    adding_replicas: tuple[int, ...] = ()
    """While a reassignment is in progress (KIP-455): replicas being added, copying the
    partition until they are in the ISR."""
    removing_replicas: tuple[int, ...] = ()
    """While a reassignment is in progress: replicas that go once the added ones are in
    sync. ``replicas`` holds both the target replicas and these."""
    elr: tuple[int, ...] = ()
    """Eligible leader replicas (KIP-966): replicas that left the ISR while it was smaller
    than min.insync.replicas. An acks=all write needed them until they left, so each has
    every committed record; one may lead when no in-sync replica can (see
    :mod:`sluice.cluster.eligible`). Never overlaps the ISR."""
    last_known_elr: tuple[int, ...] = ()
    """Replicas that were eligible (in the ISR or the ELR while the ISR was below
    min.insync.replicas) until they restarted after an unclean shutdown, which may have
    cost them an unflushed tail (KIP-966's LastKnownELR): an unclean election tries them
    before any other replica."""
    written_at: int = field(default=NOT_ORDERED, compare=False)
    """When the store last wrote the record, on the scale of the broker epochs
    (:attr:`BrokerInfo.epoch`), or :data:`NOT_ORDERED` where the store has no such order.
    A replica whose broker epoch is greater registered after this state was written:
    what the state says of it (leading, in sync) was decided about its previous run.
    Like the version, the store's to keep."""

    @property
    def is_online(self) -> bool:
        return self.leader != NO_LEADER

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replicas once a reassignment in progress completes."""
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """The replicas before a reassignment in progress began."""
        return tuple(r for r in self.replicas if r not in self.adding_replicas)

    def to_json(self) -> dict[str, Any]:
        """The record's content; the version is the store's to keep."""
        document: dict[str, Any] = {
            "replicas": list(self.replicas),
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
        }
        if self.adding_replicas:
            document["adding_replicas"] = list(self.adding_replicas)
        if self.removing_replicas:
            document["removing_replicas"] = list(self.removing_replicas)
        if self.elr:
            document["elr"] = list(self.elr)
        if self.last_known_elr:
            document["last_known_elr"] = list(self.last_known_elr)
        return document

    @classmethod
    def from_json(
        cls, data: dict[str, Any], version: int = 0, written_at: int = NOT_ORDERED
    ) -> PartitionState:
        return cls(
            replicas=tuple(data["replicas"]),
            leader=data["leader"],
            leader_epoch=data["leader_epoch"],
            isr=tuple(data["isr"]),
            version=version,
            adding_replicas=tuple(data.get("adding_replicas", ())),
            removing_replicas=tuple(data.get("removing_replicas", ())),
            elr=tuple(data.get("elr", ())),
            last_known_elr=tuple(data.get("last_known_elr", ())),
            written_at=written_at,
        )

    def registered_since(self, brokers: Mapping[int, BrokerInfo]) -> set[int]:
        """The replicas among ``brokers`` registered anew since this state was written
        (a restart the state has not caught up with); none where the store does not
        order writes and registrations."""
        if self.written_at == NOT_ORDERED:
            return set()
        return {r for r in self.replicas if r in brokers and brokers[r].epoch > self.written_at}


@dataclass(frozen=True)
class TopicMetadata:
    """A topic: its id, partitions (index → state), config overrides, and the version of
    the topic record in the store (its id, config overrides and partition count; bumped
    by every write of them, never by a partition's leadership, which has a version of
    its own)."""

    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionState]
    configs: dict[str, str] = field(default_factory=dict)
    version: int = 0

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "topic_id": str(self.topic_id),
            "partitions": {
                str(i): {**p.to_json(), "version": p.version}
                for i, p in sorted(self.partitions.items())
            },
            "configs": dict(sorted(self.configs.items())),
            "version": self.version,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicMetadata:
        """A stored topic. One stored without an id (or with the zero id) gets a new one
        here; the store writes it back so that it is given only once."""
        stored_id = data.get("topic_id")
        topic_id = uuid.UUID(stored_id) if stored_id else ZERO_TOPIC_ID
        return cls(
            name=data["name"],
            topic_id=new_topic_id() if topic_id in _RESERVED_TOPIC_IDS else topic_id,
            partitions={
                int(i): PartitionState.from_json(p, int(p.get("version", 0)))
                for i, p in data["partitions"].items()
            },
            configs=dict(data["configs"]),
            version=int(data["version"]),
        )
