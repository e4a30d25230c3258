"""A whole simulated cluster, a workload and faults, run from one seed.

:func:`run` builds a world from the seed, a network, a metadata store and brokers; creates
one replicated topic (and ``__transaction_state``); lets idempotent acks=all producers
send unique values and transactional producers commit or abort transactions
(:mod:`sluice.sim.transactions`), while consumers poll (:mod:`sluice.sim.consumers`) and
faults strike (crashes with or without the unsynced tail, network partitions); then
heals everything, lets replication catch up, reads every replica's log and checks the
history (:mod:`sluice.sim.history`). Everything random comes from the world's streams, so a seed
replays exactly."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from sluice.cluster.image import MetadataImage
from sluice.common.config import BrokerConfig
from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.sim import consumers, history, transactions
from sluice.sim.broker import ProduceAnswer, ProduceRequest, SimBroker
from sluice.sim.disk import SimLog
from sluice.sim.history import CheckResult
from sluice.sim.invariants import Monitor, Violation
from sluice.sim.network import Faults, Network
from sluice.sim.store import SimMetadataStore
from sluice.sim.world import Timer, World
from sluice.txn.config import TransactionConfig

SESSION_TIMEOUT_MS = 3_000
IMAGE_DELAY_MS = (1, 20)
"""How long a new metadata image takes to reach each broker."""
CLIENT_NODE = 100
"""The first node id of the clients on the network (brokers are 0..n-1)."""
TRANSACTIONAL_CLIENT_NODE = 200
"""The first node id of the transactional producers."""
CONSUMER_NODE = 300
"""The first node id of the consumers."""
SEND_RETRIES_MAX = 20
RETRY_BACKOFF_MS = 100
REQUEST_TIMEOUT_MS = 3_000
PAUSE_MS = (200, 6_000)
"""How long a pause lasts (inclusive): the session timeout is in between."""
SLOW_DISK_MS = (1_000, 8_000)
"""How long a disk stays slow (inclusive)."""
SLOW_WRITE_MS = (20, 300)
"""How long one log write takes on a slow disk (inclusive)."""


@dataclass
class Settings:
    brokers: int = 3
    partitions: int = 2
    min_insync: int = 2
    producers: int = 2
    sends_per_producer: int = 500
    """Spread evenly over the faults' time (``duration_ms`` after a start of 2 s)."""
    faults: int = 4
    """Crashes (a third of them losing the unsynced tail) and isolations of a broker from
    the others and the store, at random times."""
    pauses: int = 2
    """Pauses of a broker (SIGSTOP, a long collection) at random times, each of
    ``PAUSE_MS``: about half of them outlast its session."""
    slow_disks: int = 2
    """Spells of ``SLOW_DISK_MS`` during which each log write of one broker takes
    ``SLOW_WRITE_MS``."""
    loss_rate: float = 0.005
    """Messages the network loses (their senders time out and retry)."""
    delay_rate: float = 0.01
    """Messages held up (with the messages behind them on their link)."""
    reorder_rate: float = 0.005
    """Messages late enough that later ones overtake them."""
    duplicate_rate: float = 0.005
    """Messages that arrive twice, the copy late and out of order."""
    writeback_interval_ms: int = 5_000
    """How often a broker's logs are written back to disk (the page cache's write-back;
    Kafka does not fsync appends): what a machine crash keeps. None while its disk is
    slow."""
    duration_ms: int = 30_000
    settle_ms: int = 30_000
    transactional_producers: int = 2
    """Each runs transactions one after another (some aborted on purpose) until the
    faults' time is over."""
    read_committed_consumers: int = 2
    read_uncommitted_consumers: int = 1


@dataclass
class Run:
    seed: int
    history: history.History
    result: CheckResult
    events: int
    digest: str
    faults: list[str] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    """The first invariants broken while it ran (:mod:`sluice.sim.invariants`)."""
    violation_count: int = 0

    @property
    def valid(self) -> bool:
        """No anomaly in the history, and no invariant broken on the way."""
        return self.result.valid and self.violation_count == 0

    def summary(self) -> str:
        lines = [self.result.summary()]
        if self.violation_count:
            lines.append(f"invariants broken {self.violation_count} times; the first:")
            lines.extend(f"  seed {self.seed} {violation}" for violation in self.violations)
        return "\n".join(lines)


def _duplicable(message: object) -> bool:
    """Every message but a transaction marker may arrive a second time, late. A marker
    may not: with transaction version 2 a producer's next transaction writes at the
    epoch its last one's markers carry, so a late second COMMIT would end that next
    transaction where it arrives. TCP delivers no such copy; in Kafka only a
    WriteTxnMarkers request read from a connection that timed out, and handled after
    its retry and after the producer's next records, could (the coordinator does not
    let the next transaction start before every marker is acknowledged)."""
    return not (isinstance(message, ProduceRequest) and message.control is not None)


class SimCluster:
    def __init__(self, seed: int, settings: Settings, inject: frozenset[str] = frozenset()) -> None:
        self.world = World(seed)
        self.settings = settings
        self.network = Network(
            self.world,
            Faults(
                latency_ms=(1, 5),
                loss_rate=settings.loss_rate,
                duplicate_rate=settings.duplicate_rate,
                delay_rate=settings.delay_rate,
                reorder_rate=settings.reorder_rate,
                duplicable=_duplicable,
            ),
        )
        self.store = SimMetadataStore()
        self.trace: list[str] = []
        self.monitor = Monitor(lambda: self.world.now_ms, self.replica_logs)
        self.brokers = [
            SimBroker(
                node,
                self.world,
                self.network,
                self.store,
                self.publish,
                BrokerConfig(node_id=node, replica_lag_time_max_ms=2_000),
                inject,
                self.reaches_store,
                self.monitor,
            )
            for node in range(settings.brokers)
        ]
        self._expiry: dict[int, Timer] = {}
        self.cut_from_store: set[int] = set()
        self._waiting_to_register: set[int] = set()
        self._image_arrival_ms: dict[int, int] = {}
        """When the last image published to each broker reaches it."""
        self._random = self.world.random("cluster")
        writeback = self.world.random("writeback")
        for node in range(settings.brokers):
            first_ms = writeback.randint(1, settings.writeback_interval_ms)
            self.world.at(first_ms, functools.partial(self.write_back, node))

    def replica_logs(self, tp: TopicPartition) -> dict[int, SimLog]:
        """Every broker's log of ``tp`` (up or down), by broker."""
        return {
            broker.node_id: found
            for broker in self.brokers
            if (found := broker.logs.get(tp)) is not None
        }

    def reaches_store(self, node: int) -> bool:
        return node not in self.cut_from_store

    def publish(self) -> None:
        """The store changed: each running broker that reaches it sees the new image
        after a delay, never before an image published earlier (a ZooKeeper session's
        notifications keep their order; a broker's view never goes back)."""
        image = self.store.image()
        for broker in self.brokers:
            if broker.up and broker.node_id not in self.cut_from_store:
                low, high = IMAGE_DELAY_MS
                node = broker.node_id
                arrival = self.world.now_ms + self._random.randint(low, high)
                arrival = max(arrival, self._image_arrival_ms.get(node, 0))
                self._image_arrival_ms[node] = arrival
                self.world.at(arrival, _applier(broker, image))

    def crash(self, node: int, *, lose_unflushed: bool) -> None:
        self.trace.append(f"{self.world.now_ms} crash {node} lose={lose_unflushed}")
        self.brokers[node].crash(lose_unflushed=lose_unflushed)
        self._end_session_later(node)

    def isolate(self, node: int, for_ms: int) -> None:
        """Cut ``node`` off from the other brokers and the store (not from the clients:
        a leader left alone this way still takes produces, a zombie, until it hears it
        was replaced). Its session ends after the timeout; when the cut heals it
        registers anew and sees the current image."""
        self.trace.append(f"{self.world.now_ms} isolate {node} for {for_ms}")
        others = {b.node_id for b in self.brokers} - {node}
        self.network.partition({node}, others)
        self.cut_from_store.add(node)
        self._end_session_later(node)
        self.world.after(for_ms, lambda: self._heal(node, others))

    def _heal(self, node: int, others: set[int]) -> None:
        self.trace.append(f"{self.world.now_ms} heal {node}")
        for other in others:
            self.network.faults.cut.discard((node, other))
            self.network.faults.cut.discard((other, node))
        self.cut_from_store.discard(node)
        self._start_if_waiting(node)
        self._heartbeats_again(node)

    def pause(self, node: int, for_ms: int) -> None:
        """Stop ``node`` for ``for_ms`` (a SIGSTOP, a long collection): it keeps its
        connections but answers nothing, and its session ends after the timeout. It
        resumes with the view it had (a leader still thinks it leads), then learns
        that its session ended and registers anew."""
        self.trace.append(f"{self.world.now_ms} pause {node} for {for_ms}")
        self.brokers[node].pause()
        self._end_session_later(node)
        self.world.after(for_ms, lambda: self._resume(node))

    def _resume(self, node: int) -> None:
        broker = self.brokers[node]
        if not broker.up or not broker.paused:
            return  # it crashed meanwhile
        self.trace.append(f"{self.world.now_ms} resume {node}")
        broker.resume()
        self._heartbeats_again(node)

    def slow_disk(self, node: int, write_ms: int, for_ms: int) -> None:
        """For ``for_ms``, each log write of ``node`` takes ``write_ms`` (one at a time)
        and nothing it wrote becomes durable."""
        self.trace.append(
            f"{self.world.now_ms} slow disk {node}: {write_ms} ms a write for {for_ms}"
        )
        self.brokers[node].slow_disk_ms = write_ms
        self.world.after(for_ms, lambda: self._disk_recovers(node))

    def _disk_recovers(self, node: int) -> None:
        self.trace.append(f"{self.world.now_ms} disk {node} recovers")
        self.brokers[node].disk_recovers()

    def write_back(self, node: int) -> None:
        """The page cache of ``node``'s machine is written back: its logs are durable up
        to their ends (not while its disk is slow), crashed process or not."""
        broker = self.brokers[node]
        if broker.slow_disk_ms <= 0:
            for replica_log in broker.logs.values():
                replica_log.flush()
        self.world.after(self.settings.writeback_interval_ms, lambda: self.write_back(node))

    def _end_session_later(self, node: int) -> None:
        """``node`` sends no heartbeats: its session ends after the timeout (from the
        first silence, when one is already counting)."""
        if node not in self._expiry:
            self._expiry[node] = self.world.after(SESSION_TIMEOUT_MS, lambda: self._expire(node))

    def _heartbeats_again(self, node: int) -> None:
        """``node`` may talk to the store again: unless it is still down, paused or cut
        off, its session lives on; if it ended meanwhile, the broker registers anew and
        leads no state of before."""
        broker = self.brokers[node]
        if not broker.up or broker.paused or node in self.cut_from_store:
            return
        timer = self._expiry.pop(node, None)
        if timer is not None:
            timer.cancel()
        if node not in self.store.brokers:
            # It never stopped: its logs are whole, its registration says so.
            broker.reregistered(self.store.register(node, logs_intact=True).epoch)
        self.publish()

    def _expire(self, node: int) -> None:
        self._expiry.pop(node, None)
        self.store.expire(node)
        self.publish()
        self._start_if_waiting(node)

    def _start_if_waiting(self, node: int) -> None:
        if (
            node in self._waiting_to_register
            and node not in self.store.brokers
            and node not in self.cut_from_store
        ):
            self._waiting_to_register.discard(node)
            self.brokers[node].start()

    def restart_if_down(self, node: int) -> None:
        if not self.brokers[node].up and node not in self._waiting_to_register:
            self.restart(node)

    def restart(self, node: int) -> None:
        """Start ``node`` again. As with the ZooKeeper store, it registers only once its
        crashed run's session has ended (until then the store still holds it, leading
        what it led): it waits for the expiry."""
        self.trace.append(f"{self.world.now_ms} restart {node}")
        if node in self.store.brokers or node in self.cut_from_store:
            self._waiting_to_register.add(node)
            return
        self.brokers[node].start()


_Outcome = tuple[history.Outcome, str, int | None]
"""A send's outcome, value and acknowledged offset."""


@dataclass
class _Pending:
    tp: TopicPartition
    index: int
    """The send's place among this producer's sends to ``tp`` (reports follow it)."""
    producer_id: int
    sequence: int
    value: str
    tries: int
    timer: Timer | None = None
    request_id: int = 0
    """The attempt in flight (0: none, waiting to retry)."""


class _Producer:
    """An idempotent acks=all producer: each value is sent once, with its sequence, and
    retried (same producer id and sequence) to whoever leads until it is answered. One it
    gives up on leaves a gap no later sequence can pass, so the producer starts that
    partition afresh under a new producer id, giving up on the sends still waiting there
    (their outcome is unknown: they may be in the log)."""

    def __init__(self, cluster: SimCluster, index: int, log: history.History) -> None:
        self.cluster = cluster
        self.node = CLIENT_NODE + index
        self.history = log
        self._base_id = 1_000 * (index + 1)
        self._generation: dict[TopicPartition, int] = {}
        self._sequences: dict[TopicPartition, int] = {}
        self._sent: dict[TopicPartition, int] = {}
        self.pending: dict[tuple[TopicPartition, int], _Pending] = {}
        """Sends not yet answered, by partition and index (in flight or waiting to retry)."""
        self._requests = 0
        self._outcomes: dict[TopicPartition, dict[int, _Outcome]] = {}
        self._reported: dict[TopicPartition, int] = {}
        cluster.network.attach(self.node, self._receive)

    def _report(self, pending: _Pending, outcome: history.Outcome, offset: int | None) -> None:
        """Record sends as a real producer reports them: per partition, in the order they
        were sent (a retried send holds back the reports of those after it)."""
        tp = pending.tp
        done = self._outcomes.setdefault(tp, {})
        done[pending.index] = (outcome, pending.value, offset)
        next_index = self._reported.get(tp, 0)
        while next_index in done:
            outcome, value, offset = done.pop(next_index)
            self.history.send(self.node, outcome, _partition(tp), value, offset)
            next_index += 1
        self._reported[tp] = next_index

    def sender(self, tp: TopicPartition, value: str) -> Callable[[], None]:
        return lambda: self.send(tp, value)

    def send(self, tp: TopicPartition, value: str) -> None:
        index = self._sent.get(tp, 0)
        self._sent[tp] = index + 1
        sequence = self._sequences.get(tp, 0)
        self._sequences[tp] = sequence + 1
        producer_id = self._base_id + self._generation.get(tp, 0)
        self._attempt(_Pending(tp, index, producer_id, sequence, value, 0))

    def _attempt(self, pending: _Pending) -> None:
        key = (pending.tp, pending.index)
        if self.pending.get(key) is not pending and pending.tries > 0:
            return  # given up meanwhile (its partition started afresh)
        self.pending[key] = pending
        image = self.cluster.store.image()
        tp = pending.tp
        leader = image.topics[tp.topic].partitions[tp.partition].leader
        self._requests += 1
        request_id = pending.request_id = self._requests
        pending.timer = self.cluster.world.after(
            REQUEST_TIMEOUT_MS, lambda: self._failed(pending, request_id)
        )
        if leader >= 0:
            request = ProduceRequest(
                request_id, tp, pending.producer_id, pending.sequence, pending.value
            )
            self.cluster.network.send(self.node, leader, request)

    def _failed(self, pending: _Pending, request_id: int) -> None:
        if (
            pending.request_id != request_id
            or self.pending.get((pending.tp, pending.index)) is not pending
        ):
            return  # an older attempt's answer or timeout
        pending.request_id = 0
        if pending.timer is not None:
            pending.timer.cancel()
        if pending.tries < SEND_RETRIES_MAX:
            pending.tries += 1
            self.cluster.world.after(RETRY_BACKOFF_MS, lambda: self._attempt(pending))
            return
        self._forget(pending, "info", None)
        self._start_afresh(pending.tp, pending.producer_id)

    def _forget(self, pending: _Pending, outcome: history.Outcome, offset: int | None) -> None:
        del self.pending[(pending.tp, pending.index)]
        if pending.timer is not None:
            pending.timer.cancel()
        self._report(pending, outcome, offset)

    def _start_afresh(self, tp: TopicPartition, producer_id: int) -> None:
        if self._base_id + self._generation.get(tp, 0) != producer_id:
            return  # already started afresh
        self._generation[tp] = self._generation.get(tp, 0) + 1
        self._sequences[tp] = 0
        for pending in list(self.pending.values()):
            if pending.tp == tp and pending.producer_id == producer_id:
                self._forget(pending, "info", None)

    def give_up(self) -> None:
        """The run ends: whatever is still waiting has an unknown outcome."""
        for pending in list(self.pending.values()):
            self._forget(pending, "info", None)

    def _receive(self, _sender: int, answer: ProduceAnswer) -> None:
        pending = self._in_flight(answer.request_id)
        if pending is None:
            return
        if answer.error_code != ErrorCode.none:
            self._failed(pending, answer.request_id)
            return
        self._forget(pending, "ok", answer.offset)

    def _in_flight(self, request_id: int) -> _Pending | None:
        for pending in self.pending.values():
            if pending.request_id == request_id:
                return pending
        return None


def _applier(broker: SimBroker, image: MetadataImage) -> Callable[[], None]:
    def apply() -> None:
        broker.apply(image)  # a broker down meanwhile ignores it

    return apply


def _partition(tp: TopicPartition) -> history.TopicPartition:
    return history.TopicPartition(tp.topic, tp.partition)


def _schedule_faults(cluster: SimCluster) -> None:
    """Strike at random times of the run: crashes, isolations, pauses, slow disks (the
    network's faults strike message by message)."""
    settings, world = cluster.settings, cluster.world
    brokers = cluster.brokers
    faults = world.random("faults")
    for _ in range(settings.faults):
        at = faults.randint(2_000, settings.duration_ms)
        node = faults.randrange(settings.brokers)
        down_ms = faults.randint(500, 8_000)
        lose = faults.random() < 0.3
        isolate = faults.random() < 0.4

        def strike(
            node: int = node, lose: bool = lose, down_ms: int = down_ms, isolate: bool = isolate
        ) -> None:
            up = sum(b.up for b in brokers)
            if isolate and up == len(brokers) and not cluster.cut_from_store:
                cluster.isolate(node, down_ms)
                return
            if brokers[node].up and up > 1:
                # A machine crash (the unsynced tail lost) only while every other broker
                # runs: replication is what keeps acknowledged records, one copy at a time.
                cluster.crash(node, lose_unflushed=lose and up == len(brokers))
                world.after(down_ms, lambda: cluster.restart_if_down(node))

        world.at(at, strike)
    pauses = world.random("pauses")
    for _ in range(settings.pauses):
        at = pauses.randint(2_000, settings.duration_ms)
        node = pauses.randrange(settings.brokers)
        pause_ms = pauses.randint(*PAUSE_MS)

        def pause(node: int = node, pause_ms: int = pause_ms) -> None:
            if brokers[node].up and not brokers[node].paused:
                cluster.pause(node, pause_ms)

        world.at(at, pause)
    disks = world.random("disks")
    for _ in range(settings.slow_disks):
        at = disks.randint(2_000, settings.duration_ms)
        node = disks.randrange(settings.brokers)
        write_ms, for_ms = disks.randint(*SLOW_WRITE_MS), disks.randint(*SLOW_DISK_MS)

        def slow(node: int = node, write_ms: int = write_ms, for_ms: int = for_ms) -> None:
            if brokers[node].slow_disk_ms <= 0:
                cluster.slow_disk(node, write_ms, for_ms)

        world.at(at, slow)


def run(seed: int, settings: Settings | None = None, inject: frozenset[str] = frozenset()) -> Run:
    """One run from ``seed`` (with the deliberate defects ``inject`` names)."""
    settings = settings or Settings()
    cluster = SimCluster(seed, settings, inject)
    world = cluster.world
    log = history.History()
    for broker in cluster.brokers:
        broker.start()
    assignment = [
        tuple((p + r) % settings.brokers for r in range(min(3, settings.brokers)))
        for p in range(settings.partitions)
    ]
    configs = {"min.insync.replicas": str(settings.min_insync)}
    cluster.store.create_topic("t", assignment, configs)
    if settings.transactional_producers:
        # Led by the broker after the last data partition's leader, where there is one.
        state_leader = settings.partitions % settings.brokers
        state_replicas = tuple(
            (state_leader + r) % settings.brokers for r in range(min(3, settings.brokers))
        )
        cluster.store.create_topic(transactions.STATE_PARTITION.topic, [state_replicas], configs)
        transactions.host_coordinators(
            cluster.brokers,
            TransactionConfig(abort_check_interval_ms=transactions.ABORT_CHECK_INTERVAL_MS),
        )
    consumers.serve_consumers(cluster.brokers)
    cluster.publish()
    world.run_until(2_000)

    transactional = [
        transactions.TransactionalProducer(
            world,
            cluster.network,
            cluster.store,
            log,
            TRANSACTIONAL_CLIENT_NODE + i,
            "t",
            settings.partitions,
        )
        for i in range(settings.transactional_producers)
    ]
    readers = [
        consumers.Consumer(
            world,
            cluster.network,
            cluster.store,
            log,
            CONSUMER_NODE + i,
            "t",
            settings.partitions,
            read_committed=i < settings.read_committed_consumers,
        )
        for i in range(settings.read_committed_consumers + settings.read_uncommitted_consumers)
    ]
    for txn_producer in transactional:
        txn_producer.start()
    for reader in readers:
        reader.start()

    producers = [_Producer(cluster, i, log) for i in range(settings.producers)]
    workload = world.random("workload")
    interval_ms = (settings.duration_ms - 2_000) // settings.sends_per_producer
    for index in range(settings.sends_per_producer):
        for producer in producers:
            at = 2_000 + index * interval_ms + workload.randint(0, interval_ms)
            tp = TopicPartition("t", workload.randrange(settings.partitions))
            value = f"p{producer.node}-{index}"
            world.at(at, producer.sender(tp, value))

    _schedule_faults(cluster)
    world.run_until(settings.duration_ms)
    for txn_producer in transactional:
        txn_producer.stop()
    for broker in cluster.brokers:
        if not broker.up:
            cluster.restart(broker.node_id)
    world.run_until(settings.duration_ms + settings.settle_ms)
    for producer in producers:
        producer.give_up()
    for txn_producer in transactional:
        txn_producer.give_up()
    for reader in readers:
        reader.stop()
    stats = cluster.network.stats
    cluster.trace.append(
        f"network: {stats.sent} messages, {stats.lost} lost, {stats.delayed} delayed, "
        f"{stats.reordered} reordered, {stats.duplicated} duplicated"
    )

    image = cluster.store.image()
    for name, topic in image.topics.items():
        if name == transactions.STATE_PARTITION.topic:
            continue  # the coordinator's records: no values of the workload
        for index in topic.partitions:
            tp = TopicPartition(name, index)
            for broker in cluster.brokers:
                replica_log = broker.logs.get(tp)
                if replica_log is None:
                    continue
                log.final_read(
                    history.FinalRead(
                        _partition(tp),
                        broker.node_id,
                        tuple(
                            (offset, r.value)
                            for offset, r in enumerate(replica_log.records)
                            if r.control is None  # a marker's offset holds no value
                        ),
                        replica_log.high_watermark,
                        0,
                        replica_log.log_end_offset,
                    )
                )
    result = history.check(log)
    digest = hashlib.sha256(log.to_json().encode()).hexdigest()[:16]
    monitor = cluster.monitor
    return Run(
        seed,
        log,
        result,
        world.events_run,
        digest,
        faults=cluster.trace,
        violations=monitor.violations,
        violation_count=monitor.count,
    )
