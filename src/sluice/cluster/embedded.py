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
Metadata changes are rare (topic admin, producer-id blocks), so rewriting is cheap.
Live brokers are kept in memory: on one node the only live broker is this one.
"""

from __future__ import annotations

import base64
import json
import uuid
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
        if self._path.exists():
            self._document = self._read()
        else:
            data_dir.mkdir(parents=True, exist_ok=True)
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            self._document = {
                "format": FORMAT_VERSION,
                "cluster_id": cluster_id,
                "next_producer_id": 0,
                "topics": {},
            }
            self._write()
        self._topics = {
            name: self._topic_from_json(name, data)
            for name, data in self._document["topics"].items()
        }
        if any(
            self._document["topics"][name].get("topic_id") != str(topic.topic_id)
            for name, topic in self._topics.items()
        ):
            # Topics stored before they had ids were given one while loading: keep it.
            self._document["topics"] = {
                name: t.to_json() for name, t in sorted(self._topics.items())
            }
            self._write()

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

    def _write(self) -> None:
        write_file_atomically(self._path, json.dumps(self._document, indent=1).encode())

    def _save_topics(self) -> None:
        self._document["topics"] = {name: t.to_json() for name, t in sorted(self._topics.items())}
        self._write()
        for listener in self._listeners:
            listener()

    def cluster_id(self) -> str:
        return str(self._document["cluster_id"])

    def register_broker(self, broker: BrokerInfo) -> None:
        self._brokers[broker.node_id] = broker

    def live_brokers(self) -> list[BrokerInfo]:
        return sorted(self._brokers.values(), key=lambda b: b.node_id)

    def topics(self) -> dict[str, TopicMetadata]:
        return dict(self._topics)

    def create_topic(self, topic: TopicMetadata) -> TopicMetadata:
        if topic.name in self._topics:
            raise TopicExists(topic.name)
        stored = TopicMetadata(topic.name, topic.topic_id, dict(topic.partitions), topic.configs, 0)
        self._topics[topic.name] = stored
        self._save_topics()
        return stored

    def delete_topic(self, name: str) -> None:
        if self._topics.pop(name, None) is None:
            raise NoSuchTopic(name)
        self._save_topics()

    def update_topic(self, topic: TopicMetadata) -> TopicMetadata:
        current = self._topics.get(topic.name)
        if current is None:
            raise NoSuchTopic(topic.name)
        if current.version != topic.version:
            raise StaleVersion(f"{topic.name}: version {topic.version}, stored {current.version}")
        stored = TopicMetadata(
            topic.name,
            topic.topic_id,
            dict(topic.partitions),
            dict(topic.configs),
            topic.version + 1,
        )
        self._topics[topic.name] = stored
        self._save_topics()
        return stored

    def update_partition(
        self, name: str, partition: int, state: PartitionState, expected_version: int
    ) -> TopicMetadata:
        current = self._topics.get(name)
        if current is None:
            raise NoSuchTopic(name)
        partitions = dict(current.partitions)
        partitions[partition] = state
        return self.update_topic(
            TopicMetadata(name, current.topic_id, partitions, current.configs, expected_version)
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
        previous = self._document.get("group_configs")
        updated = dict(previous or {})
        if configs:
            updated[group_id] = dict(sorted(configs.items()))
        else:
            updated.pop(group_id, None)
        self._document["group_configs"] = updated
        try:
            self._write()
        except BaseException:
            if previous is None:
                del self._document["group_configs"]
            else:
                self._document["group_configs"] = previous
            raise

    def allocate_producer_id_block(self, block_size: int) -> int:
        first = int(self._document["next_producer_id"])
        self._document["next_producer_id"] = first + block_size
        self._write()
        return first

    def add_listener(self, listener: TopicsListener) -> None:
        self._listeners.append(listener)

    def close(self) -> None:
        self._listeners.clear()
