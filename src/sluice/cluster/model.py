"""The metadata model: plain data, serialisable to JSON for any store backend.

Every topic has an id (KIP-516): a random UUID made once, when the topic is created,
and stored with it, so it stays the same across restarts and tells a topic apart from a
later one of the same name. Clients see it in Metadata v10+, CreateTopics v7+ and
DescribeTopicPartitions, and name topics by it in Fetch v13+ and Produce v13.
"""

from __future__ import annotations

import base64
import uuid
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


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class PartitionState:
    """Leadership of one partition. ``leader_epoch`` only ever grows; it is bumped on every
    leader change and stamped into every batch the leader appends."""

    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "replicas": list(self.replicas),
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PartitionState:
        return cls(
            replicas=tuple(data["replicas"]),
            leader=data["leader"],
            leader_epoch=data["leader_epoch"],
            isr=tuple(data["isr"]),
        )


@dataclass(frozen=True)
class TopicMetadata:
    """A topic: its id, partitions (index → state), config overrides, and the version of
    this record in the store (bumped by every write)."""

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
            "partitions": {str(i): p.to_json() for i, p in sorted(self.partitions.items())},
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
            partitions={int(i): PartitionState.from_json(p) for i, p in data["partitions"].items()},
            configs=dict(data["configs"]),
            version=int(data["version"]),
        )
