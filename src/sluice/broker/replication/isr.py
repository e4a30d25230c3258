"""ISR changes: the leaders here ask the controller to change their partitions' in-sync
replica sets (AlterPartition, KIP-497); the controller is the one writer of partition
state, and writes each change conditionally on the state's version (Kafka's partition
epoch) and its own controller epoch.

A leader proposes a change (:meth:`IsrChanges.submit`: a follower caught up and joins,
or lagged and leaves); one task sends what is pending, all partitions in one request,
one request at a time (so one change in flight per partition), and hands the stored
state back to the partition at once, before the metadata image brings it::

    Partition ──submit(isr)──▶ pending ──▶ AlterPartition ──▶ controller (image's; a
        ▲                                                      local call when it is
        │ update_state(stored)      NONE ◀──────────────────── this broker): checks,
        │                                                      writes on version + epoch
        │ (kept, sent again after   NOT_CONTROLLER, no answer,
        │  RETRY_BACKOFF_MS)        no controller
        │ isr_change_failed(version) any other error (FENCED_LEADER_EPOCH,
        └────────────────────────── INVALID_UPDATE_VERSION…): dropped; the next fetch
                                     or lag check proposes again from a newer state

The same task checks, every half of ``replica.lag.time.max.ms``, which followers lag
(:meth:`Partition.shrink_isr_if_lagging`). A leader paused past its session and
replaced cannot shrink the ISR to itself: the controller refuses its stale leader epoch
(FENCED_LEADER_EPOCH) or version (INVALID_UPDATE_VERSION).

Each proposed member is named with the broker epoch of its registration in this
broker's image (KIP-903's check): Sluice's follower fetches do not carry their broker
epoch, so it is the image's, not the fetch's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Mapping
from typing import Protocol

from sluice.broker.network.peer_connection import PeerUnavailable
from sluice.broker.replication.partition import Partition
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.cluster.alter_partition import (
    UNCHECKED_BROKER_EPOCH,
    AlterPartitionRequest,
    AlterPartitionResponse,
    IsrMember,
    IsrProposal,
)
from sluice.cluster.image import MetadataImage
from sluice.cluster.model import PartitionState, TopicId
from sluice.common import errors
from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition

log = logging.getLogger(__name__)

RETRY_BACKOFF_MS = 200
"""How long a change waits before it is sent again after NOT_CONTROLLER, no answer, or
no controller in the image."""

RETRIED = frozenset({ErrorCode.not_controller})
"""Answers after which the change is sent again (the controller moved or its image
lagged); after any other error it is dropped."""


class AlterPartitionChannel(Protocol):
    """Where AlterPartition goes (``broker.replication.controller_channel``)."""

    async def alter_partition(
        self,
        request: AlterPartitionRequest,
        proposed_from: Mapping[tuple[TopicId, int], PartitionState],
    ) -> AlterPartitionResponse: ...


@dataclasses.dataclass(frozen=True)
class _Proposal:
    partition: Partition
    isr: tuple[int, ...]
    state: PartitionState
    """The state it was proposed from."""

    @property
    def current(self) -> bool:
        """Still the change the partition waits for."""
        core = self.partition.core
        return (
            not self.partition.detached
            and core.is_leader
            and core.pending_isr == self.isr
            and core.pending_from_version == self.state.version
        )


class IsrChanges:
    def __init__(
        self,
        channel: AlterPartitionChannel,
        image: MetadataImageSource,
        node_id: int,
        replicas: ReplicaManager,
        lag_time_max_ms: int,
    ) -> None:
        self._channel = channel
        self._image = image
        self._node_id = node_id
        self._replicas = replicas
        self._lag_time_max_ms = lag_time_max_ms
        self._pending: dict[TopicPartition, _Proposal] = {}
        self._retry_at: float | None = None
        self._wake = asyncio.Event()
        self.shrinks = 0
        self.expands = 0
        """ISR changes of leaders here, stored, that removed or added replicas (metrics)."""

    def submit(self, partition: Partition, isr: tuple[int, ...]) -> None:
        """Ask the controller for ``isr`` for ``partition`` soon (the partition allows
        one at a time)."""
        self._pending[partition.topic_partition] = _Proposal(partition, isr, partition.state)
        self._wake.set()

    async def run(self) -> None:
        """Send proposed changes and look for lagging followers, until cancelled."""
        check_interval_s = self._lag_time_max_ms / 2 / 1000
        loop = asyncio.get_running_loop()
        next_check = loop.time() + check_interval_s
        while True:
            wake_at = next_check
            if self._retry_at is not None:
                wake_at = min(wake_at, self._retry_at)
            # asyncio.timeout, not wait_for, which on Python 3.11 can lose a cancellation
            # that comes as the event is set: then this loop never ends (cpython#86296).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(wake_at - loop.time(), 0)):
                    await self._wake.wait()
            self._wake.clear()
            if loop.time() >= next_check:
                next_check = loop.time() + check_interval_s
                for partition in self._replicas:
                    partition.shrink_isr_if_lagging(self._lag_time_max_ms)
            if self._retry_at is not None and loop.time() < self._retry_at:
                continue
            self._retry_at = None
            batch = [p for p in self._pending.values() if p.current]
            self._pending.clear()
            if batch:
                await self._send(batch)

    async def _send(self, batch: list[_Proposal]) -> None:
        image = self._image()
        proposals: list[IsrProposal] = []
        by_key: dict[tuple[TopicId, int], _Proposal] = {}
        for proposal in batch:
            topic_partition = proposal.partition.topic_partition
            topic = image.topics.get(topic_partition.topic)
            if topic is None:
                proposal.partition.isr_change_failed(proposal.state.version)
                continue
            key = (topic.topic_id, topic_partition.partition)
            by_key[key] = proposal
            proposals.append(
                IsrProposal(
                    topic.topic_id,
                    topic_partition.partition,
                    proposal.state.leader_epoch,
                    tuple(_member(image, r) for r in proposal.isr),
                    proposal.state.version,
                )
            )
        if not proposals:
            return
        me = image.brokers.get(self._node_id)
        request = AlterPartitionRequest(
            self._node_id,
            UNCHECKED_BROKER_EPOCH if me is None else me.epoch,
            tuple(proposals),
        )
        try:
            response = await self._channel.alter_partition(
                request, {key: p.state for key, p in by_key.items()}
            )
        except (PeerUnavailable, errors.ProtocolError, errors.KafkaError) as e:
            log.info(
                "cannot reach the controller for %d ISR change(s) (%s); will retry", len(batch), e
            )
            self._retry(list(by_key.values()))
            return
        if response.error_code != ErrorCode.none and not response.outcomes:
            self._answered_all(list(by_key.values()), response.error_code)
            return
        retry = []
        for outcome in response.outcomes:
            answered = by_key.pop((outcome.topic_id, outcome.partition), None)
            if answered is None:
                continue
            if outcome.error_code in RETRIED:
                retry.append(answered)
            elif outcome.error_code != ErrorCode.none or outcome.state is None:
                self._failed(answered, outcome.error_code)
            else:
                self._stored(answered, outcome.state)
        for unanswered in by_key.values():  # not answered: refused with the request
            self._failed(unanswered, response.error_code)
        self._retry(retry)

    def _answered_all(self, proposals: list[_Proposal], code: ErrorCode) -> None:
        if code in RETRIED:
            self._retry(proposals)
        else:
            for proposal in proposals:
                self._failed(proposal, code)

    def _retry(self, proposals: list[_Proposal]) -> None:
        for proposal in proposals:
            # A newer proposal for the partition (its state changed meanwhile) wins.
            self._pending.setdefault(proposal.partition.topic_partition, proposal)
        if proposals:
            loop = asyncio.get_running_loop()
            self._retry_at = loop.time() + RETRY_BACKOFF_MS / 1000

    def _failed(self, proposal: _Proposal, code: ErrorCode) -> None:
        log.info(
            "%s: the controller refused the ISR %s (%s); the leader decides again",
            proposal.partition.topic_partition,
            list(proposal.isr),
            code.name,
        )
        proposal.partition.isr_change_failed(proposal.state.version)

    def _stored(self, proposal: _Proposal, stored: PartitionState) -> None:
        partition = proposal.partition
        before = set(partition.state.isr)
        if set(stored.isr) - before:
            self.expands += 1
        if before - set(stored.isr):
            self.shrinks += 1
        log.info(
            "%s: ISR is now %s (version %d)",
            partition.topic_partition,
            list(stored.isr),
            stored.version,
        )
        if self._replicas.find(partition.topic_partition) is partition:
            partition.update_state(stored)


class MetadataImageSource(Protocol):
    def __call__(self) -> MetadataImage: ...


def _member(image: MetadataImage, replica: int) -> IsrMember:
    broker = image.brokers.get(replica)
    return IsrMember(replica, UNCHECKED_BROKER_EPOCH if broker is None else broker.epoch)
