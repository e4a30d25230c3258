"""Transactions in the simulation: the transaction coordinator on the brokers, and
transactional producers.

The coordinator is Sluice's own :class:`~sluice.txn.coordinator.TransactionCoordinator`,
the state machine ``sluice serve`` runs, driven here as the coordinator runtime drives it
(:mod:`sluice.coordinator.runtime`): its state lives where the real one's does, in a
replicated partition, ``__transaction_state-0`` (RF=3, ``min.insync.replicas`` as the
data topic). The broker leading that partition is the coordinator: when it starts
leading it replays the partition's records to its log end into a new coordinator (as
the real loader does), and when it stops leading or crashes the coordinator is dropped.
Each record the coordinator writes is appended by that leader and reported written once
the high watermark passes it (acks=all), in the order written; a write the leader
cannot make (no longer leading, too few replicas in sync) fails, and the coordinator
answers as it does for a failed write. Waiting requests of a coordinator that stops get
NOT_COORDINATOR. Keeping the state in the metadata store instead would have been
simpler, but would have hidden the failure modes of the real design: a coordinator
whose decision is not yet replicated, a new coordinator replaying a tail the old one had
not committed.

The coordinator's :class:`~sluice.txn.api.WriteMarkers` tasks are carried out by the
coordinating broker: a COMMIT or ABORT marker (a :class:`~sluice.sim.broker.ProduceRequest`
with ``control``, at the producer's epoch) to the leader of every partition of the
transaction, as this broker's image names it, answered once replicated (acks=all) and
retried until written; a partition that answers INVALID_PRODUCER_EPOCH saw a newer
epoch, and the marker is moot there (as ``broker.coordination.transactions`` treats it).

A :class:`TransactionalProducer` runs transactions one after another, as the Kafka
client's transactional producer does, using transaction version 2 (every EndTxn bumps
the epoch, and the markers carry it, so a late produce of a finished transaction is
fenced by the partition): InitProducerId; then, for each transaction, AddPartitionsToTxn
for the partitions it will write, its values sent one at a time (idempotent sequences
at its producer id and epoch, acks=all, retried to the current leader), and EndTxn,
committing or, by a seeded choice, aborting. A send it gives up on, or a fenced one,
aborts the transaction. Each send goes into the history as the other producers' do;
each transaction's end goes in as ``Transaction``: ``ok`` when a commit was answered,
``fail`` when an abort was, ``info`` when the end is unknown (fenced, or the run ended)."""

from __future__ import annotations

import dataclasses
import itertools
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.coordinator.api import Append, Effect, Reply, Task
from sluice.sim import history
from sluice.sim.broker import ProduceAnswer, ProduceRequest, Replica, SimBroker
from sluice.sim.network import Network
from sluice.sim.store import SimMetadataStore
from sluice.sim.world import Timer, World
from sluice.txn.api import (
    AddPartitionsRequest,
    AddPartitionsResult,
    EndTxnRequest,
    InitProducerIdRequest,
    ProducerIdAndEpoch,
    WriteMarkers,
)
from sluice.txn.config import TRANSACTION_STATE_TOPIC, TransactionConfig
from sluice.txn.coordinator import TransactionCoordinator

STATE_PARTITION = TopicPartition(TRANSACTION_STATE_TOPIC, 0)
PRODUCER_ID_BASE = 1_000_000
"""The first producer id the coordinators hand out (the idempotent producers of the
simulation use ids far below)."""
TRANSACTION_TIMEOUT_MS = 8_000
"""The producers' transaction.timeout.ms: an open transaction the coordinator does not
hear the end of within this is aborted, its producer fenced."""
ABORT_CHECK_INTERVAL_MS = 1_000
REQUEST_TIMEOUT_MS = 3_000
"""A client (or a marker writer) that hears nothing back for this long asks again."""
RETRY_BACKOFF_MS = 100
SEND_RETRIES_MAX = 20
"""Attempts of one transactional send before the producer aborts the transaction."""
VALUES_PER_TRANSACTION_MAX = 4
GAP_BETWEEN_TRANSACTIONS_MS = (20, 300)
COMMIT_PROBABILITY = 0.7
"""The others are aborted on purpose."""

Request = InitProducerIdRequest | AddPartitionsRequest | EndTxnRequest
Response = ProducerIdAndEpoch | AddPartitionsResult

_LOOK_UP_AGAIN = {
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.concurrent_transactions,
    ErrorCode.request_timed_out,
}
"""Errors a transactional client retries the same request on."""


@dataclass(frozen=True, slots=True)
class TxnCall:
    """A request to the transaction coordinator."""

    request_id: int
    request: Request


@dataclass(frozen=True, slots=True)
class TxnAnswer:
    request_id: int
    response: Response


def _refusal(request: Request, error: ErrorCode) -> Response:
    if isinstance(request, AddPartitionsRequest):
        return AddPartitionsResult({p: error for p in request.partitions})
    return ProducerIdAndEpoch(error)


def _error(response: Response) -> ErrorCode:
    if isinstance(response, AddPartitionsResult):
        codes = [code for code in response.errors.values() if code != ErrorCode.none]
        return codes[0] if codes else ErrorCode.none
    return response.error


def encode_state_record(key: bytes, value: bytes | None) -> str:
    return key.hex() + ":" + ("" if value is None else value.hex())


def decode_state_record(text: str) -> tuple[bytes, bytes | None]:
    key, _, value = text.partition(":")
    return bytes.fromhex(key), (bytes.fromhex(value) if value else None)


class ProducerIds:
    """The cluster's producer ids (the store's producer-id block): each handed out once."""

    def __init__(self, first: int = PRODUCER_ID_BASE) -> None:
        self._next = itertools.count(first)

    def __call__(self) -> int:
        return next(self._next)


# ── the coordinator ────────────────────────────────────────────────────────────────


@dataclass
class _MarkerTask:
    task_id: int
    work: WriteMarkers
    waiting: dict[TopicPartition, int]
    """Partitions whose marker is not written yet → the request id of its attempt (0:
    waiting to retry)."""
    timers: dict[TopicPartition, Timer]


class CoordinatorHost:
    """The transaction coordinator a broker runs while it leads ``__transaction_state-0``."""

    def __init__(
        self, broker: SimBroker, producer_ids: Callable[[], int], config: TransactionConfig
    ) -> None:
        self.broker = broker
        self.world = broker.world
        self._producer_ids = producer_ids
        self._config = config
        self.shard: TransactionCoordinator | None = None
        self._loaded_epoch = -1
        self._appends: deque[tuple[int, int | None]] = deque()
        """(append id, the log end it waits for the high watermark to reach, or None: it
        could not be written), in the order the coordinator asked."""
        self._waiting: dict[int, tuple[int, int]] = {}
        """Request token → (client, request id)."""
        self._tokens = itertools.count(1)
        self._timer: Timer | None = None
        self._tasks: dict[int, _MarkerTask] = {}
        self._markers: dict[int, tuple[int, TopicPartition]] = {}
        """Marker request id → (task id, partition)."""
        self._requests = itertools.count(1)
        broker.listeners.append(self)
        broker.handlers[TxnCall] = self._call
        broker.handlers[ProduceAnswer] = self._marker_answered

    # ── becoming and stopping being the coordinator ───────────────────────────────

    def replica_changed(self, replica: Replica) -> None:
        if replica.topic_partition != STATE_PARTITION:
            return
        leads = replica.core.is_leader
        if leads and (self.shard is None or self._loaded_epoch != replica.leader_epoch):
            self._unload(answer=True)
            self._load(replica)
        elif not leads and self.shard is not None:
            self._unload(answer=True)

    def high_watermark_moved(self, replica: Replica) -> None:
        if replica.topic_partition == STATE_PARTITION and self.shard is not None:
            self._run([])

    def crashed(self) -> None:
        self._unload(answer=False)

    def _load(self, replica: Replica) -> None:
        shard = TransactionCoordinator(self._config)
        for record in replica.log.records:
            if record.control is None:
                shard.replay(*decode_state_record(record.value))
        shard.load_completed(self.world.now_ms)
        self.shard = shard
        self._loaded_epoch = replica.leader_epoch
        self._run([])

    def _unload(self, *, answer: bool) -> None:
        self.shard = None
        self._loaded_epoch = -1
        self._appends.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for task in self._tasks.values():
            for timer in task.timers.values():
                timer.cancel()
        self._tasks.clear()
        self._markers.clear()
        waiting, self._waiting = self._waiting, {}
        if answer:
            for client, request_id in waiting.values():
                response = ProducerIdAndEpoch(ErrorCode.not_coordinator)
                self.broker.send(client, TxnAnswer(request_id, response))

    # ── requests ───────────────────────────────────────────────────────────────────

    def _call(self, client: int, call: TxnCall) -> None:
        shard = self.shard
        request = call.request
        if shard is None:
            refusal = _refusal(request, ErrorCode.not_coordinator)
            self.broker.send(client, TxnAnswer(call.request_id, refusal))
            return
        token = next(self._tokens)
        self._waiting[token] = (client, call.request_id)
        now = self.world.now_ms
        if isinstance(request, InitProducerIdRequest):
            initializing = shard.needs_producer_id(request.transactional_id, initializing=True)
            fresh = self._producer_ids() if initializing else None
            effects = shard.init_producer_id(now, token, request, fresh)
        elif isinstance(request, AddPartitionsRequest):
            effects = shard.add_partitions(now, token, request)
        else:
            exhausted = shard.needs_producer_id(request.transactional_id, initializing=False)
            fresh = self._producer_ids() if exhausted and request.bump_epoch else None
            effects = shard.end_txn(now, token, request, fresh)
        self._run(effects)

    # ── carrying out the coordinator's effects ─────────────────────────────────────

    def _run(self, effects: Sequence[Effect]) -> None:
        """Carry out ``effects`` and whatever follows (writes reported, timers due)."""
        todo = deque(effects)
        while True:
            while todo:
                effect = todo.popleft()
                if self.shard is None:
                    return
                if isinstance(effect, Append):
                    self._append(effect)
                elif isinstance(effect, Reply):
                    self._reply(effect)
                elif isinstance(effect, Task):
                    self._start_markers(effect)
                else:
                    raise AssertionError(f"the transaction coordinator never asks {effect!r}")
            shard = self.shard
            if shard is None:
                return
            todo.extend(self._completed_appends(shard))
            if not todo:
                break
        self._schedule()

    def _append(self, append: Append) -> None:
        values = [encode_state_record(key, value) for key, value in append.records]
        end = self.broker.append_as_leader(STATE_PARTITION, values)
        self._appends.append((append.append_id, end))

    def _completed_appends(self, shard: TransactionCoordinator) -> list[Effect]:
        """Report the writes the high watermark passed, in order (a failed one at its
        turn)."""
        replica = self.broker.replicas.get(STATE_PARTITION)
        high_watermark = replica.log.high_watermark if replica is not None else -1
        effects: list[Effect] = []
        now = self.world.now_ms
        while self._appends:
            append_id, end = self._appends[0]
            if end is not None and end > high_watermark:
                break
            self._appends.popleft()
            error = None if end is not None else ErrorCode.not_enough_replicas
            effects += shard.append_completed(now, append_id, error)
        return effects

    def _reply(self, reply: Reply) -> None:
        found = self._waiting.pop(reply.token, None)
        if found is None:
            return
        client, request_id = found
        assert isinstance(reply.response, ProducerIdAndEpoch | AddPartitionsResult)
        self.broker.send(client, TxnAnswer(request_id, reply.response))

    def _schedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.shard is None:
            return
        deadline = self.shard.next_deadline_ms()
        if deadline is not None:
            self._timer = self.world.at(deadline, self._tick)

    def _tick(self) -> None:
        self._timer = None
        if self.shard is not None and self.broker.up:
            self._run(self.shard.poll(self.world.now_ms))

    # ── markers ────────────────────────────────────────────────────────────────────

    def _start_markers(self, task: Task) -> None:
        assert isinstance(task.work, WriteMarkers)
        marker_task = _MarkerTask(task.task_id, task.work, {}, {})
        self._tasks[task.task_id] = marker_task
        for tp in task.work.partitions:
            self._send_marker(marker_task, tp)
        if not marker_task.waiting:
            self._markers_done(marker_task)

    def _send_marker(self, task: _MarkerTask, tp: TopicPartition) -> None:
        if self._tasks.get(task.task_id) is not task:
            return  # the coordinator stopped meanwhile
        image = self.broker.image
        topic = image.topics.get(tp.topic) if image is not None else None
        if topic is None:
            task.waiting.pop(tp, None)  # the topic is gone: nothing to mark
            return
        request_id = next(self._requests)
        task.waiting[tp] = request_id
        self._markers[request_id] = (task.task_id, tp)
        work = task.work
        leader = topic.partitions[tp.partition].leader
        if leader >= 0:
            marker = ProduceRequest(
                request_id,
                tp,
                work.producer_id,
                -1,
                "",
                work.producer_epoch,
                True,
                "commit" if work.committed else "abort",
            )
            self.broker.send(leader, marker)
        task.timers[tp] = self.world.after(
            REQUEST_TIMEOUT_MS, lambda: self._marker_failed(request_id)
        )

    def _marker_failed(self, request_id: int) -> None:
        found = self._markers.pop(request_id, None)
        if found is None:
            return
        task = self._tasks.get(found[0])
        if task is None:
            return
        tp = found[1]
        task.waiting[tp] = 0
        timer = task.timers.pop(tp, None)
        if timer is not None:
            timer.cancel()
        task.timers[tp] = self.world.after(RETRY_BACKOFF_MS, lambda: self._send_marker(task, tp))

    def _marker_answered(self, _sender: int, answer: ProduceAnswer) -> None:
        found = self._markers.get(answer.request_id)
        if found is None:
            return
        if answer.error_code not in (ErrorCode.none, ErrorCode.invalid_producer_epoch):
            self._marker_failed(answer.request_id)
            return
        del self._markers[answer.request_id]
        task = self._tasks.get(found[0])
        if task is None:
            return
        del task.waiting[found[1]]
        timer = task.timers.pop(found[1], None)
        if timer is not None:
            timer.cancel()
        if not task.waiting:
            self._markers_done(task)

    def _markers_done(self, task: _MarkerTask) -> None:
        del self._tasks[task.task_id]
        if self.shard is not None:
            self._run(self.shard.task_completed(self.world.now_ms, task.task_id, None))


def host_coordinators(brokers: Sequence[SimBroker], config: TransactionConfig) -> None:
    """Every broker coordinates transactions while it leads ``__transaction_state-0``."""
    producer_ids = ProducerIds()
    for broker in brokers:
        CoordinatorHost(broker, producer_ids, config)


# ── the transactional producer ───────────────────────────────────────────────────


class TransactionalProducer:
    """A transactional producer running transactions until :meth:`stop` (see the
    module)."""

    def __init__(
        self,
        world: World,
        network: Network,
        store: SimMetadataStore,
        log: history.History,
        node: int,
        topic: str,
        partitions: int,
    ) -> None:
        self.world = world
        self.network = network
        self.store = store
        self.history = log
        self.node = node
        self.topic = topic
        self.partitions = partitions
        self.transactional_id = f"transactional-{node}"
        self._random = world.random(f"transactional-producer-{node}")
        self.producer_id = -1
        self.producer_epoch = -1
        self._stopping = False
        self._transactions = 0
        self._values: list[str] = []
        """Of the open transaction: those sent (or being sent)."""
        self._to_send: list[tuple[TopicPartition, str]] = []
        self._sequences: dict[TopicPartition, int] = {}
        self._in_flight: tuple[int, Callable[[object], None], Timer] | None = None
        self._requests = itertools.count(1)
        self._tries = 0
        self._sending: tuple[TopicPartition, str] | None = None
        self.committed = self.aborted = self.unknown = 0
        network.attach(node, self._receive)

    # ── the run ────────────────────────────────────────────────────────────────────

    def start(self) -> None:
        self._init()

    def stop(self) -> None:
        """Begin no more transactions (the open one finishes)."""
        self._stopping = True

    def give_up(self) -> None:
        """The run ends: what is still waiting has an unknown outcome."""
        if self._in_flight is not None:
            self._in_flight[2].cancel()
            self._in_flight = None
        if self._sending is not None:
            tp, value = self._sending
            self.history.send(self.node, "info", _partition(tp), value)
            self._sending = None
        self._end_unknown()
        self._stopping = True

    # ── requests: one at a time, each retried until answered ──────────────────────

    def _ask(
        self,
        destination: int,
        message: TxnCall | ProduceRequest,
        on_answer: Callable[[object], None],
    ) -> None:
        """Send ``message`` (under a new request id) to ``destination`` (-1: nobody, the
        partition has no leader); ``on_answer`` gets the answer, or None on a timeout."""
        request_id = next(self._requests)
        message = dataclasses.replace(message, request_id=request_id)
        timer = self.world.after(REQUEST_TIMEOUT_MS, lambda: self._timed_out(request_id))
        self._in_flight = (request_id, on_answer, timer)
        if destination >= 0:
            self.network.send(self.node, destination, message)

    def _timed_out(self, request_id: int) -> None:
        if self._in_flight is None or self._in_flight[0] != request_id:
            return
        _, on_answer, _ = self._in_flight
        self._in_flight = None
        on_answer(None)

    def _receive(self, _sender: int, answer: object) -> None:
        if not isinstance(answer, TxnAnswer | ProduceAnswer):
            return
        if self._in_flight is None or self._in_flight[0] != answer.request_id:
            return  # an answer to an attempt given up
        _, on_answer, timer = self._in_flight
        timer.cancel()
        self._in_flight = None
        on_answer(answer)

    def _leader(self, tp: TopicPartition) -> int:
        topic = self.store.image().topics.get(tp.topic)
        return topic.partitions[tp.partition].leader if topic is not None else -1

    def _coordinator(self, request: Request, then: Callable[[Response], None]) -> None:
        """Ask the coordinator (the leader of ``__transaction_state-0``, FindCoordinator's
        answer) until it answers something other than "ask again"."""

        def answered(answer: object) -> None:
            if isinstance(answer, TxnAnswer) and _error(answer.response) not in _LOOK_UP_AGAIN:
                then(answer.response)
                return
            self.world.after(RETRY_BACKOFF_MS, lambda: self._coordinator(request, then))

        self._ask(self._leader(STATE_PARTITION), TxnCall(0, request), answered)

    # ── the steps of a transaction ─────────────────────────────────────────────────

    def _init(self) -> None:
        if self._stopping:
            return
        request = InitProducerIdRequest(self.transactional_id, TRANSACTION_TIMEOUT_MS)
        self._coordinator(request, self._initialized)

    def _initialized(self, response: Response) -> None:
        assert isinstance(response, ProducerIdAndEpoch)
        if response.error != ErrorCode.none:
            self.world.after(RETRY_BACKOFF_MS, self._init)
            return
        self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
        self._next_transaction()

    def _next_transaction(self) -> None:
        low, high = GAP_BETWEEN_TRANSACTIONS_MS
        self.world.after(self._random.randint(low, high), self._begin)

    def _begin(self) -> None:
        if self._stopping:
            return
        self._transactions += 1
        count = self._random.randint(1, VALUES_PER_TRANSACTION_MAX)
        self._to_send = [
            (
                TopicPartition(self.topic, self._random.randrange(self.partitions)),
                f"x{self.node}-{self._transactions}-{k}",
            )
            for k in range(count)
        ]
        self._values = []
        self._sequences = {}
        partitions = tuple(sorted({tp for tp, _ in self._to_send}))
        request = AddPartitionsRequest(
            self.transactional_id, self.producer_id, self.producer_epoch, partitions
        )
        self._coordinator(request, self._added)

    def _added(self, response: Response) -> None:
        if _error(response) != ErrorCode.none:
            self._init()  # fenced, or the id is unknown: start over (nothing was sent)
            return
        self._send_next()

    def _send_next(self) -> None:
        if not self._to_send:
            self._end(commit=self._random.random() < COMMIT_PROBABILITY)
            return
        tp, value = self._to_send.pop(0)
        self._values.append(value)
        self._sending = (tp, value)
        self._tries = 0
        self._attempt()

    def _attempt(self) -> None:
        assert self._sending is not None
        tp, value = self._sending
        request = ProduceRequest(
            0,
            tp,
            self.producer_id,
            self._sequences.get(tp, 0),
            value,
            self.producer_epoch,
            True,
        )
        self._ask(self._leader(tp), request, self._sent)

    def _sent(self, answer: object) -> None:
        assert self._sending is not None
        tp, value = self._sending
        if isinstance(answer, ProduceAnswer) and answer.error_code == ErrorCode.none:
            self._sending = None
            self._sequences[tp] = self._sequences.get(tp, 0) + 1
            self.history.send(self.node, "ok", _partition(tp), value, answer.offset)
            self._send_next()
            return
        fenced = (
            isinstance(answer, ProduceAnswer)
            and answer.error_code == ErrorCode.invalid_producer_epoch
        )
        self._tries += 1
        if not fenced and self._tries < SEND_RETRIES_MAX:
            self.world.after(RETRY_BACKOFF_MS, self._attempt)
            return
        self._sending = None
        self.history.send(self.node, "info", _partition(tp), value)
        self._to_send = []
        self._end(commit=False)

    def _end(self, *, commit: bool) -> None:
        request = EndTxnRequest(
            self.transactional_id,
            self.producer_id,
            self.producer_epoch,
            commit,
            bump_epoch=True,
        )
        self._coordinator(request, lambda response: self._ended(commit, response))

    def _ended(self, commit: bool, response: Response) -> None:
        assert isinstance(response, ProducerIdAndEpoch)
        if response.error != ErrorCode.none:
            # Fenced (the coordinator aborted it: a timeout), or another end was taken:
            # which one is not known here.
            self._end_unknown()
            self._init()
            return
        self.history.transaction(self.node, "ok" if commit else "fail", self._values)
        if commit:
            self.committed += 1
        else:
            self.aborted += 1
        self._values = []
        self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
        self._next_transaction()

    def _end_unknown(self) -> None:
        if self._values:
            self.history.transaction(self.node, "info", self._values)
            self.unknown += 1
        self._values = []


def _partition(tp: TopicPartition) -> history.TopicPartition:
    return history.TopicPartition(tp.topic, tp.partition)
