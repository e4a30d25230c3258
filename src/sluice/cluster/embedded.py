"""The embedded metadata store: one JSON document in the data dir, for a single node.

File ``<data dir>/cluster-metadata.json``::

    {"format": 1, "cluster_id": "…", "next_producer_id": 3000,
     "topics": {"orders": {"name": …, "topic_id": …, "partitions": {…},
                           "configs": {…}, "version": 4}},
     "group_configs": {"payments": {"consumer.session.timeout.ms": "50000"}}}

``group_configs`` (per-group overrides, config resource GROUP) may be absent: files
written before it existed have none.

Each change rewrites the whole document atomically (temp file, fsync, rename, fsync of
the directory), so a crash leaves either the old or the new state, never half of one.
The file is written first and memory changed only once the write is durable: a failed
write (a full disk) raises OSError and leaves the store as it was, so nobody is ever
told about a topic the file does not hold. Many topics created together are one write
(:meth:`EmbeddedMetadataStore.create_topics`), not one fsync each. Live brokers are kept
in memory: on one node the only live broker is this one.

Thread-safe: a lock orders writes, so the broker can run a large write in a worker
thread while its event loop keeps reading. Listeners are called on the writing thread,
after the lock is released.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sluice.cluster.model import BrokerInfo, PartitionState, TopicMetadata
from sluice.cluster.store import NoSuchTopic, StaleVersion, TopicExists, TopicsListener
from sluice.storage.checkpoint import write_file_atomically

FORMAT_VERSION = 1
FILE_NAME = "cluster-metadata.json"
REQUIRED_FIELDS: dict[str, type] = {"cluster_id": str, "next_producer_id": int, "topics": dict}
"""The document's fields besides ``format``, with their JSON types."""


class MetadataFileError(Exception):
    """The metadata file exists but cannot be read; the broker refuses to start."""


class EmbeddedMetadataStore:
    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / FILE_NAME
        self._brokers: dict[int, BrokerInfo] = {}
        self._listeners: list[TopicsListener] = []
        self._lock = threading.Lock()
        if self._path.exists():
            self._document = self._read()
        else:
            data_dir.mkdir(parents=True, exist_ok=True)
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            document = {
                "format": FORMAT_VERSION,
                "cluster_id": cluster_id,
                "next_producer_id": 0,
                "topics": {},
            }
            self._write(document)
            self._document = document
        self._topics = {
            name: self._topic_from_json(name, data)
            for name, data in self._document["topics"].items()
        }
        if any(
            self._document["topics"][name].get("topic_id") != str(topic.topic_id)
            for name, topic in self._topics.items()
        ):
            # Topics stored before they had ids were given one while loading: keep it.
            self._commit(topics={name: t.to_json() for name, t in sorted(self._topics.items())})

    def _topic_from_json(self, name: str, data: Any) -> TopicMetadata:
        """One topic of the file; a missing or malformed field is a MetadataFileError
        naming the file, the topic and the field."""
        try:
            return TopicMetadata.from_json(data)
        except KeyError as e:
            raise MetadataFileError(
                f"{self._path}: topic {name!r} has no field {e.args[0]!r}"
            ) from None
        except (TypeError, ValueError, AttributeError) as e:
            raise MetadataFileError(f"{self._path}: topic {name!r} is malformed: {e}") from None

    def _read(self) -> dict[str, Any]:
        try:
            document = json.loads(self._path.read_bytes())
        except (OSError, ValueError) as e:
            raise MetadataFileError(f"cannot read {self._path}: {e}") from e
        if not isinstance(document, dict) or document.get("format") != FORMAT_VERSION:
            raise MetadataFileError(
                f"{self._path} is not a Sluice metadata file of format {FORMAT_VERSION}"
            )
        for field, kind in REQUIRED_FIELDS.items():
            if field not in document:
                raise MetadataFileError(f"{self._path} has no field {field!r}")
            if not isinstance(document[field], kind):
                raise MetadataFileError(f"{self._path}: field {field!r} is not a {kind.__name__}")
        return document

    def _write(self, document: dict[str, Any]) -> None:
        # Compact, so the C encoder does it (with indent, json falls back to Python).
        write_file_atomically(self._path, json.dumps(document, separators=(",", ":")).encode())

    def _commit(self, **changes: Any) -> None:
        """Write the document with ``changes``, then (only then) adopt it. Hold the lock."""
        document = {**self._document, **changes}
        self._write(document)
        self._document = document

    def _commit_topics(self, stored: Sequence[TopicMetadata], removed: Sequence[str] = ()) -> None:
        """Durably store ``stored`` (new or replaced records) and drop ``removed``, then
        change memory. Hold the lock; notify the listeners after releasing it."""
        topics = dict(self._document["topics"])
        for name in removed:
            del topics[name]
        for topic in stored:
            topics[topic.name] = topic.to_json()
        self._commit(topics=topics)
        for name in removed:
            del self._topics[name]
        for topic in stored:
            self._topics[topic.name] = topic

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener()

    def cluster_id(self) -> str:
        return str(self._document["cluster_id"])

    def register_broker(self, broker: BrokerInfo) -> None:
        self._brokers[broker.node_id] = broker

    def live_brokers(self) -> list[BrokerInfo]:
        return sorted(self._brokers.values(), key=lambda b: b.node_id)

    def topics(self) -> dict[str, TopicMetadata]:
        with self._lock:
            return dict(self._topics)

    def create_topic(self, topic: TopicMetadata) -> TopicMetadata:
        return self.create_topics([topic])[0]

    def create_topics(self, topics: Sequence[TopicMetadata]) -> list[TopicMetadata]:
        """Store new topics (version 0) in one write. Raises TopicExists (and stores
        none) if any name is taken."""
        with self._lock:
            for topic in topics:
                if topic.name in self._topics:
                    raise TopicExists(topic.name)
            stored = [
                dataclasses.replace(topic, partitions=dict(topic.partitions), version=0)
                for topic in topics
            ]
            self._commit_topics(stored)
        self._notify()
        return stored

    def delete_topic(self, name: str) -> None:
        with self._lock:
            if name not in self._topics:
                raise NoSuchTopic(name)
            self._commit_topics([], removed=[name])
        self._notify()

    def update_topic(self, topic: TopicMetadata) -> TopicMetadata:
        with self._lock:
            current = self._topics.get(topic.name)
            if current is None:
                raise NoSuchTopic(topic.name)
            if current.version != topic.version:
                raise StaleVersion(
                    f"{topic.name}: version {topic.version}, stored {current.version}"
                )
            stored = dataclasses.replace(
                topic,
                partitions=dict(topic.partitions),
                configs=dict(topic.configs),
                version=topic.version + 1,
            )
            self._commit_topics([stored])
        self._notify()
        return stored

    def update_partition(
        self, name: str, partition: int, state: PartitionState, expected_version: int
    ) -> TopicMetadata:
        current = self.topics().get(name)
        if current is None:
            raise NoSuchTopic(name)
        partitions = dict(current.partitions)
        partitions[partition] = state
        return self.update_topic(
            dataclasses.replace(current, partitions=partitions, version=expected_version)
        )

    def group_configs(self, group_id: str) -> dict[str, str]:
        """The config overrides stored for one group (empty when none)."""
        stored = self._document.get("group_configs", {}).get(group_id, {})
        return dict(stored)

    def groups_with_configs(self) -> list[str]:
        return sorted(self._document.get("group_configs", {}))

    def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        """Replace one group's overrides (already checked); empty removes the group's
        entry. In memory only once the file is written."""
        with self._lock:
            updated = dict(self._document.get("group_configs") or {})
            if configs:
                updated[group_id] = dict(sorted(configs.items()))
            else:
                updated.pop(group_id, None)
            self._commit(group_configs=updated)

    def allocate_producer_id_block(self, block_size: int) -> int:
        with self._lock:
            first = int(self._document["next_producer_id"])
            self._commit(next_producer_id=first + block_size)
        return first

    def add_listener(self, listener: TopicsListener) -> None:
        self._listeners.append(listener)

    def close(self) -> None:
        self._listeners.clear()
