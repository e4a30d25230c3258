"""The controller's decisions, sans-IO: what the elected controller does with each
metadata image, each election result, each partition write's result and each tick of
time, answered as commands. :class:`sluice.cluster.controller.Controller` is the shell:
it waits, asks the metadata store, carries out the commands and feeds the results back.

Inputs and the commands they may produce (at most one command waits for its result at
a time: the caller feeds that result before anything else)::

    on_image(image)        follow: the image names another controller (or a newer epoch
                             of this one) → stop acting
                           no controller anywhere → ElectController(node id)
                           acting as controller → reconcile: WritePartitions(changes, E)
    on_elected(epoch)      won: controller(E), the brokers' epochs noted → reconcile
                           lost → nothing (the next image names the winner)
    on_election_failed     the store failed → look again after RETRY_BACKOFF_MS
    on_write_result        Written    → leader elections counted, brokers' epochs noted
                           Lost       → (a newer state) look again after RETRY_BACKOFF_MS
                           StoreFailed→ look again after RETRY_BACKOFF_MS
                           Fenced     → another controller was elected: stop acting
                           (a rebalance write that loses waits for the next interval)
    on_tick(image)         retry due → as on_image; else rebalance due → next interval,
                             WritePartitions(preferred leaders, E)
    on_alter_partition     a leader's ISR change (AlterPartition): not controller →
                             AnswerAlterPartition(NOT_CONTROLLER); else each proposal
                             checked against the image (:mod:`sluice.cluster.alter_partition`),
                             the valid ones WritePartitions(new ISRs, E); once its result
                             comes in → AnswerAlterPartition (stored states, or
                             NOT_CONTROLLER: the leader asks again later)
    on_partition_decisions an administrator's changes (ElectLeaders, reassignments):
                             not controller → AnswerDecisions(NOT_CONTROLLER); else each
                             decided from the image, WritePartitions(new states, E), then
                             AnswerDecisions (stored states; a write that lost: retry,
                             decided again by the caller from a newer image)

``next_wake_ms()`` says when a tick is wanted: the retry while one is pending (the
rebalance waits until the retry looked again), else the next rebalance, else never.
Time is a plain number of milliseconds (``now_ms``) read by the caller from its clock.

The brokers' epochs are a snapshot taken when this broker is elected and after each
reconcile that wrote (or had nothing to write); a later epoch of a broker means it
registered anew (it restarted), so it leaves the ISRs and leads no more until it
catches up. A write that lost changes no snapshot: the next look decides again from the
same starting point.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from sluice.cluster import alter_partition, eligible, leadership
from sluice.cluster.alter_partition import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    PartitionOutcome,
)
from sluice.cluster.image import MetadataImage
from sluice.cluster.model import PartitionState, TopicMetadata
from sluice.cluster.store import PartitionChange
from sluice.common.config import TopicConfig
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition

log = logging.getLogger(__name__)

RETRY_BACKOFF_MS = 200
"""How long the controller waits before looking again after a write lost to a newer
state or the store could not be reached, when no new image arrives sooner."""

MILLISECONDS_PER_SECOND = 1000


@dataclass(frozen=True)
class LeaderRebalance:
    """auto.leader.rebalance.enable: every ``interval_s``
    (leader.imbalance.check.interval.seconds), partitions go back to their preferred
    leader on brokers whose imbalance is above ``imbalance_percentage``
    (leader.imbalance.per.broker.percentage)."""

    interval_s: float
    imbalance_percentage: int

    @property
    def interval_ms(self) -> int:
        return round(self.interval_s * MILLISECONDS_PER_SECOND)


WritePurpose = Literal["reconcile", "rebalance", "alter_partition", "decisions"]


@dataclass(frozen=True, slots=True)
class ElectController:
    """Ask the store to elect this broker (``MetadataStore.elect_controller``); feed
    the result to :meth:`ControllerCore.on_elected` or
    :meth:`ControllerCore.on_election_failed`."""

    node_id: int


@dataclass(frozen=True, slots=True)
class WritePartitions:
    """Write these partition states conditionally on their versions and on controller
    epoch ``epoch`` (``MetadataStore.update_partitions``); feed the outcome, named by
    ``write_id``, to :meth:`ControllerCore.on_write_result`."""

    write_id: int
    changes: tuple[PartitionChange, ...]
    epoch: int
    purpose: WritePurpose


@dataclass(frozen=True, slots=True)
class AnswerAlterPartition:
    """Answer the AlterPartition request ``request_id`` (no result to feed back)."""

    request_id: int
    response: AlterPartitionResponse


@dataclass(frozen=True, slots=True)
class PartitionDecision:
    """An administrator's change of one partition (ElectLeaders,
    AlterPartitionReassignments), decided by the controller from its image."""

    topic: str
    partition: int
    decide: Callable[[PartitionState, MetadataImage], PartitionState | None]
    """The new state (None: nothing to write); raises KafkaError to refuse the change."""


@dataclass(frozen=True, slots=True)
class DecisionOutcome:
    """What became of one decision: ``state`` as stored when one was written;
    ``retry``: the write lost to a newer state, decide again from a newer image."""

    topic: str
    partition: int
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None
    state: PartitionState | None = None
    retry: bool = False


@dataclass(frozen=True, slots=True)
class AnswerDecisions:
    """Answer the decisions of request ``request_id``, in their order."""

    request_id: int
    outcomes: tuple[DecisionOutcome, ...]


ControllerCommand = ElectController | WritePartitions | AnswerAlterPartition | AnswerDecisions


@dataclass(frozen=True, slots=True)
class Written:
    """Every change of the write was stored; ``states``: as stored (with their new
    versions), in the order of the changes (needed for an AlterPartition's answer)."""

    write_id: int
    states: tuple[PartitionState, ...] = ()


@dataclass(frozen=True, slots=True)
class Lost:
    """A partition's stored version was newer than the one decided from (StaleVersion);
    nothing was written."""

    write_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class Fenced:
    """The store holds a newer controller epoch (ControllerFenced): another broker was
    elected; nothing was written."""

    write_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class StoreFailed:
    """The store could not be reached or refused otherwise; nothing was written."""

    write_id: int
    reason: str


WriteResult = Written | Lost | Fenced | StoreFailed


@dataclass(frozen=True, slots=True)
class _AlterInFlight:
    """An AlterPartition request whose valid proposals are being written."""

    request_id: int
    refused: tuple[PartitionOutcome, ...]
    """The proposals answered with an error without writing."""
    written: tuple[PartitionOutcome, ...]
    """The proposals being written (their outcome's state: the state written)."""


@dataclass(frozen=True, slots=True)
class _DecisionsInFlight:
    request_id: int
    outcomes: tuple[DecisionOutcome, ...]
    """Every decision's outcome; those being written hold the state to write."""


@dataclass(frozen=True, slots=True)
class _Write:
    command: WritePartitions
    image: MetadataImage
    """The image the changes were decided from."""
    alter: _AlterInFlight | None = None
    decisions: _DecisionsInFlight | None = None


class ControllerCore:
    def __init__(
        self,
        node_id: int,
        topic_defaults: Mapping[str, str] | None = None,
        rebalance: LeaderRebalance | None = None,
    ) -> None:
        self._node_id = node_id
        self._topic_defaults: Mapping[str, str] = {} if topic_defaults is None else topic_defaults
        """The brokers' topic config defaults (unclean.leader.election.enable…), shared:
        dynamic broker configs change them."""
        self._rebalance = rebalance
        self._epoch: int | None = None
        self._broker_epochs: dict[int, int] = {}
        """Each broker's registration epoch when the controller last wrote and saw it
        live (kept while it is away): a different one later means the broker registered
        anew (it restarted), even when it was gone in between. A restart before this
        broker was elected shows in the partition states instead
        (:meth:`PartitionState.registered_since`)."""
        self._next_rebalance_ms: int | None = None
        self._retry_at_ms: int | None = None
        self._electing_from: MetadataImage | None = None
        """The image an election in flight was asked from."""
        self._in_flight: _Write | None = None
        self._write_ids = itertools.count(1)
        self.leader_elections = 0
        """Partitions whose leader this controller changed (a metric the broker reads)."""

    @property
    def epoch(self) -> int | None:
        """The controller epoch while this broker is controller, else None."""
        return self._epoch

    def start(self, now_ms: int) -> None:
        """The controller starts looking: the rebalance interval counts from now."""
        if self._rebalance is not None:
            self._next_rebalance_ms = now_ms + self._rebalance.interval_ms

    def next_wake_ms(self) -> int | None:
        """When :meth:`on_tick` is wanted: a pending retry first, else the next
        rebalance; None while only a new image can change anything."""
        if self._retry_at_ms is not None:
            return self._retry_at_ms
        return self._next_rebalance_ms

    def on_image(self, image: MetadataImage, now_ms: int) -> list[ControllerCommand]:
        """Look at the store's current image: follow another controller, ask to be
        elected, or reconcile while controller."""
        self._assert_idle()
        self._retry_at_ms = None
        self._follow(image)
        if self._epoch is None and image.controller is None:
            self._electing_from = image
            return [ElectController(self._node_id)]
        if self._epoch is None:
            return []
        return self._reconcile(image, self._epoch)

    def on_elected(
        self, epoch: int | None, image: MetadataImage, now_ms: int
    ) -> list[ControllerCommand]:
        """The election asked for ended: ``epoch`` when this broker won, None when
        another did; ``image`` is the store's image after it."""
        before = self._electing_from
        assert before is not None, "an election result without an election"
        self._electing_from = None
        if epoch is not None:
            self._epoch = epoch
            self._broker_epochs = {n: b.epoch for n, b in before.brokers.items()}
            log.info("broker %d is now the controller (epoch %d)", self._node_id, epoch)
        if self._epoch is None:
            return []
        return self._reconcile(image, self._epoch)

    def on_election_failed(self, reason: str, now_ms: int) -> list[ControllerCommand]:
        """The store failed to hold the election: look again later."""
        assert self._electing_from is not None, "an election result without an election"
        self._electing_from = None
        log.warning("controller: the metadata store failed (%s); will retry", reason)
        self._retry_at_ms = now_ms + RETRY_BACKOFF_MS
        return []

    def on_write_result(self, result: WriteResult, now_ms: int) -> list[ControllerCommand]:
        """The outcome of the :class:`WritePartitions` in flight."""
        write = self._in_flight
        assert write is not None and write.command.write_id == result.write_id, (
            f"result of write {result.write_id}, in flight: {write}"
        )
        self._in_flight = None
        if isinstance(result, Fenced):
            self._stop_acting(result.reason)
        if write.alter is not None:
            return [self._alter_answer(write.alter, result)]
        if write.decisions is not None:
            return [_decisions_answer(write.decisions, result)]
        if isinstance(result, Fenced):
            return []
        if write.command.purpose == "rebalance":
            if isinstance(result, Written):
                log.info(
                    "controller: moved %d partition(s) back to their preferred leader",
                    len(write.command.changes),
                )
            else:
                log.info("controller: leader rebalance deferred (%s)", result.reason)
            return []
        if isinstance(result, Lost):
            # Usually its own previous write, not yet in the image it decided from.
            log.debug("controller: a partition changed meanwhile (%s); trying again", result.reason)
            self._retry_at_ms = now_ms + RETRY_BACKOFF_MS
            return []
        if isinstance(result, StoreFailed):
            log.warning("controller: the metadata store failed (%s); will retry", result.reason)
            self._retry_at_ms = now_ms + RETRY_BACKOFF_MS
            return []
        changes = write.command.changes
        image = write.image
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
        self._note_broker_epochs(image)
        return []

    def on_tick(self, image: MetadataImage, now_ms: int) -> list[ControllerCommand]:
        """Time passed (``image``: the store's current one): look again when a retry is
        due, else rebalance leadership when the interval is over."""
        self._assert_idle()
        if self._retry_at_ms is not None:
            if now_ms < self._retry_at_ms:
                return []
            return self.on_image(image, now_ms)
        rebalance = self._rebalance
        if rebalance is None or self._next_rebalance_ms is None:
            return []
        if now_ms < self._next_rebalance_ms:
            return []
        self._next_rebalance_ms = now_ms + rebalance.interval_ms
        return self._rebalance_leaders(image, rebalance)

    def on_alter_partition(
        self,
        request_id: int,
        request: AlterPartitionRequest,
        image: MetadataImage,
        now_ms: int,
    ) -> list[ControllerCommand]:
        """A leader's AlterPartition request (``request_id``: the caller's name for it):
        answered at once when nothing is to be written, else once the write of the
        valid proposals' ISRs (conditional on their versions and this controller's
        epoch) has a result."""
        self._assert_idle()
        self._follow(image)
        epoch = self._epoch
        if epoch is None:
            response = alter_partition.refused(request, ErrorCode.not_controller)
            return [AnswerAlterPartition(request_id, response)]
        requester = alter_partition.check_requester(request, image)
        if requester != ErrorCode.none:
            return [AnswerAlterPartition(request_id, alter_partition.refused(request, requester))]
        refused: list[PartitionOutcome] = []
        written: list[PartitionOutcome] = []
        changes: list[PartitionChange] = []
        for proposal in request.proposals:
            code, state = alter_partition.check(request.broker_id, proposal, image)
            named = (proposal.topic_id, proposal.partition)
            if code == ErrorCode.none and named in {(o.topic_id, o.partition) for o in written}:
                code = ErrorCode.invalid_request  # the same partition twice in one request
            if code != ErrorCode.none or state is None:
                refused.append(PartitionOutcome(proposal.topic_id, proposal.partition, code))
                continue
            topic = image.topic_by_id(proposal.topic_id)
            assert topic is not None  # checked
            new_state = eligible.with_isr(state, proposal.isr, self._min_insync(topic))
            written.append(
                PartitionOutcome(proposal.topic_id, proposal.partition, ErrorCode.none, new_state)
            )
            changes.append(PartitionChange(topic.name, proposal.partition, new_state))
        if not changes:
            return [
                AnswerAlterPartition(
                    request_id, AlterPartitionResponse(ErrorCode.none, tuple(refused))
                )
            ]
        command = self._write(changes, epoch, "alter_partition", image)
        assert self._in_flight is not None
        self._in_flight = dataclasses.replace(
            self._in_flight, alter=_AlterInFlight(request_id, tuple(refused), tuple(written))
        )
        return [command]

    def _alter_answer(self, alter: _AlterInFlight, result: WriteResult) -> AnswerAlterPartition:
        """The answer to an AlterPartition once its write has ``result``: the stored
        states, or NOT_CONTROLLER for every written proposal (a newer state won, the
        store failed, or another controller was elected: the leader asks again later,
        and is then answered from a newer image)."""
        if isinstance(result, Written):
            assert len(result.states) == len(alter.written), "the stored states of the write"
            outcomes = tuple(
                dataclasses.replace(outcome, state=state)
                for outcome, state in zip(alter.written, result.states, strict=True)
            )
            log.info(
                "controller: stored ISR change(s) asked by a leader: %s",
                ", ".join(
                    f"{o.topic_id}-{o.partition} ISR {list(o.state.isr)}"
                    for o in outcomes
                    if o.state is not None
                ),
            )
        else:
            log.info("controller: AlterPartition not written (%s)", result)
            outcomes = tuple(
                PartitionOutcome(o.topic_id, o.partition, ErrorCode.not_controller)
                for o in alter.written
            )
        return AnswerAlterPartition(
            alter.request_id, AlterPartitionResponse(ErrorCode.none, alter.refused + outcomes)
        )

    def on_partition_decisions(
        self,
        request_id: int,
        decisions: tuple[PartitionDecision, ...],
        image: MetadataImage,
        now_ms: int,
    ) -> list[ControllerCommand]:
        """An administrator's changes (``request_id``: the caller's name for them), each
        decided from ``image`` and written together, conditionally on the states'
        versions and this controller's epoch; answered once the write has a result
        (at once when nothing is to be written). A partition named twice is decided
        once per write: the later decision is answered ``retry``."""
        self._assert_idle()
        self._follow(image)
        epoch = self._epoch
        if epoch is None:
            return [
                AnswerDecisions(
                    request_id,
                    tuple(
                        DecisionOutcome(
                            d.topic, d.partition, ErrorCode.not_controller, "not the controller"
                        )
                        for d in decisions
                    ),
                )
            ]
        outcomes: list[DecisionOutcome] = []
        changes: list[PartitionChange] = []
        deciding: set[tuple[str, int]] = set()
        for decision in decisions:
            named = (decision.topic, decision.partition)
            outcome = DecisionOutcome(*named)
            state = image.partition(TopicPartition(*named))
            if state is None:
                outcome = DecisionOutcome(
                    *named,
                    ErrorCode.unknown_topic_or_partition,
                    f"No such partition as {decision.topic}-{decision.partition}",
                )
            elif named in deciding:
                outcome = DecisionOutcome(*named, retry=True)
            else:
                try:
                    new_state = decision.decide(state, image)
                except KafkaError as e:
                    outcome = DecisionOutcome(*named, e.code, e.message)
                else:
                    if new_state is not None:
                        deciding.add(named)
                        outcome = DecisionOutcome(*named, state=new_state)
                        changes.append(
                            PartitionChange(decision.topic, decision.partition, new_state)
                        )
            outcomes.append(outcome)
        if not changes:
            return [AnswerDecisions(request_id, tuple(outcomes))]
        command = self._write(changes, epoch, "decisions", image)
        assert self._in_flight is not None
        self._in_flight = dataclasses.replace(
            self._in_flight, decisions=_DecisionsInFlight(request_id, tuple(outcomes))
        )
        return [command]

    def _assert_idle(self) -> None:
        assert self._in_flight is None, f"write {self._in_flight} still in flight"
        assert self._electing_from is None, "an election still in flight"

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

    def _stop_acting(self, reason: str) -> None:
        """A write was refused for the epoch: another broker was elected meanwhile."""
        log.warning(
            "broker %d stops acting as controller: another broker was elected while it "
            "was away (%s)",
            self._node_id,
            reason,
        )
        self._epoch = None

    def _unclean_allowed(self, topic: TopicMetadata) -> bool:
        config = TopicConfig.from_entries(topic.configs, self._topic_defaults)
        return config.unclean_leader_election_enable

    def _min_insync(self, topic: TopicMetadata) -> int:
        """The topic's min.insync.replicas, which decides its eligible leader replicas."""
        return TopicConfig.from_entries(topic.configs, self._topic_defaults).min_insync_replicas

    def _rebalance_leaders(
        self, image: MetadataImage, rebalance: LeaderRebalance
    ) -> list[ControllerCommand]:
        """Move leadership back to preferred replicas where a broker's imbalance is too
        high (auto.leader.rebalance.enable). A write that loses waits for next time."""
        epoch = self._epoch
        if epoch is None:
            return []
        changes = leadership.preferred_leader_changes(image, rebalance.imbalance_percentage)
        if not changes:
            return []
        return [self._write(changes, epoch, "rebalance", image)]

    def _reconcile(self, image: MetadataImage, epoch: int) -> list[ControllerCommand]:
        restarted = {
            node_id
            for node_id, broker in image.brokers.items()
            if self._broker_epochs.get(node_id, broker.epoch) != broker.epoch
        }
        changes = leadership.reconcile(image, restarted, self._unclean_allowed, self._min_insync)
        deciding = {(c.topic, c.partition) for c in changes}
        changes += [
            c
            for c in leadership.reassignments_completed(image)
            if (c.topic, c.partition) not in deciding  # the next round completes it
        ]
        if not changes:
            self._note_broker_epochs(image)
            return []
        return [self._write(changes, epoch, "reconcile", image)]

    def _note_broker_epochs(self, image: MetadataImage) -> None:
        """The registrations ``image`` shows are the ones decided on: a later epoch
        means a restart. Brokers that are away keep theirs (gone and back is a restart)."""
        self._broker_epochs.update({n: b.epoch for n, b in image.brokers.items()})

    def _write(
        self,
        changes: list[PartitionChange],
        epoch: int,
        purpose: WritePurpose,
        image: MetadataImage,
    ) -> WritePartitions:
        command = WritePartitions(next(self._write_ids), tuple(changes), epoch, purpose)
        self._in_flight = _Write(command, image)
        return command


def _decisions_answer(decisions: _DecisionsInFlight, result: WriteResult) -> AnswerDecisions:
    """The outcomes once the decisions' write has ``result``: the stored states, or for
    the written ones ``retry`` (lost to a newer state) or NOT_CONTROLLER (fenced, or
    the store failed: the client asks again)."""
    stored = iter(result.states) if isinstance(result, Written) else None
    outcomes = []
    for outcome in decisions.outcomes:
        if outcome.state is None or outcome.retry:
            outcomes.append(outcome)
        elif stored is not None:
            outcomes.append(dataclasses.replace(outcome, state=next(stored)))
        elif isinstance(result, Lost):
            outcomes.append(dataclasses.replace(outcome, state=None, retry=True))
        else:
            outcomes.append(
                DecisionOutcome(
                    outcome.topic,
                    outcome.partition,
                    ErrorCode.not_controller,
                    f"the controller could not store the change ({result})",
                )
            )
    return AnswerDecisions(decisions.request_id, tuple(outcomes))
