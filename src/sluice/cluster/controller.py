"""The controller: one broker of the cluster, elected through the metadata store, that
moves partition leadership when brokers leave and join.

Every broker runs a :class:`Controller`; it acts only while elected::

                 image without a controller
      follower ─────────────────────────────▶ elect_controller(node id)
         ▲                                        │ won: epoch E     │ lost
         │ ControllerFenced, or the image          ▼                  ▼
         │ names another controller          controller(E) ◀── follower
         └────────────────────────────────── on every image: reconcile → writes

While controller, each new image (a broker gone or registered anew, a topic created) is
reconciled (:func:`sluice.cluster.leadership.reconcile`) and the new partition states
are written conditionally on their versions and on epoch E. A write that loses to a newer
state (StaleVersion) is retried on the next image, or after
:data:`RETRY_BACKOFF_MS` if none comes; a write refused for the epoch
(ControllerFenced) means another broker was elected while this one was away (a lost
ZooKeeper session, a paused process): this one stops acting at once and writes nothing
more. On one node the embedded store elects the only broker at every start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from sluice.cluster import leadership
from sluice.cluster.image import MetadataImage
from sluice.cluster.model import TopicMetadata
from sluice.cluster.store import ControllerFenced, MetadataStore, MetadataStoreError, StaleVersion
from sluice.common.config import TopicConfig
from sluice.common.ids import TopicPartition

log = logging.getLogger(__name__)

RETRY_BACKOFF_MS = 200
"""How long the controller waits before trying again after a write lost to a newer state
or the store could not be reached, when no new image arrives sooner."""


@dataclass(frozen=True)
class LeaderRebalance:
    """auto.leader.rebalance.enable: every ``interval_s``
    (leader.imbalance.check.interval.seconds), partitions go back to their preferred
    leader on brokers whose imbalance is above ``imbalance_percentage``
    (leader.imbalance.per.broker.percentage)."""

    interval_s: float
    imbalance_percentage: int


class Controller:
    def __init__(
        self,
        store: MetadataStore,
        node_id: int,
        topic_defaults: Mapping[str, str] | None = None,
        rebalance: LeaderRebalance | None = None,
    ) -> None:
        self._rebalance = rebalance
        self._store = store
        self._node_id = node_id
        self._topic_defaults: Mapping[str, str] = {} if topic_defaults is None else topic_defaults
        """The broker's topic defaults, shared: dynamic broker configs change them."""
        """The brokers' topic config defaults (unclean.leader.election.enable…)."""
        self._epoch: int | None = None
        self._broker_epochs: dict[int, int] = {}
        """Each live broker's registration epoch when the controller last wrote: a
        different one later means the broker registered anew (it restarted). A
        restart before this broker was elected shows in the partition states instead
        (:meth:`PartitionState.registered_since`)."""
        self._changed = asyncio.Event()
        self._changed.set()
        self.leader_elections = 0
        """Partitions whose leader this controller changed (a metric the broker reads)."""

    @property
    def epoch(self) -> int | None:
        """The controller epoch while this broker is controller, else None."""
        return self._epoch

    def notify(self) -> None:
        """A new image was published: look at it (on the event loop)."""
        self._changed.set()

    async def run(self) -> None:
        """Act on images until cancelled; rebalance leadership now and then."""
        loop = asyncio.get_running_loop()
        rebalance = self._rebalance
        next_rebalance = loop.time() + (rebalance.interval_s if rebalance else 0)
        while True:
            if rebalance is None:
                await self._changed.wait()
            else:
                try:
                    await asyncio.wait_for(
                        self._changed.wait(), max(next_rebalance - loop.time(), 0)
                    )
                except TimeoutError:
                    next_rebalance = loop.time() + rebalance.interval_s
                    await self._rebalance_leaders(rebalance)
                    continue
            self._changed.clear()
            try:
                settled = await self.step()
            except MetadataStoreError as e:
                log.warning("controller: the metadata store failed (%s); will retry", e)
                settled = False
            if not settled:
                try:
                    await asyncio.wait_for(self._changed.wait(), RETRY_BACKOFF_MS / 1000)
                except TimeoutError:
                    self._changed.set()

    async def step(self) -> bool:
        """Elect or reconcile once for the current image; False when a write lost and
        must be tried again."""
        image = self._store.image()
        self._follow(image)
        if self._epoch is None and image.controller is None:
            epoch = await self._store.elect_controller(self._node_id)
            if epoch is not None:
                self._epoch = epoch
                self._broker_epochs = {n: b.epoch for n, b in image.brokers.items()}
                log.info("broker %d is now the controller (epoch %d)", self._node_id, epoch)
            image = self._store.image()
        if self._epoch is None:
            return True
        return await self._reconcile(image, self._epoch)

    def _follow(self, image: MetadataImage) -> None:
        """Stop acting as controller when the image names another one (or a newer epoch
        of this broker's: a re-election after a lost session)."""
        current = image.controller
        if self._epoch is None or current is None:
            return
        if current.node_id != self._node_id or current.epoch != self._epoch:
            log.warning(
                "broker %d is no longer the controller (epoch %d); broker %d is (epoch %d)",
                self._node_id,
                self._epoch,
                current.node_id,
                current.epoch,
            )
            self._epoch = None

    async def _rebalance_leaders(self, rebalance: LeaderRebalance) -> None:
        """Move leadership back to preferred replicas where a broker's imbalance is too
        high (auto.leader.rebalance.enable). A write that loses is retried next time."""
        epoch = self._epoch
        if epoch is None:
            return
        changes = leadership.preferred_leader_changes(
            self._store.image(), rebalance.imbalance_percentage
        )
        if not changes:
            return
        try:
            await self._store.update_partitions(changes, epoch)
        except ControllerFenced as e:
            self._stop_acting(e)
            return
        except MetadataStoreError as e:
            log.info("controller: leader rebalance deferred (%s)", e)
            return
        log.info("controller: moved %d partition(s) back to their preferred leader", len(changes))

    def _stop_acting(self, fenced: ControllerFenced) -> None:
        """A write was refused for the epoch: another broker was elected meanwhile."""
        log.warning(
            "broker %d stops acting as controller: another broker was elected while it "
            "was away (%s)",
            self._node_id,
            fenced,
        )
        self._epoch = None

    def _unclean_allowed(self, topic: TopicMetadata) -> bool:
        config = TopicConfig.from_entries(topic.configs, self._topic_defaults)
        return config.unclean_leader_election_enable

    async def _reconcile(self, image: MetadataImage, epoch: int) -> bool:
        restarted = {
            node_id
            for node_id, broker in image.brokers.items()
            if self._broker_epochs.get(node_id, broker.epoch) != broker.epoch
        }
        changes = leadership.reconcile(image, restarted, self._unclean_allowed)
        deciding = {(c.topic, c.partition) for c in changes}
        changes += [
            c
            for c in leadership.reassignments_completed(image)
            if (c.topic, c.partition) not in deciding  # the next round completes it
        ]
        if changes:
            try:
                await self._store.update_partitions(changes, epoch)
            except StaleVersion as e:
                # Usually its own previous write, not yet in the image it decided from.
                log.debug("controller: a partition changed meanwhile (%s); trying again", e)
                return False
            except ControllerFenced as e:
                self._stop_acting(e)
                return True
            self.leader_elections += sum(
                1
                for c in changes
                if (before := image.partition(TopicPartition(c.topic, c.partition))) is None
                or before.leader != c.state.leader
            )
            offline = sum(1 for c in changes if not c.state.is_online)
            log.info(
                "controller: moved leadership of %d partition(s) (%d now offline)",
                len(changes),
                offline,
            )
        self._broker_epochs = {n: b.epoch for n, b in image.brokers.items()}
        return True
