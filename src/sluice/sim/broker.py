"""A broker of the simulation: the broker's replication state machines
(:class:`~sluice.replication.leader.LeaderCore`,
:class:`~sluice.replication.follower.FollowerCore`,
:class:`~sluice.cluster.controller_core.ControllerCore`) run on simulated time, talking
over the simulated network, writing simulated logs and the simulated metadata store.

What the asyncio broker's shells do, this one does in events: apply each metadata image
(lead, follow, stop), answer produces and follower fetches as leader, run one fetcher per
leader it follows, write the ISR changes its leaders propose, and act as controller when
elected. A crash drops everything but the logs (and, for a machine crash, what they had
not synced); the store ends the broker's session after its timeout."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sluice.cluster import controller_core as cc
from sluice.cluster.alter_partition import (
    UNCHECKED_BROKER_EPOCH,
    AlterPartitionRequest,
    AlterPartitionResponse,
    IsrMember,
    IsrProposal,
)
from sluice.cluster.image import MetadataImage
from sluice.cluster.model import PartitionState
from sluice.cluster.store import ControllerFenced, StaleVersion
from sluice.common import errors
from sluice.common.config import BrokerConfig
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition
from sluice.replication import follower as fc
from sluice.replication.leader import LeaderCore, Transition
from sluice.sim.disk import Control, SimLog, SimRecord
from sluice.sim.invariants import Monitor
from sluice.sim.network import Network
from sluice.sim.store import SimMetadataStore
from sluice.sim.txnlog import transactions
from sluice.sim.world import NodeClock, Timer, World

NO_LEADER = -1
REQUEST_TIMEOUT_MS = 1_000
"""A fetcher (or producer) that hears nothing back for this long gives the request up."""
RECORDS_PER_FETCH_MAX = 64
PRODUCE_TIMEOUT_MS = 2_000
ISR_RETRY_BACKOFF_MS = 100
"""A leader whose AlterPartition found no controller (or no answer) asks again after this."""
BUGS = {
    "skip-truncation": "a follower ignores the leader's word to truncate its diverged tail",
    "hw-from-leader-only": "the leader moves the high watermark to its own log end",
    "ack-before-isr": "an acks=all produce is answered once the leader appended it",
    "read-past-lso": "a read_committed fetch reads up to the high watermark, not the LSO",
}
"""Deliberate defects a run may switch on, to show that the checks find them."""


# ── messages on the network ────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    request_id: int
    topic_partition: TopicPartition
    producer_id: int
    sequence: int
    value: str
    producer_epoch: int = 0
    transactional: bool = False
    control: Control | None = None
    """A COMMIT or ABORT marker of the producer's transaction at ``producer_epoch`` (the
    transaction coordinator's WriteTxnMarkers; no value, no sequence)."""


@dataclass(frozen=True, slots=True)
class ProduceAnswer:
    request_id: int
    error_code: int
    offset: int = -1


@dataclass(frozen=True, slots=True)
class EpochRequest:
    request_id: int
    asks: tuple[fc.EpochAsk, ...]


@dataclass(frozen=True, slots=True)
class EpochReply:
    request_id: int
    answers: tuple[fc.EpochAnswer, ...]


@dataclass(frozen=True, slots=True)
class FetchAsk:
    topic_partition: TopicPartition
    fetch_offset: int
    last_fetched_epoch: int
    current_leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    request_id: int
    replica_id: int
    asks: tuple[FetchAsk, ...]


@dataclass(frozen=True, slots=True)
class FetchReply:
    request_id: int
    partitions: tuple[fc.FetchedPartition, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionAsk:
    request_id: int
    request: AlterPartitionRequest


@dataclass(frozen=True, slots=True)
class AlterPartitionReply:
    request_id: int
    response: AlterPartitionResponse


def encode_records(records: list[SimRecord]) -> bytes:
    if not records:
        return b""
    return json.dumps(
        [
            [r.epoch, r.producer_id, r.sequence, r.value, r.producer_epoch, r.transactional]
            + ([r.control] if r.control is not None else [])
            for r in records
        ]
    ).encode()


def decode_records(data: bytes | memoryview) -> list[SimRecord]:
    return [SimRecord(*item) for item in json.loads(bytes(data))] if len(data) else []


# ── a replica hosted by a broker ───────────────────────────────────────────────────


@dataclass(eq=False)
class Replica:
    """A partition replica of a running broker (what ``FollowerCore`` follows)."""

    topic_partition: TopicPartition
    log: SimLog
    core: LeaderCore
    detached: bool = False
    producers: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    """Producer id → its last sequences appended here, with their offsets (at most 5,
    as the broker keeps them for idempotence)."""

    @property
    def leader_epoch(self) -> int:
        return self.core.state.leader_epoch


@dataclass
class _Waiting:
    request: ProduceRequest
    client: int
    end_offset: int
    leader_epoch: int
    offset: int
    timer: Timer


class Listener(Protocol):
    """What another part of the simulation (the transaction coordinator) hears of a
    broker: changes of a replica's state, a high watermark moving, and a crash."""

    def replica_changed(self, replica: Replica) -> None: ...

    def high_watermark_moved(self, replica: Replica) -> None: ...

    def crashed(self) -> None: ...


class SimBroker:
    def __init__(
        self,
        node_id: int,
        world: World,
        network: Network,
        store: SimMetadataStore,
        publish: Callable[[], None],
        config: BrokerConfig,
        inject: frozenset[str] = frozenset(),
        reaches_store: Callable[[int], bool] = lambda _node: True,
        monitor: Monitor | None = None,
    ) -> None:
        self.node_id = node_id
        self.monitor = monitor
        """Told of each decision that an invariant constrains, as it is made."""
        self.inject = inject
        self._reaches_store = reaches_store
        """Whether this broker can talk to the metadata store now (a partition may cut it
        off: its writes fail, and it sees no new image)."""
        self.world = NodeClock(world)
        """The broker's time: a pause stops it, a crash drops its timers."""
        self.network = network
        self.store = store
        self._publish = publish
        self.config = config
        self.logs: dict[TopicPartition, SimLog] = {}
        """The broker's disk: kept across crashes."""
        self.up = False
        self.registered_at = -1
        self.logs_intact = False
        """What the next registration says: false at the first start (a new data
        directory) and after a machine crash, true after a process crash."""
        self.handlers: dict[type[Any], Callable[[int, Any], None]] = {}
        """Messages of the simulation's other parts (transactions, consumers), by type:
        the handler gets the sender and the message while the broker runs."""
        self.listeners: list[Listener] = []
        self._isr_request_ids = 0
        """Never reset: an answer from before a crash must not match a later request."""
        self.slow_disk_ms = 0
        """While above 0, each log write takes this long, one at a time (a slow disk)."""
        self._reset()

    def _reset(self) -> None:
        self.replicas: dict[TopicPartition, Replica] = {}
        self.image: MetadataImage | None = None
        self._min_insync_of: dict[str, int] = {}
        self.fetchers: dict[int, _Fetcher] = {}
        self.controller = cc.ControllerCore(self.node_id)
        self._controller_timer: Timer | None = None
        self._waiting: dict[TopicPartition, list[_Waiting]] = {}
        self._parked: list[tuple[int, FetchRequest, Timer]] = []
        self._isr_asks: dict[int, tuple[Replica, tuple[int, ...], int, Timer]] = {}
        """AlterPartition requests this broker's leaders sent: the replica, the ISR
        proposed, the version it was proposed from, the answer's deadline."""
        self._alter_asks: dict[int, tuple[int, int]] = {}
        """As controller: AlterPartition requests being written, by the core's request
        id: the leader that asked and its request id."""
        self._lag_timer: Timer | None = None
        self._requests = 0
        self._disk_queue: deque[Callable[[], None]] = deque()
        """Log writes waiting for a slow disk, first first (a crash loses them)."""
        self._disk_timer: Timer | None = None

    # ── life ────────────────────────────────────────────────────────────────────────

    def start(self) -> None:
        self.up = True
        self.network.attach(self.node_id, self._receive)
        self.registered_at = self.store.register(self.node_id, logs_intact=self.logs_intact).epoch
        self.controller.start(self.world.now_ms)
        self._lag_timer = self.world.after(
            self.config.replica_lag_time_max_ms // 2, self._check_lag
        )
        self._publish()

    def reregistered(self, epoch: int) -> None:
        """A new session after the old one ended (a network cut healed): what it led
        under states of before, it leads no more."""
        self.registered_at = epoch
        for replica in self.replicas.values():
            replica.core.registered(epoch)

    def crash(self, *, lose_unflushed: bool) -> None:
        """Stop at once: the network no longer reaches this broker, its memory is gone,
        its logs keep what ``lose_unflushed`` says (the session ends later, in the
        store's time)."""
        self.up = False
        self.world.reset()
        self.network.detach(self.node_id)
        for fetcher in self.fetchers.values():
            fetcher.stop()
        for timer in (self._controller_timer, self._lag_timer):
            if timer is not None:
                timer.cancel()
        for waiting in self._waiting.values():
            for item in waiting:
                item.timer.cancel()
        for _, _, timer in self._parked:
            timer.cancel()
        for *_, timer in self._isr_asks.values():
            timer.cancel()
        for log in self.logs.values():
            log.crash(lose_unflushed=lose_unflushed)
        self.logs_intact = not lose_unflushed
        self._reset()
        for listener in self.listeners:
            listener.crashed()

    def pause(self) -> None:
        """Stop processing (a SIGSTOP, a long collection): timers and whatever arrives
        wait for :meth:`resume`; the session goes on without heartbeats."""
        self.world.pause()

    def resume(self) -> None:
        """Go on from where the pause stopped: what waited runs now, on the view of the
        cluster the broker had (the images that came meanwhile, in their turn)."""
        self.world.resume()

    @property
    def paused(self) -> bool:
        return self.world.paused

    def write_to_disk(self, done: Callable[[], None]) -> None:
        """A log write: ``done`` runs once it is written. The disk writes one at a time,
        each taking ``slow_disk_ms`` while it is slow, and at once when it is healthy."""
        if not self._disk_queue and self.slow_disk_ms <= 0:
            done()
            return
        self._disk_queue.append(done)
        if self._disk_timer is None:
            self._disk_timer = self.world.after(self.slow_disk_ms, self._disk_wrote)

    def _disk_wrote(self) -> None:
        self._disk_timer = None
        self._disk_queue.popleft()()
        if self._disk_queue:
            self._disk_timer = self.world.after(self.slow_disk_ms, self._disk_wrote)

    def disk_recovers(self) -> None:
        """The disk is healthy again: what queued on it is written at once."""
        self.slow_disk_ms = 0
        if self._disk_timer is not None:
            self._disk_timer.cancel()
            self._disk_timer = None
        while self._disk_queue:
            self._disk_queue.popleft()()

    # ── metadata ───────────────────────────────────────────────────────────────────

    def apply(self, image: MetadataImage) -> None:
        """A new image reached this broker: lead, follow or stop for each partition
        it hosts, then let the controller look."""
        if not self.up or self.world.hold(lambda: self.apply(image)):
            return
        self.image = image
        now = self.world.now_ms
        for topic in image.topics.values():
            self._min_insync_of[topic.name] = int(topic.configs.get("min.insync.replicas", "1"))
            for index, state in topic.partitions.items():
                tp = TopicPartition(topic.name, index)
                if self.node_id not in state.replicas:
                    continue
                self._apply_state(tp, state, now)
        self._controller_step(self.controller.on_image(image, now))

    def _apply_state(self, tp: TopicPartition, state: PartitionState, now: int) -> None:
        log = self.logs.setdefault(tp, SimLog(f"{tp.topic}-{tp.partition}@{self.node_id}"))
        replica = self.replicas.get(tp)
        if replica is None:
            replica = self.replicas[tp] = Replica(
                tp,
                log,
                LeaderCore(
                    tp, self.node_id, state, changes_isr=True, registered_at=self.registered_at
                ),
            )
            transition = Transition.LEADS if replica.core.is_leader else Transition.FOLLOWS
        else:
            transition = replica.core.update_state(state, now)
        if transition is Transition.IGNORED:
            return
        if transition is Transition.LEADS:
            log.begin_leader_epoch(state.leader_epoch)
            replica.core.begin_leading(now, log.epochs.start_offset_of(state.leader_epoch))
            if self.monitor is not None:
                self.monitor.begins_leading(tp, self.node_id, state.leader_epoch, log)
            replica.producers = _producer_state(log)
        if replica.core.is_leader:
            self._unfollow(tp)
            self._advance(replica)
        else:
            self._settle_waiting(replica)
            leader = state.leader
            if leader not in (NO_LEADER, self.node_id):
                self._follow(replica, leader)
            else:
                self._unfollow(tp)
        for listener in self.listeners:
            listener.replica_changed(replica)

    # ── leader: produce ─────────────────────────────────────────────────────────────

    def _produce(self, client: int, request: ProduceRequest) -> None:
        replica = self.replicas.get(request.topic_partition)
        try:
            if replica is None:
                raise errors.NotLeaderOrFollower("not a replica here")
            replica.core.check_leader()
            replica.core.check_enough_replicas(self._min_insync(replica), errors.NotEnoughReplicas)
        except KafkaError as e:
            self.send(client, ProduceAnswer(request.request_id, e.code))
            return
        log = replica.log
        known_epoch = transactions(log).producer_epochs.get(request.producer_id, -1)
        if request.producer_epoch < known_epoch:
            # A zombie of a producer (or a marker of a transaction) a newer epoch fenced.
            self.send(client, ProduceAnswer(request.request_id, ErrorCode.invalid_producer_epoch))
            return
        if request.control is not None:
            self._append_marker(client, request, replica)
            return
        if request.producer_epoch > known_epoch:
            replica.producers.pop(request.producer_id, None)  # a new epoch starts at 0
        done = replica.producers.setdefault(request.producer_id, [])
        for sequence, offset in done:
            if sequence == request.sequence:  # a retry of an appended batch
                self._wait_for_replicas(client, request, replica, offset)
                return
        last = done[-1][0] if done else -1
        if (done and request.sequence != last + 1) or (not done and request.sequence != 0):
            # (a producer unknown here may start at 0 only, as Kafka's rule says)
            self.send(
                client, ProduceAnswer(request.request_id, ErrorCode.out_of_order_sequence_number)
            )
            return
        offset = log.append(
            [
                SimRecord(
                    replica.leader_epoch,
                    request.producer_id,
                    request.sequence,
                    request.value,
                    request.producer_epoch,
                    request.transactional,
                )
            ]
        )
        done.append((request.sequence, offset))
        del done[:-5]
        if "ack-before-isr" in self.inject:
            self._acknowledged(replica, request, replica.leader_epoch, offset)
            self.send(client, ProduceAnswer(request.request_id, ErrorCode.none, offset))
            self._advance(replica)
            return
        self._wait_for_replicas(client, request, replica, offset)
        self._advance(replica)
        self._answer_parked()

    def _append_marker(self, client: int, request: ProduceRequest, replica: Replica) -> None:
        """A transaction's marker, answered once replicated as an acks=all produce is; it
        ends the producer's sequences of that epoch."""
        offset = replica.log.append(
            [
                SimRecord(
                    replica.leader_epoch,
                    request.producer_id,
                    -1,
                    "",
                    request.producer_epoch,
                    True,
                    request.control,
                )
            ]
        )
        replica.producers.pop(request.producer_id, None)
        self._wait_for_replicas(client, request, replica, offset)
        self._advance(replica)
        self._answer_parked()

    def append_as_leader(self, tp: TopicPartition, values: list[str]) -> int | None:
        """Append ``values`` as records of no producer (a coordinator's state) to a
        partition this broker leads with enough replicas in sync: the log end offset after
        them, or None when it cannot (not the leader, too few in sync). The caller waits
        for the high watermark to pass that end (:class:`Listener`)."""
        replica = self.replicas.get(tp)
        if replica is None or not replica.core.is_leader:
            return None
        try:
            replica.core.check_leader()
            replica.core.check_enough_replicas(self._min_insync(replica), errors.NotEnoughReplicas)
        except KafkaError:
            return None
        replica.log.append([SimRecord(replica.leader_epoch, -1, -1, value) for value in values])
        self._advance(replica)
        self._answer_parked()
        return replica.log.log_end_offset

    def _wait_for_replicas(
        self, client: int, request: ProduceRequest, replica: Replica, offset: int
    ) -> None:
        waiting = _Waiting(
            request,
            client,
            offset + 1,
            replica.leader_epoch,
            offset,
            self.world.after(
                PRODUCE_TIMEOUT_MS, lambda: self._time_out(replica.topic_partition, request)
            ),
        )
        self._waiting.setdefault(replica.topic_partition, []).append(waiting)
        self._settle_waiting(replica)

    def _time_out(self, tp: TopicPartition, request: ProduceRequest) -> None:
        for item in list(self._waiting.get(tp, ())):
            if item.request is request:
                self._waiting[tp].remove(item)
                self.send(
                    item.client, ProduceAnswer(request.request_id, ErrorCode.request_timed_out)
                )

    def _settle_waiting(self, replica: Replica) -> None:
        waiting = self._waiting.get(replica.topic_partition)
        if not waiting:
            return
        for item in list(waiting):
            outcome = replica.core.acks_all_outcome(
                item.end_offset,
                item.leader_epoch,
                replica.log.high_watermark,
                self._min_insync(replica),
            )
            if outcome is False:
                continue
            waiting.remove(item)
            item.timer.cancel()
            if outcome is True:
                self._acknowledged(replica, item.request, item.leader_epoch, item.offset)
            code = ErrorCode.none if outcome is True else outcome.code
            self.send(item.client, ProduceAnswer(item.request.request_id, code, item.offset))

    def _acknowledged(
        self, replica: Replica, request: ProduceRequest, leader_epoch: int, offset: int
    ) -> None:
        if self.monitor is not None:
            self.monitor.acknowledged(
                replica.topic_partition,
                self.node_id,
                leader_epoch,
                offset,
                request.producer_id,
                request.sequence if request.control is None else -1,
                request.producer_epoch,
            )

    def _min_insync(self, replica: Replica) -> int:
        """The topic's min.insync.replicas as the last image naming it said (images may
        arrive out of order, an older one without the topic after a newer one)."""
        return self._min_insync_of[replica.topic_partition.topic]

    def _advance(self, replica: Replica) -> None:
        log = replica.log
        if "hw-from-leader-only" in self.inject:
            high_watermark: int | None = log.log_end_offset if replica.core.is_leader else None
        else:
            high_watermark = replica.core.high_watermark_to_set(
                log.log_end_offset, log.high_watermark, self._min_insync(replica)
            )
        if high_watermark is not None:
            log.update_high_watermark(high_watermark)
            if self.monitor is not None:
                core = replica.core
                self.monitor.leader_high_watermark(
                    replica.topic_partition, self.node_id, core.leader_epoch, core.maximal_isr, log
                )
            self._settle_waiting(replica)
            for listener in self.listeners:
                listener.high_watermark_moved(replica)

    # ── leader: follower fetches and ISR changes ───────────────────────────────────

    def _epochs(self, follower: int, request: EpochRequest) -> None:
        answers = []
        for ask in request.asks:
            replica = self.replicas.get(ask.topic_partition)
            try:
                if replica is None:
                    raise errors.NotLeaderOrFollower("not a replica here")
                replica.core.check_leader(ask.current_leader_epoch)
            except KafkaError as e:
                answers.append(fc.EpochAnswer(ask.topic_partition, e.code, -1, -1))
                continue
            epoch, end = replica.log.end_offset_for_epoch(ask.leader_epoch)
            answers.append(fc.EpochAnswer(ask.topic_partition, ErrorCode.none, epoch, end))
        self.send(follower, EpochReply(request.request_id, tuple(answers)))

    def _fetch(self, follower: int, request: FetchRequest, *, parked: bool = False) -> None:
        results: list[fc.FetchedPartition] = []
        news = False
        for ask in request.asks:
            replica = self.replicas.get(ask.topic_partition)
            try:
                if replica is None:
                    raise errors.NotLeaderOrFollower("not a replica here")
                core = replica.core
                core.check_leader(ask.current_leader_epoch)
                log = replica.log
                if ask.last_fetched_epoch >= 0:
                    epoch, end = log.end_offset_for_epoch(ask.last_fetched_epoch)
                    if epoch < ask.last_fetched_epoch or end < ask.fetch_offset:
                        results.append(
                            fc.FetchedPartition(
                                ask.topic_partition, 0, log.high_watermark, 0, None, (epoch, end)
                            )
                        )
                        news = True
                        continue
                if ask.fetch_offset > log.log_end_offset:
                    raise errors.OffsetOutOfRange(f"{ask.fetch_offset} > {log.log_end_offset}")
                core.record_follower_fetch(
                    follower, ask.fetch_offset, log.log_end_offset, self.world.now_ms
                )
                if self.monitor is not None:
                    self.monitor.follower_fetched(
                        ask.topic_partition,
                        self.node_id,
                        core.leader_epoch,
                        follower,
                        ask.fetch_offset,
                    )
                self._advance(replica)
                isr = core.join_proposal(follower, ask.fetch_offset, log.high_watermark)
                if isr is not None:
                    self._write_isr(replica, isr)
            except KafkaError as e:
                results.append(fc.FetchedPartition(ask.topic_partition, e.code, -1, 0, None))
                news = True
                continue
            records = log.read(ask.fetch_offset, RECORDS_PER_FETCH_MAX)
            news = news or bool(records)
            results.append(
                fc.FetchedPartition(
                    ask.topic_partition,
                    ErrorCode.none,
                    log.high_watermark,
                    0,
                    encode_records(records),
                )
            )
        if news or parked:
            self.send(follower, FetchReply(request.request_id, tuple(results)))
            return
        # Nothing to answer: wait for an append, at most replica.fetch.wait.max.ms.
        timer = self.world.after(
            self.config.replica_fetch_wait_max_ms, lambda: self._unpark(follower, request)
        )
        self._parked.append((follower, request, timer))

    def _unpark(self, follower: int, request: FetchRequest) -> None:
        for item in list(self._parked):
            if item[1] is request:
                self._parked.remove(item)
                item[2].cancel()
                self._fetch(follower, request, parked=True)

    def _answer_parked(self) -> None:
        for follower, request, _timer in list(self._parked):
            self._unpark(follower, request)

    def _write_isr(self, replica: Replica, isr: tuple[int, ...]) -> None:
        """The leader asks the controller named in its image for the ISR change
        (AlterPartition, as ``broker.replication.isr`` does)."""
        state = replica.core.state
        tp = replica.topic_partition
        image = self.image
        topic = None if image is None else image.topics.get(tp.topic)
        if image is None or topic is None:
            if replica.core.isr_change_failed(state.version):
                self._advance(replica)
            return
        members = tuple(
            IsrMember(
                r, b.epoch if (b := image.brokers.get(r)) is not None else UNCHECKED_BROKER_EPOCH
            )
            for r in isr
        )
        proposal = IsrProposal(
            topic.topic_id, tp.partition, state.leader_epoch, members, state.version
        )
        self._isr_request_ids += 1
        request_id = self._isr_request_ids
        timer = self.world.after(REQUEST_TIMEOUT_MS, lambda: self._isr_unanswered(request_id))
        self._isr_asks[request_id] = (replica, isr, state.version, timer)
        ask = AlterPartitionAsk(
            request_id, AlterPartitionRequest(self.node_id, self.registered_at, (proposal,))
        )
        controller = image.controller
        if controller is None:
            self._isr_unanswered(request_id)
        elif controller.node_id == self.node_id:
            self.world.after(0, lambda: self._alter_partition_asked(self.node_id, ask))
        else:
            self.send(controller.node_id, ask)

    def _isr_unanswered(self, request_id: int) -> None:
        """No controller, or no answer in time: ask again after a backoff."""
        entry = self._isr_asks.pop(request_id, None)
        if entry is None or not self.up:
            return
        replica, isr, from_version, timer = entry
        timer.cancel()
        self.world.after(ISR_RETRY_BACKOFF_MS, lambda: self._retry_isr(replica, isr, from_version))

    def _retry_isr(self, replica: Replica, isr: tuple[int, ...], from_version: int) -> None:
        core = replica.core
        if (
            self.up
            and self.replicas.get(replica.topic_partition) is replica
            and core.is_leader
            and core.pending_isr == isr
            and core.pending_from_version == from_version
        ):
            self._write_isr(replica, isr)

    def _isr_answered(self, request_id: int, response: AlterPartitionResponse) -> None:
        entry = self._isr_asks.pop(request_id, None)
        if entry is None or not self.up:
            return
        replica, _isr, from_version, timer = entry
        timer.cancel()
        outcome = response.outcomes[0] if response.outcomes else None
        code = response.error_code if outcome is None else outcome.error_code
        if code == ErrorCode.not_controller:
            self._isr_asks[request_id] = entry
            self._isr_unanswered(request_id)
            return
        if self.replicas.get(replica.topic_partition) is not replica:
            return
        if outcome is not None and outcome.state is not None and code == ErrorCode.none:
            replica.core.update_state(outcome.state, self.world.now_ms)
        elif not replica.core.isr_change_failed(from_version):
            return
        self._advance(replica)

    def _alter_partition_asked(self, sender: int, ask: AlterPartitionAsk) -> None:
        """As controller (or not: the core answers NOT_CONTROLLER), a leader's request."""
        if not self.up:
            return
        if self.image is None:
            response = AlterPartitionResponse(ErrorCode.not_controller)
            self._alter_answer(sender, ask.request_id, response)
            return
        self._isr_request_ids += 1
        core_request_id = self._isr_request_ids
        self._alter_asks[core_request_id] = (sender, ask.request_id)
        self._controller_step(
            self.controller.on_alter_partition(
                core_request_id, ask.request, self.image, self.world.now_ms
            )
        )

    def _alter_answer(self, sender: int, request_id: int, response: AlterPartitionResponse) -> None:
        if sender == self.node_id:
            self.world.after(0, lambda: self._isr_answered(request_id, response))
        else:
            self.send(sender, AlterPartitionReply(request_id, response))

    def _check_lag(self) -> None:
        if not self.up:
            return
        lag = self.config.replica_lag_time_max_ms
        for replica in self.replicas.values():
            lagging = replica.core.lagging_followers(lag, self.world.now_ms)
            if lagging:
                isr = replica.core.shrink_proposal(lagging)
                if isr is not None:
                    self._write_isr(replica, isr)
        self._lag_timer = self.world.after(lag // 2, self._check_lag)

    # ── follower ───────────────────────────────────────────────────────────────────

    def _follow(self, replica: Replica, leader: int) -> None:
        for other, fetcher in self.fetchers.items():
            if other != leader:
                fetcher.core.unfollow(replica.topic_partition)
        found = self.fetchers.get(leader)
        fetcher = (
            found if found is not None else self.fetchers.setdefault(leader, _Fetcher(self, leader))
        )
        if fetcher.core.follow(replica.topic_partition, replica):
            fetcher.wake()

    def _unfollow(self, tp: TopicPartition) -> None:
        for fetcher in self.fetchers.values():
            fetcher.core.unfollow(tp)

    def carry_out(self, command: fc.FollowerCommand) -> bool:
        """A follower command on this broker's logs; False when the log refuses it."""
        replica = self.replicas.get(command.topic_partition)
        if replica is None:
            return True
        log = replica.log
        if isinstance(command, fc.TruncateTo):
            if "skip-truncation" not in self.inject:
                log.truncate_to(command.offset)
        elif isinstance(command, fc.StartAt):
            log.truncate_to(0)
        else:
            records = decode_records(command.records)
            if records and records[0].epoch < log.latest_epoch:
                return False
            log.append(records)
            log.update_high_watermark(command.leader_high_watermark)
            if self.monitor is not None:
                self.monitor.follower_high_watermark(command.topic_partition, self.node_id, log)
        return True

    # ── controller ─────────────────────────────────────────────────────────────────

    def _controller_step(self, commands: list[cc.ControllerCommand]) -> None:
        while commands:
            command = commands.pop(0)
            now = self.world.now_ms
            if isinstance(command, cc.AnswerAlterPartition):
                sender, request_id = self._alter_asks.pop(command.request_id)
                self._alter_answer(sender, request_id, command.response)
                continue
            assert not isinstance(command, cc.AnswerDecisions), "no administrator here"
            if not self._reaches_store(self.node_id):
                if isinstance(command, cc.ElectController):
                    commands += self.controller.on_election_failed("store unreachable", now)
                else:
                    failed = cc.StoreFailed(command.write_id, "store unreachable")
                    commands += self.controller.on_write_result(failed, now)
                continue
            if isinstance(command, cc.ElectController):
                epoch = self.store.elect_controller(command.node_id)
                self._publish()
                commands += self.controller.on_elected(epoch, self.store.image(), now)
                continue
            try:
                states = self.store.update_partitions(command.changes, command.epoch)
                result: cc.WriteResult = cc.Written(command.write_id, tuple(states))
            except StaleVersion as e:
                result = cc.Lost(command.write_id, str(e))
            except ControllerFenced as e:
                result = cc.Fenced(command.write_id, str(e))
            self._publish()
            commands += self.controller.on_write_result(result, now)
        if self._controller_timer is not None:
            self._controller_timer.cancel()
        wake = self.controller.next_wake_ms()
        if wake is not None:
            self._controller_timer = self.world.at(wake, self._controller_tick)

    def _controller_tick(self) -> None:
        if self.up and self.image is not None:
            # What this broker last saw of the store (nothing newer while cut off).
            self._controller_step(self.controller.on_tick(self.image, self.world.now_ms))

    # ── the network ────────────────────────────────────────────────────────────────

    def send(self, to: int, message: Any) -> None:
        self.network.send(self.node_id, to, message)

    def next_request_id(self) -> int:
        self._requests += 1
        return self._requests

    def _receive(self, sender: int, message: Any) -> None:
        if not self.up or self.world.hold(lambda: self._receive(sender, message)):
            return
        if isinstance(message, ProduceRequest):
            # The request handler blocks on the append: on a slow disk the produce is
            # done (and its dedup decided) when the disk gets to it.
            self.write_to_disk(lambda: self._produce(sender, message))
        elif isinstance(message, FetchRequest):
            self._fetch(sender, message)
        elif isinstance(message, EpochRequest):
            self._epochs(sender, message)
        elif isinstance(message, AlterPartitionAsk):
            self._alter_partition_asked(sender, message)
        elif isinstance(message, AlterPartitionReply):
            self._isr_answered(message.request_id, message.response)
        elif isinstance(message, EpochReply | FetchReply):
            fetcher = self.fetchers.get(sender)
            if fetcher is not None:
                fetcher.answered(message)
        else:
            handler = self.handlers.get(type(message))
            if handler is not None:
                handler(sender, message)


def _producer_state(log: SimLog) -> dict[int, list[tuple[int, int]]]:
    """What a new leader knows of each producer: its last five sequences in the log (of
    its latest epoch: a new epoch, or a transaction's marker, starts them afresh)."""
    producers: dict[int, list[tuple[int, int]]] = {}
    epochs: dict[int, int] = {}
    for offset, record in enumerate(log.records):
        producer_id = record.producer_id
        if record.control is not None or epochs.get(producer_id) != record.producer_epoch:
            producers.pop(producer_id, None)
            epochs[producer_id] = record.producer_epoch
        if record.control is not None or producer_id < 0:
            continue
        done = producers.setdefault(producer_id, [])
        done.append((record.sequence, offset))
        del done[:-5]
    return producers


class _Fetcher:
    """One fetcher of a broker: the partitions it follows from one leader, a round at a
    time (OffsetForLeaderEpoch for those truncating, then a Fetch)."""

    def __init__(self, broker: SimBroker, leader: int) -> None:
        self.broker = broker
        self.leader = leader
        self.core: fc.FollowerCore[Replica] = fc.FollowerCore(
            leader, broker.config, fc.ReplicationThrottle(), lambda _replica: 0
        )
        self._round: fc.Round[Replica] | None = None
        self._asked: tuple[int, Any] | None = None
        self._timer: Timer | None = None
        self._stopped = False
        self._writing = False
        """The fetcher waits for its last append to be written (a slow disk)."""
        self.wake()

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()

    def wake(self) -> None:
        if self._asked is None and not self._stopped and not self._writing:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self.broker.world.after(0, self._next_round)

    def _written(self) -> None:
        self._writing = False
        self.wake()

    def _next_round(self) -> None:
        if self._stopped or not self.broker.up or len(self.core) == 0:
            return
        now = self.broker.world.now_ms
        began = self.core.begin_round(now)
        if isinstance(began, fc.WaitUntil):
            self._timer = self.broker.world.at(began.at_ms, self._next_round)
            return
        self._round = began
        if began.epoch_query is not None:
            self._ask(
                EpochRequest(self.broker.next_request_id(), began.epoch_query.partitions),
                began.epoch_query,
            )
        else:
            self._fetch()

    def _fetch(self) -> None:
        assert self._round is not None
        query = self.core.fetch_query(self._round)
        if query is None:
            self.wake()
            return
        if isinstance(query, fc.WaitUntil):
            self._timer = self.broker.world.at(query.at_ms, self._next_round)
            return
        asks = tuple(
            FetchAsk(
                f.topic_partition,
                f.replica.log.log_end_offset,
                f.replica.log.latest_epoch,
                f.leader_epoch,
            )
            for f in query.batch
        )
        self._ask(FetchRequest(self.broker.next_request_id(), self.broker.node_id, asks), query)

    def _ask(self, request: Any, query: Any) -> None:
        self._asked = (request.request_id, query)
        self.broker.send(self.leader, request)
        request_id = request.request_id
        self._timer = self.broker.world.after(
            REQUEST_TIMEOUT_MS, lambda: self._timed_out(request_id)
        )

    def _timed_out(self, request_id: int) -> None:
        if self._asked is None or self._asked[0] != request_id:
            return
        self._asked = None
        self.core.on_fetch_failed()
        self._timer = self.broker.world.after(self.core.reconnect_backoff_ms, self._next_round)

    def answered(self, reply: EpochReply | FetchReply) -> None:
        if self._asked is None or self._asked[0] != reply.request_id or self._stopped:
            return
        _, query = self._asked
        self._asked = None
        if self._timer is not None:
            self._timer.cancel()
        now = self.broker.world.now_ms
        if isinstance(reply, EpochReply):
            for command in self.core.on_epoch_answers(query, reply.answers, now):
                self.broker.carry_out(command)
            self._fetch()
            return
        appended = False
        for command in self.core.on_fetch_answer(query, ErrorCode.none, 0, reply.partitions, now):
            if not self.broker.carry_out(command):
                self.core.on_append_failed(command.topic_partition, now)
            elif isinstance(command, fc.AppendFetched) and len(command.records):
                appended = True
        if appended:
            self._writing = True
            self.broker.write_to_disk(self._written)
        else:
            self.wake()
