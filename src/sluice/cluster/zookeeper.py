"""The ZooKeeper metadata store: the metadata of a cluster of brokers in a ZooKeeper
ensemble, through kazoo.

Everything lives under ``<chroot>/sluice``, so a ZooKeeper that also serves Kafka (or
another Sluice cluster under another chroot) is never touched::

    <chroot>/sluice/cluster_id                  the cluster's id, made once
                   /brokers/<node id>           ephemeral {"node_id", "host", "port", "rack",
                                                "endpoints"}; the broker epoch is the
                                                znode's czxid
                   /controller                  ephemeral {"node_id", "epoch"}
                   /controller_epoch            the epoch; its znode version equals it
                   /topics/<name>               {"topic_id", "configs", "partition_count"};
                                                znode version = TopicMetadata.version
                   /topics/<name>/partitions/<i>
                                                {"replicas", "leader", "leader_epoch", "isr"};
                                                znode version = PartitionState.version,
                                                its mzxid = PartitionState.written_at
                                                (a broker epoch above it: registered
                                                since the state was written)
                   /producer_ids                {"next": N}
                   /group_configs/<group id>    {config name: value}; the id
                                                percent-encoded (a group id may hold "/");
                                                watched, in the image
                   /acls                        {"acls": [binding, …]}: every ACL in one
                                                node, written conditionally on its version
                                                (a node holds 1 MB: thousands of ACLs)
                   /config/brokers/<default>    {config name: value}: dynamic broker
                                                configs of every broker (resource "")
                   /config/brokers/<node id>    {config name: value}: one broker's own
                   /config/users/<user>         {mechanism: {"salt", "stored_key",
                                                "server_key", "iterations"}}: SCRAM
                                                credentials (base64; never a password),
                                                the name percent-encoded

Writes are ZooKeeper transactions (multi), so they are all or nothing. A topic is created
with its partitions in one transaction and grown in one (the topic node's partition count
set, conditional on its version, with the new partition nodes created): whoever reads
the topic node after a change finds every partition it names. Partition states are
written with a check that ``/controller_epoch`` still has the version of the writer's
controller epoch (every election sets it once, from 0, so its version is the epoch): a
controller that was replaced while it was paused or cut off is fenced by ZooKeeper
itself, however stale its view.

The image is kept current by one refresher thread: a ZooKeeper watch (one-shot, set by
every read) only marks what changed and wakes the refresher, which reads it again (which
sets the next watch) and publishes a new image. A lost session (expired while the broker
was paused or cut off) loses the ephemeral nodes and the watches: the broker is told in
the log, is no longer controller, and once connected with a new session it registers
again (a new broker epoch) and reads everything afresh.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Hashable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)
from kazoo.handlers.threading import KazooTimeoutError

from sluice.cluster.image import ControllerInfo, MetadataImage
from sluice.cluster.model import BrokerInfo, PartitionState, TopicMetadata
from sluice.cluster.store import (
    BrokerIdInUse,
    ControllerFenced,
    ImageListener,
    MetadataStoreError,
    NoSuchTopic,
    PartitionChange,
    StaleVersion,
    TopicExists,
)
from sluice.common.authorizer import AclBinding
from sluice.protocol.sasl import ScramCredential, ScramMechanism

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 15.0
"""How long the broker tries to reach ZooKeeper at start, by default, before giving up."""
WRITE_ATTEMPTS_MAX = 20
"""Attempts of a read-modify-write that keeps losing to concurrent writers (producer-id
blocks, topic deletion racing growth) before the store gives up."""

_T = TypeVar("_T")

_ALL = "all"
_BROKERS = "brokers"
_CONTROLLER = "controller"
_TOPICS = "topics"
_ACLS = "acls"
_BROKER_CONFIGS = "broker_configs"
_GROUP_CONFIGS = "group_configs"
_DEFAULT_BROKER_NODE = "<default>"
"""The node of the cluster-wide dynamic broker configs (Kafka's name for it)."""


def _dumps(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def split_connect(connect: str) -> tuple[str, str]:
    """``host:port[,host:port…][/chroot]`` → (hosts, chroot without a trailing slash)."""
    hosts, slash, chroot = connect.partition("/")
    if not hosts:
        raise MetadataStoreError(f"--zookeeper {connect!r} names no host (host:port[/chroot])")
    return hosts, ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""


class ZooKeeperMetadataStore:
    def __init__(
        self,
        connect: str,
        *,
        session_timeout_s: float = 6.0,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        self._connect = connect
        self._connect_timeout_s = connect_timeout_s
        hosts, chroot = split_connect(connect)
        self._root = f"{chroot}/sluice"
        self._client = KazooClient(hosts=hosts, timeout=session_timeout_s)
        self._session_timeout_s = session_timeout_s
        self._lock = threading.Lock()
        """Guards the set of what must be read again."""
        self._refreshing = threading.Lock()
        """One refresh at a time (the refresher thread, or a writer publishing its own
        write)."""
        self._wake = threading.Event()
        self._dirty: set[Hashable] = {_ALL}
        self._stopping = False
        self._refresher: threading.Thread | None = None
        self._listeners: list[ImageListener] = []
        self._cluster_id = ""
        self._brokers: dict[int, BrokerInfo] = {}
        self._controller: ControllerInfo | None = None
        self._topics: dict[str, TopicMetadata] = {}
        self._acls: frozenset[AclBinding] = frozenset()
        self._broker_configs: Mapping[str, Mapping[str, str]] = MappingProxyType({})
        self._group_configs: dict[str, Mapping[str, str]] = {}
        """By group id (decoded)."""
        self._image = MetadataImage("")
        self._registration: BrokerInfo | None = None
        self._session_lost = False

    # -- paths --------------------------------------------------------------------

    def _path(self, *parts: str) -> str:
        return "/".join((self._root, *parts))

    def _topic_path(self, name: str) -> str:
        return self._path("topics", name)

    def _group_path(self, group_id: str) -> str:
        return self._path("group_configs", urllib.parse.quote(group_id, safe=""))

    def _user_path(self, user: str) -> str:
        return self._path("config", "users", urllib.parse.quote(user, safe=""))

    def _broker_config_path(self, resource_name: str = "") -> str:
        return self._path("config", "brokers", resource_name or _DEFAULT_BROKER_NODE)

    def _partition_path(self, name: str, index: int) -> str:
        return self._path("topics", name, "partitions", str(index))

    # -- lifecycle ----------------------------------------------------------------

    def image(self) -> MetadataImage:
        return self._image

    def subscribe(self, listener: ImageListener) -> None:
        self._listeners.append(listener)

    async def start(self) -> None:
        await asyncio.to_thread(self._start)

    def _start(self) -> None:
        try:
            self._client.start(timeout=self._connect_timeout_s)
        except KazooTimeoutError:
            self._client.stop()
            self._client.close()
            raise MetadataStoreError(
                f"cannot reach ZooKeeper at {self._connect} within "
                f"{self._connect_timeout_s:.0f} s: "
                "is it running and is the address right? (--zookeeper host:port[/chroot])"
            ) from None
        self._client.add_listener(self._on_state)
        for part in ("brokers", "topics", "group_configs", "config/users", "config/brokers"):
            self._client.ensure_path(self._path(part))
        for path, initial in (
            (self._path("controller_epoch"), b"0"),
            (self._path("producer_ids"), _dumps({"next": 0})),
            (self._path("acls"), _dumps({"acls": []})),
            (self._path("cluster_id"), self._new_cluster_id()),
        ):
            try:
                self._client.create(path, initial)
            except NodeExistsError:
                pass
        self._cluster_id = self._client.get(self._path("cluster_id"))[0].decode()
        self._refresh()
        self._refresher = threading.Thread(
            target=self._refresh_forever, name="zookeeper-metadata", daemon=True
        )
        self._refresher.start()
        log.info("metadata in ZooKeeper at %s (cluster %s)", self._connect, self._cluster_id)

    @staticmethod
    def _new_cluster_id() -> bytes:
        return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=")

    async def close(self) -> None:
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        self._stopping = True
        self._wake.set()
        self._listeners.clear()
        # The session first, then the refresher: while ZooKeeper is unreachable the
        # refresher waits on a request kazoo keeps queued until it reconnects, and only
        # stopping the client (which ends its reconnection attempts at once) fails it.
        # Reachable, stopping ends the session: this broker's ephemeral nodes go at once.
        self._client.stop()
        self._client.close()
        if self._refresher is not None:
            self._refresher.join()

    def _on_state(self, state: str) -> None:
        """kazoo's connection state (on kazoo's thread: only flags, never I/O)."""
        if self._stopping:
            return
        if state == KazooState.LOST:
            self._session_lost = True
            log.warning(
                "ZooKeeper session expired: this broker is no longer registered and no "
                "longer controller; it keeps serving what it leads and registers again "
                "once ZooKeeper is reachable"
            )
        elif state == KazooState.SUSPENDED:
            log.warning("connection to ZooKeeper lost; reconnecting")
        elif state == KazooState.CONNECTED:
            self._mark(_ALL)

    # -- the image ----------------------------------------------------------------

    def _mark(self, key: Hashable) -> None:
        with self._lock:
            self._dirty.add(key)
        self._wake.set()

    def _watch(self, key: Hashable) -> Callable[[Any], None]:
        return lambda event: self._mark(key)

    def _refresh_forever(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping:
                return
            try:
                if self._session_lost and self._client.connected:
                    self._session_lost = False
                    self._reregister()
                self._refresh()
            except KazooException as e:
                # Disconnected meanwhile: the reconnection marks everything again.
                log.debug("metadata refresh interrupted: %s", e)
                self._mark(_ALL)
                time.sleep(0.1)  # back off while kazoo reconnects, not a synchronization
            except Exception:
                log.exception("metadata refresh failed; will retry")
                self._mark(_ALL)
                time.sleep(0.1)

    def _refresh(self) -> None:
        """Read again what watches marked, then publish one new image."""
        with self._refreshing:
            self._refresh_marked()

    def _refresh_marked(self) -> None:
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        if not dirty:
            return
        everything = _ALL in dirty
        if everything or _BROKERS in dirty:
            self._read_brokers()
        if everything or _CONTROLLER in dirty:
            self._read_controller()
        if everything or _ACLS in dirty:
            self._read_acls()
        if everything or _BROKER_CONFIGS in dirty:
            self._read_broker_configs()
        if everything or _GROUP_CONFIGS in dirty:
            dirty.update(self._read_groups_with_configs(everything))
        self._read_group_configs(
            [key[1] for key in dirty if isinstance(key, tuple) and key[0] == "group"]
        )
        if everything or _TOPICS in dirty:
            names = self._client.get_children(self._path("topics"), watch=self._watch(_TOPICS))
            for gone in set(self._topics) - set(names):
                del self._topics[gone]
            new = [name for name in names if name not in self._topics]
            for name in names if everything else new:
                dirty.add(("topic", name))
        for key in dirty:
            if isinstance(key, tuple) and key[0] == "topic":
                self._read_topic(key[1])
        for key in dirty:
            if isinstance(key, tuple) and key[0] == "partition":
                self._read_partition(key[1], key[2])
        self._image = MetadataImage(
            self._cluster_id,
            MappingProxyType(dict(self._brokers)),
            self._controller,
            MappingProxyType(dict(self._topics)),
            self._acls,
            self._broker_configs,
            MappingProxyType(dict(self._group_configs)),
        )
        for listener in list(self._listeners):
            listener(self._image)

    def _read_brokers(self) -> None:
        ids = self._client.get_children(self._path("brokers"), watch=self._watch(_BROKERS))
        brokers: dict[int, BrokerInfo] = {}
        for child in ids:
            try:
                data, stat = self._client.get(self._path("brokers", child))
            except NoNodeError:
                continue
            broker = BrokerInfo.from_json(json.loads(data), epoch=stat.czxid)
            brokers[broker.node_id] = broker
        self._brokers = brokers

    def _read_controller(self) -> None:
        path = self._path("controller")
        try:
            data, _ = self._client.get(path, watch=self._watch(_CONTROLLER))
        except NoNodeError:
            if self._client.exists(path, watch=self._watch(_CONTROLLER)) is None:
                self._controller = None
                return
            data, _ = self._client.get(path, watch=self._watch(_CONTROLLER))
        document = json.loads(data)
        self._controller = ControllerInfo(int(document["node_id"]), int(document["epoch"]))

    def _read_acls(self) -> None:
        data, _ = self._client.get(self._path("acls"), watch=self._watch(_ACLS))
        self._acls = frozenset(AclBinding.from_json(item) for item in json.loads(data)["acls"])

    def _read_broker_configs(self) -> None:
        """Every level of dynamic broker configs (a few small nodes), each read setting
        its watch, as the children are."""
        watch = self._watch(_BROKER_CONFIGS)
        levels: dict[str, Mapping[str, str]] = {}
        for child in self._client.get_children(self._path("config", "brokers"), watch=watch):
            try:
                data, _ = self._client.get(self._path("config", "brokers", child), watch=watch)
            except NoNodeError:
                continue  # removed meanwhile: the children's watch follows
            name = "" if child == _DEFAULT_BROKER_NODE else child
            levels[name] = MappingProxyType({str(k): str(v) for k, v in json.loads(data).items()})
        self._broker_configs = MappingProxyType(levels)

    def _read_groups_with_configs(self, everything: bool) -> list[tuple[str, str]]:
        """Which groups have configs (setting the children's watch): forget those gone,
        and return the keys of those to read (the new ones; all of them after a new
        session, whose watches are gone)."""
        children = self._client.get_children(
            self._path("group_configs"), watch=self._watch(_GROUP_CONFIGS)
        )
        present = {urllib.parse.unquote(child): child for child in children}
        for gone in set(self._group_configs) - set(present):
            del self._group_configs[gone]
        return [
            ("group", child)
            for group_id, child in present.items()
            if everything or group_id not in self._group_configs
        ]

    def _read_group_configs(self, children: Sequence[str]) -> None:
        """Read the named groups' configs (node names, percent-encoded) at once, each read
        setting the node's watch; a group whose node is gone has no configs."""
        pending = [
            (
                child,
                self._client.get_async(
                    self._path("group_configs", child), watch=self._watch(("group", child))
                ),
            )
            for child in children
        ]
        for child, result in pending:
            group_id = urllib.parse.unquote(child)
            try:
                data, _ = result.get()
            except NoNodeError:
                self._group_configs.pop(group_id, None)
                continue
            self._group_configs[group_id] = MappingProxyType(
                {str(k): str(v) for k, v in json.loads(data).items()}
            )

    def _read_topic(self, name: str) -> None:
        """The topic and all its partitions (each read sets its watch); gone if deleted."""
        try:
            data, stat = self._client.get(
                self._topic_path(name), watch=self._watch(("topic", name))
            )
            document = json.loads(data)
            count = int(document["partition_count"])
            pending = [
                self._client.get_async(
                    self._partition_path(name, index), watch=self._watch(("partition", name, index))
                )
                for index in range(count)
            ]
            partitions = {}
            for index, result in enumerate(pending):
                partition_data, partition_stat = result.get()
                partitions[index] = PartitionState.from_json(
                    json.loads(partition_data), partition_stat.version, partition_stat.mzxid
                )
        except NoNodeError:
            self._topics.pop(name, None)
            return
        self._topics[name] = TopicMetadata(
            name,
            uuid.UUID(document["topic_id"]),
            partitions,
            dict(document["configs"]),
            stat.version,
        )

    def _read_partition(self, name: str, index: int) -> None:
        topic = self._topics.get(name)
        if topic is None or index not in topic.partitions:
            return  # the topic read covers it
        try:
            data, stat = self._client.get(
                self._partition_path(name, index), watch=self._watch(("partition", name, index))
            )
        except NoNodeError:
            return  # the topic is being deleted: its own watch follows
        state = PartitionState.from_json(json.loads(data), stat.version, stat.mzxid)
        self._topics[name] = TopicMetadata(
            topic.name,
            topic.topic_id,
            {**topic.partitions, index: state},
            topic.configs,
            topic.version,
        )

    # -- brokers and the controller -------------------------------------------------

    async def register_broker(self, broker: BrokerInfo) -> BrokerInfo:
        return await asyncio.to_thread(self._register, broker)

    def _register(self, broker: BrokerInfo) -> BrokerInfo:
        path = self._path("brokers", str(broker.node_id))
        deadline = time.monotonic() + self._session_timeout_s * 2
        waited = False
        while True:
            try:
                self._client.create(path, _dumps(broker.to_json()), ephemeral=True)
                break
            except NodeExistsError:
                pass
            try:
                data, stat = self._client.get(path)
            except NoNodeError:
                continue
            if stat.ephemeralOwner == self._client.client_id[0]:
                break  # ours already (registering again on the same session)
            holder = json.loads(data)
            if time.monotonic() > deadline:
                raise BrokerIdInUse(
                    f"broker id {broker.node_id} is registered in ZooKeeper by a live broker "
                    f"at {holder.get('host')}:{holder.get('port')}; give this broker another "
                    "--node-id, or stop that one"
                )
            if not waited:
                log.warning(
                    "broker id %d is registered by another ZooKeeper session (%s:%s); "
                    "waiting up to %.0f s for it to expire (a restart right after a crash)",
                    broker.node_id,
                    holder.get("host"),
                    holder.get("port"),
                    deadline - time.monotonic(),
                )
                waited = True
            self._wait_until_gone(path, deadline)
        stat = self._client.exists(path)
        assert stat is not None
        self._registration = broker
        self._mark(_BROKERS)
        self._refresh_now()
        return dataclasses.replace(broker, epoch=stat.czxid)

    def _wait_until_gone(self, path: str, deadline: float) -> None:
        """Wait (until the monotonic ``deadline``) for the node at ``path`` to go."""
        gone = threading.Event()
        if self._client.exists(path, watch=lambda event: gone.set()) is not None:
            gone.wait(max(0.0, deadline - time.monotonic()))

    def _reregister(self) -> None:
        """After a lost session: register again (the old ephemeral node went with it)."""
        broker = self._registration
        if broker is None:
            return
        # The process never stopped: its logs lost nothing (KIP-966's clean shutdown).
        broker = dataclasses.replace(broker, logs_intact=True)
        try:
            self._client.create(
                self._path("brokers", str(broker.node_id)), _dumps(broker.to_json()), ephemeral=True
            )
            log.warning("registered broker %d in ZooKeeper again", broker.node_id)
        except NodeExistsError:
            log.error(
                "broker id %d was taken by another broker while this one's session was "
                "lost; this broker stays unregistered",
                broker.node_id,
            )

    def _refresh_now(self) -> None:
        """Publish the latest state before returning to a writer (on its thread), so
        that the image a write's caller sees next includes the write."""
        self._refresh()

    async def elect_controller(self, node_id: int) -> int | None:
        # Through _run: a connection lost during the election is a MetadataStoreError
        # the controller retries, not an exception that ends its task (and the broker).
        return await self._run(lambda: self._elect(node_id))

    def _elect(self, node_id: int) -> int | None:
        epoch_path = self._path("controller_epoch")
        for _ in range(WRITE_ATTEMPTS_MAX):
            data, stat = self._client.get(epoch_path)
            epoch = int(data) + 1
            transaction = self._client.transaction()
            transaction.create(
                self._path("controller"),
                _dumps({"node_id": node_id, "epoch": epoch}),
                ephemeral=True,
            )
            transaction.set_data(epoch_path, str(epoch).encode(), version=stat.version)
            results = transaction.commit()
            if isinstance(results[0], NodeExistsError):
                return None
            if isinstance(results[1], BadVersionError):
                continue
            self._raise_failure(results)
            self._mark(_CONTROLLER)
            self._refresh_now()
            return epoch
        raise MetadataStoreError("the controller epoch kept changing; election abandoned")

    # -- topics ---------------------------------------------------------------------

    async def create_topics(self, topics: Sequence[TopicMetadata]) -> list[TopicMetadata]:
        return await self._run(lambda: self._create_topics(topics))

    def _create_topics(self, topics: Sequence[TopicMetadata]) -> list[TopicMetadata]:
        transaction = self._client.transaction()
        for topic in topics:
            transaction.create(
                self._topic_path(topic.name),
                _dumps(
                    {
                        "topic_id": str(topic.topic_id),
                        "configs": dict(topic.configs),
                        "partition_count": topic.partition_count,
                    }
                ),
            )
            transaction.create(self._path("topics", topic.name, "partitions"))
            for index, state in sorted(topic.partitions.items()):
                transaction.create(self._partition_path(topic.name, index), _dumps(state.to_json()))
        results = transaction.commit()
        for result in results:
            if isinstance(result, NodeExistsError):
                raise TopicExists(", ".join(t.name for t in topics))
        self._raise_failure(results)
        return [
            TopicMetadata(
                topic.name,
                topic.topic_id,
                {index: dataclasses.replace(s, version=0) for index, s in topic.partitions.items()},
                dict(topic.configs),
                0,
            )
            for topic in topics
        ]

    async def delete_topic(self, name: str) -> None:
        await self._run(lambda: self._delete_topic(name))

    def _delete_topic(self, name: str) -> None:
        partitions_path = self._path("topics", name, "partitions")
        for _ in range(WRITE_ATTEMPTS_MAX):
            try:
                children = self._client.get_children(partitions_path)
            except NoNodeError:
                raise NoSuchTopic(name) from None
            transaction = self._client.transaction()
            for child in children:
                transaction.delete(f"{partitions_path}/{child}")
            transaction.delete(partitions_path)
            transaction.delete(self._topic_path(name))
            results = transaction.commit()
            if any(isinstance(r, NotEmptyError) for r in results):
                continue  # partitions were added meanwhile
            if any(isinstance(r, NoNodeError) for r in results):
                raise NoSuchTopic(name)
            self._raise_failure(results)
            return
        raise MetadataStoreError(f"topic {name!r} kept growing while being deleted")

    async def set_topic_configs(
        self, name: str, configs: Mapping[str, str], expected_version: int
    ) -> TopicMetadata:
        return await self._run(lambda: self._set_topic(name, configs, {}, expected_version))

    async def add_partitions(
        self, name: str, partitions: Mapping[int, PartitionState], expected_version: int
    ) -> TopicMetadata:
        return await self._run(lambda: self._set_topic(name, None, partitions, expected_version))

    def _set_topic(
        self,
        name: str,
        configs: Mapping[str, str] | None,
        added: Mapping[int, PartitionState],
        expected_version: int,
    ) -> TopicMetadata:
        path = self._topic_path(name)
        try:
            data, stat = self._client.get(path)
        except NoNodeError:
            raise NoSuchTopic(name) from None
        if stat.version != expected_version:
            raise StaleVersion(f"{name}: version {expected_version}, stored {stat.version}")
        document = json.loads(data)
        count = int(document["partition_count"])
        assert sorted(added) == list(range(count, count + len(added))), (
            f"{name}: partitions must be added after index {count - 1}"
        )
        if configs is not None:
            document["configs"] = dict(configs)
        document["partition_count"] = count + len(added)
        transaction = self._client.transaction()
        transaction.set_data(path, _dumps(document), version=expected_version)
        for index, state in sorted(added.items()):
            transaction.create(self._partition_path(name, index), _dumps(state.to_json()))
        results = transaction.commit()
        if any(isinstance(r, (BadVersionError, NodeExistsError)) for r in results):
            raise StaleVersion(f"{name}: changed since version {expected_version}")
        if any(isinstance(r, NoNodeError) for r in results):
            raise NoSuchTopic(name)
        self._raise_failure(results)
        current = self._topics.get(name)
        if current is not None and all(i in current.partitions for i in range(count)):
            partitions = dict(current.partitions)
        else:  # not seen through the watch yet: read the existing partitions now
            partitions = {}
            for index in range(count):
                state_data, state_stat = self._client.get(self._partition_path(name, index))
                partitions[index] = PartitionState.from_json(
                    json.loads(state_data), state_stat.version, state_stat.mzxid
                )
        partitions.update({i: dataclasses.replace(s, version=0) for i, s in added.items()})
        return TopicMetadata(
            name,
            uuid.UUID(document["topic_id"]),
            partitions,
            dict(document["configs"]),
            expected_version + 1,
        )

    async def update_partitions(
        self, changes: Sequence[PartitionChange], controller_epoch: int
    ) -> list[PartitionState]:
        if controller_epoch < 0:
            # ZooKeeper's check of version -1 matches any version: it would not fence.
            raise ControllerFenced(f"controller epoch {controller_epoch}: no controller")
        return await self._run(lambda: self._update_partitions(changes, controller_epoch))

    def _update_partitions(
        self, changes: Sequence[PartitionChange], controller_epoch: int
    ) -> list[PartitionState]:
        transaction = self._client.transaction()
        transaction.check(self._path("controller_epoch"), version=controller_epoch)
        for change in changes:
            transaction.set_data(
                self._partition_path(change.topic, change.partition),
                _dumps(change.state.to_json()),
                version=change.state.version,
            )
        results = transaction.commit()
        if isinstance(results[0], (BadVersionError, NoNodeError)):
            raise ControllerFenced(
                f"controller epoch {controller_epoch} is no longer the current one"
            )
        results = results[1:]
        for change, result in zip(changes, results, strict=True):
            if isinstance(result, BadVersionError):
                raise StaleVersion(
                    f"{change.topic}-{change.partition}: changed since version "
                    f"{change.state.version}"
                )
            if isinstance(result, NoNodeError):
                raise NoSuchTopic(f"{change.topic}-{change.partition}")
        self._raise_failure(results)
        return [
            dataclasses.replace(c.state, version=stat.version, written_at=stat.mzxid)
            for c, stat in zip(changes, results, strict=True)
        ]

    @staticmethod
    def _raise_failure(results: Sequence[Any]) -> None:
        """Raise the first failure of a committed transaction not handled by its caller."""
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                raise MetadataStoreError(f"ZooKeeper refused a metadata write: {result!r}")

    async def _run(self, write: Callable[[], _T]) -> _T:
        """Run a write in a worker thread; then publish what changed, so the image the
        caller sees next holds its own write."""

        def written() -> _T:
            try:
                result = write()
            except KazooException as e:
                if isinstance(e, (NoNodeError, BadVersionError, NodeExistsError)):
                    raise
                raise MetadataStoreError(f"ZooKeeper at {self._connect}: {e!r}") from e
            return result

        return await asyncio.to_thread(written)

    # -- producer ids and group configs ---------------------------------------------

    async def allocate_producer_id_block(self, block_size: int) -> int:
        return await asyncio.to_thread(self._allocate, block_size)

    def _allocate(self, block_size: int) -> int:
        path = self._path("producer_ids")
        for _ in range(WRITE_ATTEMPTS_MAX):
            data, stat = self._client.get(path)
            first = int(json.loads(data)["next"])
            try:
                self._client.set(path, _dumps({"next": first + block_size}), version=stat.version)
            except BadVersionError:
                continue  # another broker took a block meanwhile
            return first
        raise MetadataStoreError("producer-id blocks kept being taken; try again")

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        await self._run(lambda: self._change_acls(lambda acls: acls | set(bindings)))

    async def delete_acls(self, bindings: Sequence[AclBinding]) -> None:
        await self._run(lambda: self._change_acls(lambda acls: acls - set(bindings)))

    def _change_acls(
        self, change: Callable[[frozenset[AclBinding]], frozenset[AclBinding]]
    ) -> None:
        """Read, change and write the ACL node conditionally on its version (another
        broker may change it meanwhile), then publish the result."""
        path = self._path("acls")
        for _ in range(WRITE_ATTEMPTS_MAX):
            data, stat = self._client.get(path)
            stored = frozenset(AclBinding.from_json(item) for item in json.loads(data)["acls"])
            changed = change(stored)
            if changed == stored:
                break
            document = {"acls": [binding.to_json() for binding in sorted(changed)]}
            try:
                self._client.set(path, _dumps(document), version=stat.version)
            except BadVersionError:
                continue
            break
        else:
            raise MetadataStoreError("the ACLs kept changing; try again")
        self._mark(_ACLS)
        self._refresh_now()

    def _write_configs_node(self, path: str, configs: Mapping[str, str]) -> None:
        """Store ``configs`` as the JSON of the node at ``path``, or remove the node when
        there are none (on a worker thread)."""
        if not configs:
            try:
                self._client.delete(path)
            except NoNodeError:
                pass
            return
        data = _dumps(dict(sorted(configs.items())))
        try:
            self._client.set(path, data)
        except NoNodeError:
            try:
                self._client.create(path, data, makepath=True)
            except NodeExistsError:  # another broker made it meanwhile
                self._client.set(path, data)

    async def set_broker_configs(self, resource_name: str, configs: Mapping[str, str]) -> None:
        def write() -> None:
            self._write_configs_node(self._broker_config_path(resource_name), configs)
            self._mark(_BROKER_CONFIGS)
            self._refresh_now()

        await self._run(write)

    async def group_configs(self, group_id: str) -> dict[str, str]:
        return dict(self._image.group_overrides(group_id))

    async def groups_with_configs(self) -> list[str]:
        return sorted(self._image.group_configs)

    async def set_group_configs(self, group_id: str, configs: Mapping[str, str]) -> None:
        def write() -> None:
            path = self._group_path(group_id)
            self._write_configs_node(path, configs)
            self._mark(_GROUP_CONFIGS)
            self._mark(("group", path.rsplit("/", 1)[1]))
            self._refresh_now()

        await self._run(write)

    # -- client quotas: /client_quotas/<entity key> {type: value}, the key percent-encoded -

    def _client_quota_path(self, entity_key: str = "") -> str:
        if not entity_key:
            return self._path("client_quotas")
        return self._path("client_quotas", urllib.parse.quote(entity_key, safe=""))

    async def client_quotas(self) -> dict[str, dict[str, float]]:
        def read() -> dict[str, dict[str, float]]:
            try:
                children = self._client.get_children(self._client_quota_path())
            except NoNodeError:
                return {}
            found: dict[str, dict[str, float]] = {}
            for child in children:
                key = urllib.parse.unquote(child)
                try:
                    data, _ = self._client.get(self._client_quota_path(key))
                except NoNodeError:
                    continue  # removed meanwhile
                found[key] = {name: float(value) for name, value in json.loads(data).items()}
            return found

        return await asyncio.to_thread(read)

    async def set_client_quotas(self, entity_key: str, quotas: Mapping[str, float]) -> None:
        def write() -> None:
            path = self._client_quota_path(entity_key)
            if not quotas:
                try:
                    self._client.delete(path)
                except NoNodeError:
                    pass
                return
            data = _dumps(dict(sorted(quotas.items())))
            try:
                self._client.set(path, data)
            except NoNodeError:
                self._client.create(path, data, makepath=True)

        await asyncio.to_thread(write)

    async def scram_credentials(self, user: str) -> dict[ScramMechanism, ScramCredential]:
        def read() -> dict[ScramMechanism, ScramCredential]:
            try:
                data, _ = self._client.get(self._user_path(user))
            except NoNodeError:
                return {}
            return {
                ScramMechanism.by_name(name): ScramCredential.from_json(value)
                for name, value in json.loads(data).items()
            }

        return await asyncio.to_thread(read)

    async def scram_users(self) -> list[str]:
        children = await asyncio.to_thread(self._client.get_children, self._path("config", "users"))
        return sorted(urllib.parse.unquote(child) for child in children)

    async def set_scram_credential(
        self, user: str, mechanism: ScramMechanism, credential: ScramCredential
    ) -> None:
        def change(stored: dict[str, Any]) -> dict[str, Any] | None:
            return {**stored, mechanism.mechanism_name: credential.to_json()}

        await asyncio.to_thread(self._change_user, user, change)

    async def delete_scram_credential(self, user: str, mechanism: ScramMechanism) -> bool:
        found = False

        def change(stored: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal found
            found = mechanism.mechanism_name in stored
            return {k: v for k, v in stored.items() if k != mechanism.mechanism_name}

        await asyncio.to_thread(self._change_user, user, change)
        return found

    def _change_user(
        self, user: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]
    ) -> None:
        """Read, change and write one user's node, conditional on its version (another
        broker may change the same user's other mechanism meanwhile); an empty result
        removes the node."""
        path = self._user_path(user)
        for _ in range(WRITE_ATTEMPTS_MAX):
            try:
                data, stat = self._client.get(path)
                stored, version = dict(json.loads(data)), stat.version
            except NoNodeError:
                stored, version = {}, None
            updated = change(stored)
            try:
                if version is None:
                    if updated:
                        self._client.create(path, _dumps(updated))
                elif updated:
                    self._client.set(path, _dumps(updated), version=version)
                else:
                    self._client.delete(path, version=version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # changed meanwhile: read it again
            return
        raise MetadataStoreError(f"user {user!r} kept being changed; try again")
