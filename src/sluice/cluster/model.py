"""The metadata model: plain data, serialisable to JSON for any store backend."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any


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
        return cls(
            name=data["name"],
            topic_id=uuid.UUID(data["topic_id"]),
            partitions={int(i): PartitionState.from_json(p) for i, p in data["partitions"].items()},
            configs=dict(data["configs"]),
            version=int(data["version"]),
        )
