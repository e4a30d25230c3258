"""Consumers that poll during a simulated run, and the leader's side of their fetches.

A :class:`Consumer` is assigned every partition of the workload's topic and fetches each
from its leader (as the store names it now), one fetch in flight per partition, every
``POLL_INTERVAL_MS``, from where it got to. A read_committed consumer does what the
Kafka consumer does with a fetch answer: it drops the records of the aborted
transactions the answer lists (from each one's first offset until its ABORT marker) and
every marker; a read_uncommitted one drops only the markers. Each fetch that returned
records goes into the history as one poll (``read_committed`` said), so the checker
sees aborted reads, torn transactions and skipped or repeated offsets. Its position only
moves forward over what a fetch returned, so it is one session for the whole run.

The leader answers a consumer's fetch up to the high watermark (read_uncommitted) or
the last stable offset (read_committed, :func:`~sluice.sim.txnlog.last_stable_offset`),
with the aborted transactions of the range it returns
(:func:`~sluice.sim.txnlog.aborted_between`), as Kafka's fetch does."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition
from sluice.sim import history
from sluice.sim.broker import SimBroker
from sluice.sim.disk import SimRecord
from sluice.sim.network import Network
from sluice.sim.store import SimMetadataStore
from sluice.sim.txnlog import CompletedTransaction, aborted_between, last_stable_offset
from sluice.sim.world import Timer, World

POLL_INTERVAL_MS = 100
REQUEST_TIMEOUT_MS = 3_000
RECORDS_PER_FETCH_MAX = 100


@dataclass(frozen=True, slots=True)
class ConsumerFetch:
    request_id: int
    topic_partition: TopicPartition
    offset: int
    read_committed: bool


@dataclass(frozen=True, slots=True)
class ConsumerFetchAnswer:
    request_id: int
    error_code: int
    records: tuple[SimRecord, ...] = ()
    """From the fetch offset on, one per offset."""
    aborted: tuple[CompletedTransaction, ...] = ()


def answer_fetch(broker: SimBroker, client: int, request: ConsumerFetch) -> None:
    """The leader's answer to a consumer's fetch."""
    replica = broker.replicas.get(request.topic_partition)
    try:
        if replica is None:
            raise errors.NotLeaderOrFollower("not a replica here")
        replica.core.check_leader()
        log = replica.log
        if request.offset > log.log_end_offset:
            raise errors.OffsetOutOfRange(f"{request.offset} > {log.log_end_offset}")
    except KafkaError as e:
        broker.send(client, ConsumerFetchAnswer(request.request_id, e.code))
        return
    committed_only = request.read_committed and "read-past-lso" not in broker.inject
    end = last_stable_offset(log) if committed_only else log.high_watermark
    records = log.read(request.offset, RECORDS_PER_FETCH_MAX, end)
    aborted: Sequence[CompletedTransaction] = ()
    if request.read_committed and records:
        aborted = aborted_between(log, request.offset, request.offset + len(records))
    answer = ConsumerFetchAnswer(request.request_id, ErrorCode.none, tuple(records), tuple(aborted))
    broker.send(client, answer)


def serve_consumers(brokers: Sequence[SimBroker]) -> None:
    """Every broker answers consumers' fetches for the partitions it leads."""
    for broker in brokers:
        broker.handlers[ConsumerFetch] = _answerer(broker)


def _answerer(broker: SimBroker) -> Callable[[int, ConsumerFetch], None]:
    return lambda client, request: answer_fetch(broker, client, request)


def visible(
    offset: int,
    records: Sequence[SimRecord],
    aborted: Sequence[CompletedTransaction],
    *,
    read_committed: bool,
) -> list[tuple[int, str]]:
    """The (offset, value) pairs of ``records`` (from ``offset`` on) an application
    polling them sees: no markers, and for read_committed no record of an aborted
    transaction."""
    pending = sorted(aborted, key=lambda t: t.first_offset)
    aborting: set[int] = set()
    seen = []
    for at, record in enumerate(records, offset):
        while pending and pending[0].first_offset <= at:
            aborting.add(pending.pop(0).producer_id)
        if record.control is not None:
            if record.control == "abort":
                aborting.discard(record.producer_id)
            continue
        if read_committed and record.transactional and record.producer_id in aborting:
            continue
        seen.append((at, record.value))
    return seen


class Consumer:
    def __init__(
        self,
        world: World,
        network: Network,
        store: SimMetadataStore,
        log: history.History,
        node: int,
        topic: str,
        partitions: int,
        *,
        read_committed: bool,
    ) -> None:
        self.world = world
        self.network = network
        self.store = store
        self.history = log
        self.node = node
        self.read_committed = read_committed
        self.positions = {TopicPartition(topic, p): 0 for p in range(partitions)}
        self._in_flight: dict[TopicPartition, tuple[int, Timer]] = {}
        self._requests = itertools.count(1)
        self._timer: Timer | None = None
        network.attach(node, self._receive)

    def start(self) -> None:
        self._poll()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for _, timer in self._in_flight.values():
            timer.cancel()
        self._in_flight.clear()
        self.network.detach(self.node)

    def _poll(self) -> None:
        image = self.store.image()
        for tp, position in self.positions.items():
            if tp in self._in_flight:
                continue
            request_id = next(self._requests)
            timer = self.world.after(REQUEST_TIMEOUT_MS, self._timeout(tp))
            self._in_flight[tp] = (request_id, timer)
            leader = image.topics[tp.topic].partitions[tp.partition].leader
            if leader >= 0:
                request = ConsumerFetch(request_id, tp, position, self.read_committed)
                self.network.send(self.node, leader, request)
        self._timer = self.world.after(POLL_INTERVAL_MS, self._poll)

    def _timeout(self, tp: TopicPartition) -> Callable[[], None]:
        """A fetch of ``tp`` unanswered: the next poll asks again."""

        def timed_out() -> None:
            self._in_flight.pop(tp, None)

        return timed_out

    def _receive(self, _sender: int, answer: object) -> None:
        if not isinstance(answer, ConsumerFetchAnswer):
            return
        tp = next(
            (tp for tp, (id_, _) in self._in_flight.items() if id_ == answer.request_id), None
        )
        if tp is None:
            return  # an answer to a fetch given up
        _, timer = self._in_flight.pop(tp)
        timer.cancel()
        if answer.error_code != ErrorCode.none or not answer.records:
            return  # asked again at the next poll
        position = self.positions[tp]
        seen = visible(position, answer.records, answer.aborted, read_committed=self.read_committed)
        self.positions[tp] = position + len(answer.records)
        if seen:
            partition = history.TopicPartition(tp.topic, tp.partition)
            self.history.poll(
                self.node,
                [(partition, offset, value) for offset, value in seen],
                read_committed=self.read_committed,
            )
