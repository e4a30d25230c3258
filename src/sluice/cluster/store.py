"""The metadata-store interface. Backends: :mod:`sluice.cluster.embedded` (one node, a file
in the data dir) and ZooKeeper (clusters; later).

The interface is synchronous: the embedded store is a local file, and kazoo's calls block.
Callers on the event loop run large writes (and ZooKeeper calls) in a thread, so
backends are thread-safe, and listeners may be called on any thread. A write that fails
raises (OSError for a local file) and changes nothing. Writes that replace a record
take the version the caller read; a mismatch raises :class:`StaleVersion` and the caller
re-reads and retries (or gives up): a stale controller cannot overwrite a newer state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from sluice.cluster.model import BrokerInfo, PartitionState, TopicMetadata


class StaleVersion(Exception):
    """A conditional write lost: someone changed the record since it was read."""


class TopicExists(Exception):
    pass


class NoSuchTopic(Exception):
    pass


TopicsListener = Callable[[], None]


class MetadataStore(Protocol):
    def cluster_id(self) -> str:
        """A stable id for the cluster, created once."""
        ...

    def register_broker(self, broker: BrokerInfo) -> None:
        """Announce a live broker (ephemeral in ZooKeeper; gone when its session ends)."""
        ...

    def live_brokers(self) -> list[BrokerInfo]: ...

    def topics(self) -> dict[str, TopicMetadata]:
        """Every topic, by name."""
        ...

    def create_topic(self, topic: TopicMetadata) -> TopicMetadata:
        """Store a new topic (version 0). Raises TopicExists."""
        ...

    def create_topics(self, topics: Sequence[TopicMetadata]) -> list[TopicMetadata]:
        """Store several new topics at once (one write where the backend allows).
        Raises TopicExists, storing none, if any name is taken."""
        ...

    def delete_topic(self, name: str) -> None:
        """Raises NoSuchTopic."""
        ...

    def update_topic(self, topic: TopicMetadata) -> TopicMetadata:
        """Replace a topic record if its stored version is still ``topic.version``; return
        the stored record with the new version. Raises StaleVersion or NoSuchTopic."""
        ...

    def update_partition(
        self, name: str, partition: int, state: PartitionState, expected_version: int
    ) -> TopicMetadata:
        """Replace one partition's leadership state (conditional on the topic version)."""
        ...

    def allocate_producer_id_block(self, block_size: int) -> int:
        """Reserve ``block_size`` producer ids durably; return the first. Never reused."""
        ...

    def group_configs(self, group_id: str) -> dict[str, str]:
        """A group's config overrides (config resource GROUP); empty when none."""
        ...

    def groups_with_configs(self) -> list[str]:
        """Every group that has config overrides."""
        ...

    def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        """Replace a group's config overrides durably; empty removes them."""
        ...

    def add_listener(self, listener: TopicsListener) -> None:
        """Call ``listener`` after any topic change (from any broker)."""
        ...

    def close(self) -> None: ...
