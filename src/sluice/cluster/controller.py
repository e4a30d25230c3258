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
:data:`~sluice.cluster.controller_core.RETRY_BACKOFF_MS` if none comes; a write refused
for the epoch (ControllerFenced) means another broker was elected while this one was away
(a lost ZooKeeper session, a paused process): this one stops acting at once and writes
nothing more. On one node the embedded store elects the only broker at every start.

The controller is also the one writer of ISR changes: partition leaders send it
AlterPartition (:meth:`Controller.alter_partition`, from the handler or, on the
controller broker, a local call), and it writes the new ISR conditionally on the
partition's version and its own epoch.

The decisions are :class:`~sluice.cluster.controller_core.ControllerCore`'s (sans-IO);
this module is the shell around it: it waits for a new image or the core's next wake-up
time, asks the store (the elections and the writes, one at a time) and feeds each result
back to the core. The core takes one input at a time: a lock keeps the loop's looks and
the AlterPartition requests from overlapping.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Mapping

from sluice.cluster.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from sluice.cluster.controller_core import (
    AnswerAlterPartition,
    AnswerDecisions,
    ControllerCommand,
    ControllerCore,
    DecisionOutcome,
    ElectController,
    Fenced,
    LeaderRebalance,
    Lost,
    PartitionDecision,
    StoreFailed,
    WritePartitions,
    WriteResult,
    Written,
)
from sluice.cluster.store import ControllerFenced, MetadataStore, MetadataStoreError, StaleVersion
from sluice.common.clock import SYSTEM_CLOCK, Clock
from sluice.common.errors import ErrorCode

__all__ = ["Controller", "DecisionOutcome", "LeaderRebalance", "PartitionDecision"]

DECISION_ATTEMPTS_MAX = 10
"""Times an administrator's change is decided again after its write lost to a newer
state before it is answered REQUEST_TIMED_OUT."""
NEWER_IMAGE_WAIT_S = 10.0
"""How long a change that lost waits for the store's newer image before deciding again."""


class Controller:
    def __init__(
        self,
        store: MetadataStore,
        node_id: int,
        topic_defaults: Mapping[str, str] | None = None,
        rebalance: LeaderRebalance | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._store = store
        self._clock = clock
        self._core = ControllerCore(node_id, topic_defaults, rebalance)
        self._changed = asyncio.Event()
        self._changed.set()
        self._lock = asyncio.Lock()
        """Held while the core decides and its commands are carried out."""
        self._request_ids = itertools.count(1)
        self._answers: dict[int, AlterPartitionResponse] = {}
        self._decided: dict[int, tuple[DecisionOutcome, ...]] = {}
        self._image_changed = asyncio.Event()

    @property
    def epoch(self) -> int | None:
        """The controller epoch while this broker is controller, else None."""
        return self._core.epoch

    @property
    def leader_elections(self) -> int:
        """Partitions whose leader this controller changed (a metric the broker reads)."""
        return self._core.leader_elections

    def notify(self) -> None:
        """A new image was published: look at it (on the event loop)."""
        self._changed.set()
        self._image_changed.set()

    async def run(self) -> None:
        """Act on images until cancelled; rebalance leadership now and then, and look
        again after a write that lost or a store that failed."""
        core = self._core
        clock = self._clock
        core.start(clock.monotonic_ms())
        while True:
            wake_ms = core.next_wake_ms()
            if wake_ms is None:
                await self._changed.wait()
            else:
                timeout_ms = max(wake_ms - clock.monotonic_ms(), 0)
                # asyncio.timeout, not wait_for, which on Python 3.11 can lose a cancellation
                # that comes as the event is set: then this loop never ends (cpython#86296).
                try:
                    async with asyncio.timeout(timeout_ms / 1000):
                        await self._changed.wait()
                except TimeoutError:
                    await self._step(
                        lambda: core.on_tick(self._store.image(), clock.monotonic_ms())
                    )
                    continue
            self._changed.clear()
            await self._step(lambda: core.on_image(self._store.image(), clock.monotonic_ms()))

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        """A leader's AlterPartition: the controller's answer once the valid proposals'
        ISRs are stored (NOT_CONTROLLER while this broker is not the controller)."""
        request_id = next(self._request_ids)
        await self._step(
            lambda: self._core.on_alter_partition(
                request_id, request, self._store.image(), self._clock.monotonic_ms()
            )
        )
        return self._answers.pop(request_id)

    async def change_partitions(self, decisions: list[PartitionDecision]) -> list[DecisionOutcome]:
        """An administrator's changes (ElectLeaders, reassignments), decided from the
        controller's image and stored with its epoch; decided again from a newer image
        when a write loses to a newer state. The outcomes are in the decisions' order;
        NOT_CONTROLLER for each while this broker is not the controller."""
        done: dict[int, DecisionOutcome] = {}
        pending = list(enumerate(decisions))
        for _ in range(DECISION_ATTEMPTS_MAX):
            seen = self._store.image()
            outcomes = await self._decide_once(tuple(d for _, d in pending))
            again = []
            for (index, decision), outcome in zip(pending, outcomes, strict=True):
                if outcome.retry:
                    again.append((index, decision))
                else:
                    done[index] = outcome
            pending = again
            if not pending:
                break
            await self._newer_image(seen)
        for index, decision in pending:
            done[index] = DecisionOutcome(
                decision.topic,
                decision.partition,
                ErrorCode.request_timed_out,
                f"{decision.topic}-{decision.partition} kept changing; try again",
            )
        return [done[index] for index in range(len(decisions))]

    async def _decide_once(
        self, decisions: tuple[PartitionDecision, ...]
    ) -> tuple[DecisionOutcome, ...]:
        request_id = next(self._request_ids)
        await self._step(
            lambda: self._core.on_partition_decisions(
                request_id, decisions, self._store.image(), self._clock.monotonic_ms()
            )
        )
        return self._decided.pop(request_id)

    async def _newer_image(self, seen: object) -> None:
        """Wait (a bounded time) until the store's image is another than ``seen``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + NEWER_IMAGE_WAIT_S
        while self._store.image() is seen and loop.time() < deadline:
            self._image_changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(deadline - loop.time()):
                    await self._image_changed.wait()

    async def _step(self, decide: Callable[[], list[ControllerCommand]]) -> None:
        """Under the lock: ask the core (``decide``) and carry out what it answers."""
        async with self._lock:
            await self._carry_out(decide())

    async def _carry_out(self, commands: list[ControllerCommand]) -> None:
        """Carry out the core's commands one at a time, feeding each result back (it
        may answer with the next command: an election won is followed by a write)."""
        core = self._core
        pending = list(commands)
        while pending:
            command = pending.pop(0)
            if isinstance(command, AnswerAlterPartition):
                self._answers[command.request_id] = command.response
            elif isinstance(command, AnswerDecisions):
                self._decided[command.request_id] = command.outcomes
            elif isinstance(command, ElectController):
                try:
                    epoch = await self._store.elect_controller(command.node_id)
                except MetadataStoreError as e:
                    pending += core.on_election_failed(str(e), self._clock.monotonic_ms())
                    continue
                pending += core.on_elected(epoch, self._store.image(), self._clock.monotonic_ms())
            else:
                result = await self._write(command)
                pending += core.on_write_result(result, self._clock.monotonic_ms())

    async def _write(self, command: WritePartitions) -> WriteResult:
        try:
            states = await self._store.update_partitions(list(command.changes), command.epoch)
        except StaleVersion as e:
            return Lost(command.write_id, str(e))
        except ControllerFenced as e:
            return Fenced(command.write_id, str(e))
        except MetadataStoreError as e:
            return StoreFailed(command.write_id, str(e))
        return Written(command.write_id, tuple(states))
