"""The broker's metadata task: the one place where changes of the cluster metadata
become changes of this broker's partitions.

The metadata store publishes a new image on whatever thread saw the change (a ZooKeeper
watch runs on kazoo's thread); :meth:`MetadataApplier.offer` only hands it to the event
loop. One task applies images in order, each as a delta from the image applied before::

    store thread ──offer(image)──▶ latest image (older ones not yet applied are skipped:
                                    an image is the whole state, the delta is taken
                                    from what was applied)
                  event loop task ─▶ a newer registration of this broker (the store
                                     registered it again after a lost session): the
                                     new broker epoch, before any partition state
                  ─▶ delta.for_node(me):
                     deleted topics, partitions moved away   → detach now, close and
                                                               rename for deletion in a
                                                               worker thread, before any
                                                               log is opened
                     new partitions hosted here              → logs made in advance by a
                                                               creation here, or opened /
                                                               created in a worker thread
                     changed state or config                 → new leader epoch, leader or
                                                               not, new config
                     changed dynamic broker configs          → the broker's config first,
                                                               then every hosted partition
                                                               takes its new defaults
                  ─▶ the image becomes the one handlers read (:attr:`image`)
                  ─▶ listeners (coordinators load / unload, the controller looks again)
                  ─▶ waiters whose condition now holds are woken

Handlers see an image only once it is applied, so a topic they find hosted here has its
logs. A storage error while opening logs is fatal for the broker (the callback given),
as in the flusher.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from sluice.broker.replication.partition import Partition
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.cluster.image import MetadataDelta, MetadataImage
from sluice.common import errors
from sluice.common.ids import TopicPartition
from sluice.storage import PartitionLog

log = logging.getLogger(__name__)

AppliedListener = Callable[[MetadataDelta], None]


@dataclass
class _Waiter:
    condition: Callable[[MetadataImage], bool]
    done: asyncio.Future[MetadataImage]


class MetadataApplier:
    def __init__(
        self,
        node_id: int,
        image: MetadataImage,
        replicas: ReplicaManager,
        on_storage_error: Callable[[BaseException], None],
        on_broker_configs: Callable[[MetadataImage], None] = lambda image: None,
    ) -> None:
        self._node_id = node_id
        self._on_broker_configs = on_broker_configs
        self._replicas = replicas
        self._on_storage_error = on_storage_error
        self.image = MetadataImage(image.cluster_id)
        """The image applied last: what handlers read."""
        self._offered: MetadataImage = image
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending = asyncio.Event()
        self._listeners: list[AppliedListener] = []
        self._waiters: list[_Waiter] = []

    def add_listener(self, listener: AppliedListener) -> None:
        """Call ``listener`` on the event loop after each image is applied."""
        self._listeners.append(listener)

    async def apply_first(self, image: MetadataImage, *, recover: bool) -> None:
        """Open every local log the image names (recovering them when ``recover``),
        before the broker serves; binds the applier to the running loop. The leadership
        it gave is for the caller to say (:meth:`ReplicaManager.say_leadership`), after
        its own account of the opening."""
        self._loop = asyncio.get_running_loop()
        await self._apply(image, recover=recover)

    def offer(self, image: MetadataImage) -> None:
        """A new image from the store, on any thread: applied soon on the event loop."""
        loop = self._loop
        assert loop is not None, "apply_first() binds the loop before images are offered"
        loop.call_soon_threadsafe(self._take, image)

    def _take(self, image: MetadataImage) -> None:
        self._offered = image
        self._pending.set()

    async def run(self) -> None:
        """Apply offered images until cancelled."""
        while True:
            await self._pending.wait()
            self._pending.clear()
            if self._offered is not self.image:
                await self._apply(self._offered, recover=False)
                self._replicas.say_leadership()

    async def wait_for(
        self, condition: Callable[[MetadataImage], bool], timeout_s: float
    ) -> MetadataImage:
        """The first applied image for which ``condition`` holds (now, or once applied);
        raises TimeoutError after ``timeout_s``."""
        if condition(self.image):
            return self.image
        waiter = _Waiter(condition, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.done), timeout_s)
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    async def _apply(self, image: MetadataImage, *, recover: bool) -> None:
        # A new registration first (the store registered this broker again after a lost
        # session): the states applied below are led only if written since.
        self._replicas.registration_seen(image.brokers.get(self._node_id))
        delta = MetadataDelta(self.image, image)
        changes = delta.for_node(self._node_id)
        broker_configs_changed = delta.broker_configs_changed(self._node_id)
        if broker_configs_changed:
            self._on_broker_configs(image)  # before logs are opened with the defaults
        detached: list[Partition] = []
        abandoned: list[tuple[TopicPartition, PartitionLog]] = []
        for topic in changes.deleted_topics:
            detached += self._replicas.detach_topic(topic.name)
            abandoned += self._replicas.discard_prepared(topic.topic_id)
        for topic_partition in changes.removed:
            partition = self._replicas.detach(topic_partition)
            if partition is not None:
                detached.append(partition)
        if detached or abandoned:
            # Before anything is opened: a topic made again under the same name (in this
            # very image, or by a request once it is applied) must find its paths free.
            await self._replicas.delete_detached(detached, abandoned)
        to_open: dict[str, list[int]] = {}
        for topic, index in changes.hosted:
            topic_partition = TopicPartition(topic.name, index)
            if self._replicas.find(topic_partition) is not None:
                self._replicas.update(topic, index)
                continue
            prepared = self._replicas.take_prepared(topic, index)
            if prepared is not None:
                self._replicas.install(topic, [prepared])
            else:
                to_open.setdefault(topic.name, []).append(index)
        if to_open:
            wanted = [(image.topics[name], sorted(indexes)) for name, indexes in to_open.items()]
            try:
                opened = await asyncio.to_thread(
                    self._replicas.open_logs_of, wanted, recover=recover
                )
            except errors.KafkaError as e:
                self._on_storage_error(e)
                return
            for topic, logs in opened:
                self._replicas.install(topic, logs)
        reconfigured = image.topics.values() if broker_configs_changed else changes.reconfigured
        for topic in reconfigured:
            for index in topic.partitions:
                if self._replicas.find(TopicPartition(topic.name, index)) is not None:
                    self._replicas.update(topic, index)
        self.image = image
        for listener in list(self._listeners):
            listener(delta)
        for waiter in list(self._waiters):
            if not waiter.done.done() and waiter.condition(image):
                waiter.done.set_result(image)
