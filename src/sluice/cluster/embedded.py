"""The embedded metadata store: one JSON document in the data dir, for a single node.

File ``<data dir>/cluster-metadata.json``::

    {"format": 1, "cluster_id": "…", "next_producer_id": 3000, "controller_epoch": 7,
     "topics": {"orders": {"name": …, "topic_id": …, "configs": {…}, "version": 4,
                           "partitions": {"0": {"replicas": [0], "leader": 0,
                                                "leader_epoch": 2, "isr": [0],
                                                "version": 5}, …}}},
     "group_configs": {"payments": {"consumer.session.timeout.ms": "50000"}},
     "broker_configs": {"": {"log.retention.ms": "3600000"},
                        "0": {"message.max.bytes": "2097152"}},
     "acls": [{"resource_type": "TOPIC", "name": "orders", "pattern_type": "LITERAL",
               "principal": "User:alice", "host": "*", "operation": "READ",
               "permission": "ALLOW"}, …],
     "scram_users": {"alice": {"SCRAM-SHA-512": {"salt": …, "stored_key": …,
                                                 "server_key": …, "iterations": 4096}}}}

A topic's ``version`` counts writes of its record (configs, partition count); each
partition's ``version`` counts writes of its state. ``controller_epoch``,
``group_configs`` (per-group overrides, config resource GROUP), ``broker_configs``
(dynamic broker configs: ``""`` the cluster default, else a node id), ``acls`` and
``scram_users`` (SCRAM credentials, base64: never a password) may be absent, and a
partition's ``version`` too: files written before they existed have none (0).

Each change rewrites the whole document atomically (temp file, fsync, rename, fsync of
the directory), so a crash leaves either the old or the new state, never half of one.
The file is written first and memory changed only once the write is durable: a failed
write (a full disk) raises OSError and leaves the store as it was, so nobody is ever
told about a topic the file does not hold. Many topics created together are one write
(:meth:`EmbeddedMetadataStore.create_topics`), not one fsync each. Live brokers are kept
in memory: on one node the only live broker is this one.

The interface is asynchronous (:class:`~sluice.cluster.store.MetadataStore`): each
write runs in a worker thread, a lock orders them, and the new image is published on the
writing thread after the lock is released. On one node every registered broker is this
broker, and it is always the controller: each start elects it anew with the next
controller epoch.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import itertools
import json
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from sluice.cluster.image import ControllerInfo, MetadataImage
from sluice.cluster.model import BrokerInfo, PartitionState, TopicMetadata
from sluice.cluster.store import (
    ControllerFenced,
    ImageListener,
    NoSuchTopic,
    PartitionChange,
    StaleVersion,
    TopicExists,
)
from sluice.common.authorizer import AclBinding
from sluice.protocol.sasl import ScramCredential, ScramMechanism
from sluice.storage.checkpoint import write_file_atomically

FORMAT_VERSION = 1
FILE_NAME = "cluster-metadata.json"
REQUIRED_FIELDS: dict[str, type] = {"cluster_id": str, "next_producer_id": int, "topics": dict}
"""The document's fields besides ``format``, with their JSON types."""

_T = TypeVar("_T")


class MetadataFileError(Exception):
    """The metadata file exists but cannot be read; the broker refuses to start."""


class EmbeddedMetadataStore:
    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / FILE_NAME
        self._brokers: dict[int, BrokerInfo] = {}
        self._broker_epochs = itertools.count()
        self._controller: ControllerInfo | None = None
        self._listeners: list[ImageListener] = []
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
        self._acls = self._acls_from_json(self._document.get("acls", []))
        self._broker_configs = self._config_maps_from_json("broker_configs")
        self._group_configs = self._config_maps_from_json("group_configs")
        self._image = self._make_image()

    def _config_maps_from_json(self, field: str) -> Mapping[str, Mapping[str, str]]:
        """A field of config sets by name (broker levels, groups), read-only."""
        data = self._document.get(field, {})
        if not isinstance(data, dict) or not all(
            isinstance(configs, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in configs.items())
            for configs in data.values()
        ):
            raise MetadataFileError(
                f"{self._path}: field {field!r} is not a map of maps of strings"
            )
        return _frozen_config_maps(data)

    def _acls_from_json(self, data: Any) -> frozenset[AclBinding]:
        try:
            return frozenset(AclBinding.from_json(item) for item in data)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise MetadataFileError(f"{self._path}: field 'acls' is malformed: {e!r}") from None

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
        change memory and make the next image. Hold the lock; publish after releasing it."""
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
        self._image = self._make_image()

    def _make_image(self) -> MetadataImage:
        return MetadataImage(
            cluster_id=str(self._document["cluster_id"]),
            brokers=MappingProxyType(dict(self._brokers)),
            controller=self._controller,
            topics=MappingProxyType(dict(self._topics)),
            acls=self._acls,
            broker_configs=self._broker_configs,
            group_configs=self._group_configs,
        )

    def _publish(self) -> None:
        image = self._image
        for listener in list(self._listeners):
            listener(image)

    def _current(self, name: str) -> TopicMetadata:
        topic = self._topics.get(name)
        if topic is None:
            raise NoSuchTopic(name)
        return topic

    # -- MetadataStore --------------------------------------------------------------

    def image(self) -> MetadataImage:
        return self._image

    def subscribe(self, listener: ImageListener) -> None:
        self._listeners.append(listener)

    async def start(self) -> None:
        """The file was read when the store was made: nothing to wait for."""

    def cluster_id(self) -> str:
        return str(self._document["cluster_id"])

    async def register_broker(self, broker: BrokerInfo) -> BrokerInfo:
        registered = dataclasses.replace(broker, epoch=next(self._broker_epochs))
        with self._lock:
            self._brokers[broker.node_id] = registered
            self._image = self._make_image()
        self._publish()
        return registered

    async def elect_controller(self, node_id: int) -> int | None:
        def elect() -> int:
            with self._lock:
                epoch = int(self._document.get("controller_epoch", 0)) + 1
                self._commit(controller_epoch=epoch)
                self._controller = ControllerInfo(node_id, epoch)
                self._image = self._make_image()
            return epoch

        epoch = await asyncio.to_thread(elect)
        self._publish()
        return epoch

    async def create_topics(self, topics: Sequence[TopicMetadata]) -> list[TopicMetadata]:
        """Store new topics (versions 0) in one write. Raises TopicExists (and stores
        none) if any name is taken."""
        return await self._run(lambda: self._create_topics(topics))

    def _create_topics(self, topics: Sequence[TopicMetadata]) -> list[TopicMetadata]:
        for topic in topics:
            if topic.name in self._topics:
                raise TopicExists(topic.name)
        stored = [
            dataclasses.replace(
                topic,
                partitions={
                    index: dataclasses.replace(state, version=0)
                    for index, state in topic.partitions.items()
                },
                configs=dict(topic.configs),
                version=0,
            )
            for topic in topics
        ]
        self._commit_topics(stored)
        return stored

    async def delete_topic(self, name: str) -> None:
        def delete() -> None:
            self._current(name)
            self._commit_topics([], removed=[name])

        await self._run(delete)

    async def set_topic_configs(
        self, name: str, configs: Mapping[str, str], expected_version: int
    ) -> TopicMetadata:
        def update() -> TopicMetadata:
            current = self._checked(name, expected_version)
            stored = dataclasses.replace(
                current, configs=dict(configs), version=current.version + 1
            )
            self._commit_topics([stored])
            return stored

        return await self._run(update)

    async def add_partitions(
        self, name: str, partitions: Mapping[int, PartitionState], expected_version: int
    ) -> TopicMetadata:
        def add() -> TopicMetadata:
            current = self._checked(name, expected_version)
            first = current.partition_count
            assert sorted(partitions) == list(range(first, first + len(partitions))), (
                f"{name}: partitions must be added after index {first - 1}"
            )
            added = {i: dataclasses.replace(s, version=0) for i, s in partitions.items()}
            stored = dataclasses.replace(
                current, partitions={**current.partitions, **added}, version=current.version + 1
            )
            self._commit_topics([stored])
            return stored

        return await self._run(add)

    def _checked(self, name: str, expected_version: int) -> TopicMetadata:
        current = self._current(name)
        if current.version != expected_version:
            raise StaleVersion(f"{name}: version {expected_version}, stored {current.version}")
        return current

    async def update_partitions(
        self, changes: Sequence[PartitionChange], controller_epoch: int
    ) -> list[PartitionState]:
        def update() -> list[PartitionState]:
            stored_epoch = int(self._document.get("controller_epoch", 0))
            if controller_epoch < 0 or controller_epoch != stored_epoch:
                raise ControllerFenced(
                    f"controller epoch {controller_epoch} is not the current {stored_epoch}"
                )
            topics: dict[str, TopicMetadata] = {}
            written: list[PartitionState] = []
            for change in changes:
                topic = topics.get(change.topic) or self._current(change.topic)
                current = topic.partitions.get(change.partition)
                if current is None:
                    raise NoSuchTopic(f"{change.topic}-{change.partition}")
                if current.version != change.state.version:
                    raise StaleVersion(
                        f"{change.topic}-{change.partition}: version {change.state.version}, "
                        f"stored {current.version}"
                    )
                state = dataclasses.replace(change.state, version=current.version + 1)
                topics[change.topic] = dataclasses.replace(
                    topic, partitions={**topic.partitions, change.partition: state}
                )
                written.append(state)
            self._commit_topics(list(topics.values()))
            return written

        return await self._run(update)

    async def _run(self, write: Callable[[], _T]) -> _T:
        """Run ``write`` under the lock in a worker thread, then publish the new image."""

        def locked() -> _T:
            with self._lock:
                return write()

        result = await asyncio.to_thread(locked)
        self._publish()
        return result

    async def group_configs(self, group_id: str) -> dict[str, str]:
        """The config overrides stored for one group (empty when none)."""
        return dict(self._image.group_overrides(group_id))

    async def groups_with_configs(self) -> list[str]:
        return sorted(self._image.group_configs)

    async def set_group_configs(self, group_id: str, configs: Mapping[str, str]) -> None:
        """Replace one group's overrides (already checked); empty removes the group's
        entry. In memory, and in the next image, only once the file is written."""

        def write() -> None:
            groups = {name: dict(group) for name, group in self._group_configs.items()}
            if configs:
                groups[group_id] = dict(sorted(configs.items()))
            else:
                groups.pop(group_id, None)
            self._commit(group_configs=dict(sorted(groups.items())))
            self._group_configs = _frozen_config_maps(groups)
            self._image = self._make_image()

        await self._run(write)

    async def set_broker_configs(self, resource_name: str, configs: Mapping[str, str]) -> None:
        """Replace one level's dynamic broker configs (already checked); empty removes
        the level. In memory, and in the next image, only once the file is written."""

        def write() -> None:
            levels = {name: dict(level) for name, level in self._broker_configs.items()}
            if configs:
                levels[resource_name] = dict(sorted(configs.items()))
            else:
                levels.pop(resource_name, None)
            self._commit(broker_configs=dict(sorted(levels.items())))
            self._broker_configs = _frozen_config_maps(levels)
            self._image = self._make_image()

        await self._run(write)

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        await self._run(lambda: self._commit_acls(self._acls | set(bindings)))

    async def delete_acls(self, bindings: Sequence[AclBinding]) -> None:
        await self._run(lambda: self._commit_acls(self._acls - set(bindings)))

    def _commit_acls(self, acls: frozenset[AclBinding]) -> None:
        """Store the ACLs, then adopt them and make the next image. Hold the lock."""
        if acls == self._acls:
            return
        self._commit(acls=[binding.to_json() for binding in sorted(acls)])
        self._acls = acls
        self._image = self._make_image()

    async def scram_credentials(self, user: str) -> dict[ScramMechanism, ScramCredential]:
        stored = self._document.get("scram_users", {}).get(user, {})
        return {
            ScramMechanism.by_name(name): ScramCredential.from_json(data)
            for name, data in stored.items()
        }

    async def scram_users(self) -> list[str]:
        return sorted(self._document.get("scram_users", {}))

    async def set_scram_credential(
        self, user: str, mechanism: ScramMechanism, credential: ScramCredential
    ) -> None:
        def write() -> None:
            with self._lock:
                users = dict(self._document.get("scram_users") or {})
                users[user] = {
                    **users.get(user, {}),
                    mechanism.mechanism_name: credential.to_json(),
                }
                self._commit(scram_users=users)

        await asyncio.to_thread(write)

    async def delete_scram_credential(self, user: str, mechanism: ScramMechanism) -> bool:
        def write() -> bool:
            with self._lock:
                users = dict(self._document.get("scram_users") or {})
                mechanisms = dict(users.get(user, {}))
                if mechanisms.pop(mechanism.mechanism_name, None) is None:
                    return False
                if mechanisms:
                    users[user] = mechanisms
                else:
                    del users[user]
                self._commit(scram_users=users)
                return True

        return await asyncio.to_thread(write)

    async def allocate_producer_id_block(self, block_size: int) -> int:
        def allocate() -> int:
            with self._lock:
                first = int(self._document["next_producer_id"])
                self._commit(next_producer_id=first + block_size)
            return first

        return await asyncio.to_thread(allocate)

    async def close(self) -> None:
        self._listeners.clear()

    # -- client quotas: the document's "client_quotas" {entity key: {type: value}} ----------

    async def client_quotas(self) -> dict[str, dict[str, float]]:
        stored = self._document.get("client_quotas", {})
        return {key: dict(values) for key, values in stored.items()}

    async def set_client_quotas(self, entity_key: str, quotas: Mapping[str, float]) -> None:
        """Replace one entity's quotas (already checked); empty removes the entity."""

        def write() -> None:
            with self._lock:
                updated = dict(self._document.get("client_quotas") or {})
                if quotas:
                    updated[entity_key] = dict(sorted(quotas.items()))
                else:
                    updated.pop(entity_key, None)
                self._commit(client_quotas=updated)

        await asyncio.to_thread(write)


def _frozen_config_maps(levels: Mapping[str, Mapping[str, str]]) -> Mapping[str, Mapping[str, str]]:
    """Config sets by name (dynamic broker config levels, groups' overrides) as an image
    holds them (read-only copies)."""
    return MappingProxyType({name: MappingProxyType(dict(level)) for name, level in levels.items()})
