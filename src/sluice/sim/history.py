"""Histories of clients against a replicated cluster, and the checker that finds
anomalies in them: used by the simulator and by the real-process fault tests.

A run drives producers and consumers against a cluster while brokers are killed, paused
or cut off, and records what each client saw in a :class:`History`: every send
(acknowledged at an offset, failed, or of unknown outcome) and every poll (the records
it returned, in order). At the end it reads each replica's partition log and adds those
final reads. :func:`check` then looks for the anomalies below (the kinds Jepsen's Kafka
workload names); a run is good when ``result.valid``, and prints ``result.summary()``
and its seed when it is not.

A history is a list of operations, each by one *process* (a producer or consumer of the
test; one thread issuing operations one after another)::

    Send(process, outcome, partition, value, offset)    outcome ok: offset is the ack
    Poll(process, outcome, records)                     records: (partition, offset, value)
    Assign(process)                                     the consumer starts a new session
    Transaction(process, outcome, values)               a transactional producer's commit
                                                        (ok), abort (fail) or unknown end
    FinalRead(partition, replica, records, high_watermark, log_start_offset, log_end_offset)

A poll of a read_committed consumer says so (``Poll.read_committed``): it must see no
value of an aborted transaction and every value of a committed one that it passes.

Outcomes: ``ok`` (it happened), ``fail`` (the client was told it did not), ``info``
(unknown, e.g. a timeout: it may or may not have happened). Every value is sent once in
a whole history, so a value names one send.

Anomalies, each with a tiny example (``p`` is a partition, ``o3`` offset 3)::

    lost-write            A send acknowledged at o3 whose value nobody ever read, although
                          a record above o3 of p was read (by a poll or in a replica):
                          send x -> ok o3; poll reads o2, o4 and never x.
                          Or a record clients saw (acknowledged or polled) is absent
                          from a replica whose final log reaches past it: x was
                          acknowledged at o3, replica 2 holds o2 and o4, nothing at o3.
    duplicate             One value at two offsets: polls read x at o3 and at o5.
    inconsistent-offsets  One offset, two values, seen by clients: the ack of x said o3
                          but a poll read y at o3; or a poll read y at o3 and replica 1
                          holds z there.
    replica-divergence    Two replicas' final logs hold different values at an offset
                          below the partition's high watermark: replica 1 has x at o3,
                          replica 2 has y.
    nonmonotonic-poll     Within one consumer session the offsets read from a partition
                          go backwards or repeat: o3, o4, o4.
    poll-skip             Within one consumer session the consumer jumps over an offset
                          known to hold a record: reads o3 then o5 while o4 exists (some
                          poll, ack or replica saw it). Offsets may be sparse (transaction
                          markers take offsets), so a gap alone is no anomaly.
    nonmonotonic-send     One producer's successive acknowledged sends to a partition got
                          offsets that do not increase: x -> o5, then y -> o4.
    aborted-read          A read_committed poll returned a value of an aborted
                          transaction: T aborted with x; a read_committed poll reads x.
    torn-transaction      A read_committed session read part of a committed transaction
                          in a partition and went past the rest: T committed x (o3) and
                          y (o4); the session reads x, then o5, never y.

Values of aborted transactions, and of transactions whose end is unknown, are in the
log but hidden from read_committed readers: they are never lost writes, and a
read_committed session that jumps over them does not skip anything.

Only acknowledged sends can be lost. A send that failed may still be in the log: Kafka
answers NOT_ENOUGH_REPLICAS_AFTER_APPEND, or a request times out, after the leader
appended the batch, and such a record is replicated like any other. So a failed send
found in the log is counted (``failed_but_present``) and is not an anomaly; an ``info``
send may be present or not.

What counts as committed: records of a final read at or above the partition's high
watermark (the highest any replica checkpointed) may be an unreplicated tail that the
next leader change truncates, so replicas may differ there, and such records are used
only to contradict what clients saw at the same offset. Take final reads after the
cluster healed and caught up: a deposed leader stopped before it truncated its tail
reads as a contradiction.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Self

Value = int | str
"""A record's value as the test chose it: unique in the whole history."""

Outcome = Literal["ok", "fail", "info"]

OUTCOMES: tuple[Outcome, ...] = ("ok", "fail", "info")

EXAMPLES_PER_ANOMALY_MAX = 10
"""Anomalies of each kind kept as examples in a result (all are counted)."""

LOST_WRITE = "lost-write"
DUPLICATE = "duplicate"
INCONSISTENT_OFFSETS = "inconsistent-offsets"
REPLICA_DIVERGENCE = "replica-divergence"
NONMONOTONIC_POLL = "nonmonotonic-poll"
POLL_SKIP = "poll-skip"
NONMONOTONIC_SEND = "nonmonotonic-send"
ABORTED_READ = "aborted-read"
TORN_TRANSACTION = "torn-transaction"
ANOMALY_KINDS = (
    LOST_WRITE,
    DUPLICATE,
    INCONSISTENT_OFFSETS,
    REPLICA_DIVERGENCE,
    NONMONOTONIC_POLL,
    POLL_SKIP,
    NONMONOTONIC_SEND,
    ABORTED_READ,
    TORN_TRANSACTION,
)


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class PolledRecord(NamedTuple):
    partition: TopicPartition
    offset: int
    value: Value


# -- operations -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    """One produce of one value. ``offset`` is the acknowledged offset (ok only)."""

    process: int
    outcome: Outcome
    partition: TopicPartition
    value: Value
    offset: int | None = None

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}")
        if (self.outcome == "ok") != (self.offset is not None):
            raise ValueError(f"send of {self.value!r}: an offset comes with outcome ok only")


@dataclass(frozen=True, slots=True)
class Poll:
    """One consumer poll and the records it returned, in order (ok only)."""

    process: int
    outcome: Outcome
    records: tuple[PolledRecord, ...] = ()
    read_committed: bool = False

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}")
        if self.records and self.outcome != "ok":
            raise ValueError("records come with outcome ok only")


@dataclass(frozen=True, slots=True)
class Assign:
    """The consumer was (re)assigned, seeked or rebalanced: its next polls are a new
    session, which may start anywhere."""

    process: int


@dataclass(frozen=True, slots=True)
class Transaction:
    """How a transaction of a producer ended: committed (ok), aborted (fail) or unknown
    (info, e.g. its commit timed out). ``values`` are the sends made inside it."""

    process: int
    outcome: Outcome
    values: tuple[Value, ...]

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}")


Operation = Send | Poll | Assign | Transaction


@dataclass(frozen=True, slots=True)
class FinalRead:
    """What one replica's log of a partition held once the test was over. Offsets in
    ``[log_start_offset, log_end_offset)`` without a record are sparse (control
    records)."""

    partition: TopicPartition
    replica: int
    records: tuple[tuple[int, Value], ...]
    high_watermark: int
    log_start_offset: int = 0
    log_end_offset: int | None = None
    """None: one past the last record."""

    @property
    def end_offset(self) -> int:
        if self.log_end_offset is not None:
            return self.log_end_offset
        return self.records[-1][0] + 1 if self.records else self.log_start_offset


class History:
    """Operations in the order they completed, and the final reads (one thread adds
    them; the fault tests' history adds a lock)."""

    def __init__(
        self, operations: Iterable[Operation] = (), final_reads: Iterable[FinalRead] = ()
    ) -> None:
        self._operations: list[Operation] = list(operations)
        self._final_reads: list[FinalRead] = list(final_reads)

    def add(self, operation: Operation) -> None:
        self._operations.append(operation)

    def send(
        self,
        process: int,
        outcome: Outcome,
        partition: TopicPartition,
        value: Value,
        offset: int | None = None,
    ) -> None:
        """Record a send when the process learned its outcome: one process's sends in the
        order they completed (nonmonotonic-send compares them in that order)."""
        self.add(Send(process, outcome, partition, value, offset))

    def poll(
        self,
        process: int,
        records: Iterable[tuple[TopicPartition, int, Value]],
        *,
        read_committed: bool = False,
    ) -> None:
        """A poll that returned (possibly no) records."""
        polled = tuple(PolledRecord(*record) for record in records)
        self.add(Poll(process, "ok", polled, read_committed))

    def transaction(self, process: int, outcome: Outcome, values: Iterable[Value]) -> None:
        self.add(Transaction(process, outcome, tuple(values)))

    def assign(self, process: int) -> None:
        self.add(Assign(process))

    def final_read(self, read: FinalRead) -> None:
        self._final_reads.append(read)

    @property
    def operations(self) -> list[Operation]:
        return list(self._operations)

    @property
    def final_reads(self) -> list[FinalRead]:
        return list(self._final_reads)

    # -- JSON -------------------------------------------------------------------------

    def to_json(self) -> str:
        """The whole history, one operation a line (a failing test saves or prints it)."""
        operations = [_operation_to_json(op) for op in self.operations]
        final_reads = [
            {
                "partition": list(read.partition),
                "replica": read.replica,
                "records": [list(record) for record in read.records],
                "high_watermark": read.high_watermark,
                "log_start_offset": read.log_start_offset,
                "log_end_offset": read.log_end_offset,
            }
            for read in self.final_reads
        ]
        lines = ",\n".join(json.dumps(item) for item in operations)
        reads = ",\n".join(json.dumps(item) for item in final_reads)
        return f'{{"operations": [\n{lines}\n],\n"final_reads": [\n{reads}\n]}}\n'

    @classmethod
    def from_json(cls, text: str) -> Self:
        data = json.loads(text)
        final_reads = [
            FinalRead(
                TopicPartition(*item["partition"]),
                item["replica"],
                tuple((offset, value) for offset, value in item["records"]),
                item["high_watermark"],
                item["log_start_offset"],
                item["log_end_offset"],
            )
            for item in data["final_reads"]
        ]
        return cls((_operation_from_json(item) for item in data["operations"]), final_reads)


def _operation_to_json(op: Operation) -> dict[str, Any]:
    if isinstance(op, Send):
        return {
            "kind": "send",
            "process": op.process,
            "outcome": op.outcome,
            "partition": list(op.partition),
            "value": op.value,
            "offset": op.offset,
        }
    if isinstance(op, Poll):
        return {
            "kind": "poll",
            "process": op.process,
            "outcome": op.outcome,
            "records": [[list(r.partition), r.offset, r.value] for r in op.records],
            "read_committed": op.read_committed,
        }
    if isinstance(op, Transaction):
        return {
            "kind": "transaction",
            "process": op.process,
            "outcome": op.outcome,
            "values": list(op.values),
        }
    return {"kind": "assign", "process": op.process}


def _operation_from_json(item: dict[str, Any]) -> Operation:
    if item["kind"] == "send":
        return Send(
            item["process"],
            item["outcome"],
            TopicPartition(*item["partition"]),
            item["value"],
            item["offset"],
        )
    if item["kind"] == "poll":
        records = tuple(
            PolledRecord(TopicPartition(*partition), offset, value)
            for partition, offset, value in item["records"]
        )
        return Poll(item["process"], item["outcome"], records, item.get("read_committed", False))
    if item["kind"] == "transaction":
        return Transaction(item["process"], item["outcome"], tuple(item["values"]))
    if item["kind"] == "assign":
        return Assign(item["process"])
    raise ValueError(f"unknown operation kind {item['kind']!r}")


# -- the offline replica reader -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Anomaly:
    kind: str
    partition: TopicPartition
    offset: int | None
    value: Value | None
    description: str

    def __str__(self) -> str:
        return f"{self.kind} in {self.partition}: {self.description}"


@dataclass
class CheckResult:
    """What :func:`check` found. ``examples`` keeps at most ``examples_max`` anomalies of
    each kind; ``anomaly_counts`` counts them all."""

    examples_max: int = EXAMPLES_PER_ANOMALY_MAX
    examples: dict[str, list[Anomaly]] = field(default_factory=dict)
    anomaly_counts: dict[str, int] = field(default_factory=dict)
    sends_ok: int = 0
    sends_info: int = 0
    sends_failed: int = 0
    failed_but_present: int = 0
    """Failed sends whose value is in the log anyway (not an anomaly, see the module)."""
    info_present: int = 0
    polls_ok: int = 0
    records_polled: int = 0
    values_read: int = 0
    """Distinct values returned by polls."""

    @property
    def valid(self) -> bool:
        return not self.anomaly_counts

    @property
    def anomaly_kinds(self) -> set[str]:
        return set(self.anomaly_counts)

    def report(self, anomaly: Anomaly) -> None:
        self.anomaly_counts[anomaly.kind] = self.anomaly_counts.get(anomaly.kind, 0) + 1
        kept = self.examples.setdefault(anomaly.kind, [])
        if len(kept) < self.examples_max:
            kept.append(anomaly)

    def summary(self) -> str:
        lines = [
            f"{'valid' if self.valid else 'INVALID'}: sends ok {self.sends_ok}, "
            f"info {self.sends_info} ({self.info_present} present), "
            f"failed {self.sends_failed} ({self.failed_but_present} present); "
            f"polls {self.polls_ok}, records polled {self.records_polled}, "
            f"values read {self.values_read}"
        ]
        for kind in ANOMALY_KINDS:
            if kind in self.anomaly_counts:
                lines.append(f"{kind}: {self.anomaly_counts[kind]}")
                lines.extend(f"  {anomaly}" for anomaly in self.examples[kind])
        return "\n".join(lines)


class _Observation(NamedTuple):
    """One source's claim that ``value`` is at (partition, offset)."""

    value: Value
    source: str
    """Who saw it, for the reader of a report."""
    origin: Literal["ack", "poll", "replica"]


def _sources(observations: Iterable[_Observation]) -> str:
    by_value: dict[Value, list[str]] = defaultdict(list)
    for observation in observations:
        by_value[observation.value].append(observation.source)
    return "; ".join(f"{value!r} by {', '.join(sources)}" for value, sources in by_value.items())


class _Checker:
    def __init__(self, history: History, examples_max: int) -> None:
        self.operations = history.operations
        self.final_reads = history.final_reads
        self.result = CheckResult(examples_max)
        self.sends: dict[Value, Send] = {}
        self.high_watermarks: dict[TopicPartition, int] = {}
        for read in self.final_reads:
            self.high_watermarks[read.partition] = max(
                self.high_watermarks.get(read.partition, 0), read.high_watermark
            )
        # (partition, offset) -> who saw what there. Client observations (polls, acks)
        # and committed final-read records; uncommitted tails are kept apart.
        self.seen: dict[TopicPartition, dict[int, list[_Observation]]] = defaultdict(
            lambda: defaultdict(list)
        )
        self.tails: dict[TopicPartition, dict[int, list[_Observation]]] = defaultdict(
            lambda: defaultdict(list)
        )
        self.present: set[Value] = set()
        """Values found anywhere: in polls or in any final read."""
        self.transaction_of: dict[Value, Transaction] = {}
        for op in self.operations:
            if isinstance(op, Transaction):
                for value in op.values:
                    self.transaction_of[value] = op

    def hidden_from_read_committed(self, value: Value) -> bool:
        """A value of an aborted transaction, or of one whose end is unknown."""
        transaction = self.transaction_of.get(value)
        return transaction is not None and transaction.outcome != "ok"

    def report(
        self,
        kind: str,
        partition: TopicPartition,
        offset: int | None,
        value: Value | None,
        text: str,
    ) -> None:
        self.result.report(Anomaly(kind, partition, offset, value, text))

    def run(self) -> CheckResult:
        self.collect()
        self.check_offsets()
        self.check_duplicates()
        self.check_lost_writes()
        self.check_sessions()
        self.check_send_order()
        self.check_transactions()
        return self.result

    def collect(self) -> None:
        result = self.result
        polled_values: set[Value] = set()
        for index, op in enumerate(self.operations):
            if isinstance(op, Send):
                if op.value in self.sends:
                    raise ValueError(f"value {op.value!r} sent twice: values must be unique")
                self.sends[op.value] = op
                if op.outcome == "ok":
                    result.sends_ok += 1
                    assert op.offset is not None
                    self.seen[op.partition][op.offset].append(
                        _Observation(op.value, f"ack to process {op.process}", "ack")
                    )
                elif op.outcome == "info":
                    result.sends_info += 1
                else:
                    result.sends_failed += 1
            elif isinstance(op, Poll) and op.outcome == "ok":
                result.polls_ok += 1
                result.records_polled += len(op.records)
                for record in op.records:
                    polled_values.add(record.value)
                    self.seen[record.partition][record.offset].append(
                        _Observation(record.value, f"poll #{index} of process {op.process}", "poll")
                    )
        result.values_read = len(polled_values)
        present = self.present
        present.update(polled_values)
        for read in self.final_reads:
            committed_below = self.high_watermarks[read.partition]
            for offset, value in read.records:
                present.add(value)
                where = self.seen if offset < committed_below else self.tails
                where[read.partition][offset].append(
                    _Observation(value, f"replica {read.replica}", "replica")
                )
        for value in present:
            send = self.sends.get(value)
            if send is not None and send.outcome == "fail":
                result.failed_but_present += 1
            elif send is not None and send.outcome == "info":
                result.info_present += 1

    def check_offsets(self) -> None:
        """inconsistent-offsets (clients disagree with anyone) and replica-divergence
        (committed final reads disagree among themselves)."""
        for partition in sorted(self.seen.keys() | self.tails.keys()):
            seen, tails = self.seen[partition], self.tails[partition]
            for offset in sorted(seen.keys() | tails.keys()):
                observations = seen.get(offset, []) + tails.get(offset, [])
                by_client = any(o.origin != "replica" for o in observations)
                if by_client and len({o.value for o in observations}) > 1:
                    self.report(
                        INCONSISTENT_OFFSETS,
                        partition,
                        offset,
                        None,
                        f"offset {offset} holds {_sources(observations)}",
                    )
                replicas = [o for o in seen.get(offset, []) if o.origin == "replica"]
                if len({o.value for o in replicas}) > 1:
                    self.report(
                        REPLICA_DIVERGENCE,
                        partition,
                        offset,
                        None,
                        f"offset {offset} (below the high watermark "
                        f"{self.high_watermarks[partition]}) holds {_sources(replicas)}",
                    )

    def check_duplicates(self) -> None:
        places: dict[Value, set[tuple[TopicPartition, int]]] = defaultdict(set)
        for partition, seen_at in self.seen.items():
            for offset, observations in seen_at.items():
                for observation in observations:
                    places[observation.value].add((partition, offset))
        for value, where in places.items():
            if len(where) > 1:
                ordered = sorted(where)
                self.report(
                    DUPLICATE,
                    ordered[0][0],
                    None,
                    value,
                    f"value {value!r} is at "
                    + ", ".join(f"{partition} offset {offset}" for partition, offset in ordered),
                )

    def check_lost_writes(self) -> None:
        """Acknowledged values nobody read below a read offset, and records clients saw
        that a replica lacks."""
        highest_read: dict[TopicPartition, int] = {}
        for partition, observed in self.seen.items():
            read_offsets = [o for o, obs in observed.items() if any(x.origin != "ack" for x in obs)]
            if read_offsets:
                highest_read[partition] = max(read_offsets)
        for send in self.sends.values():
            if send.outcome != "ok" or self.hidden_from_read_committed(send.value):
                continue
            assert send.offset is not None
            highest = highest_read.get(send.partition, -1)
            if send.value not in self.present and highest > send.offset:
                self.report(
                    LOST_WRITE,
                    send.partition,
                    send.offset,
                    send.value,
                    f"{send.value!r} acknowledged to process {send.process} at offset "
                    f"{send.offset} was never read, though offset {highest} was",
                )
        # A record a client saw (acknowledged or polled) was committed: every replica
        # whose log reaches past it must hold something there.
        for read in self.final_reads:
            held = {offset for offset, _ in read.records}
            for offset, observations in self.seen[read.partition].items():
                clients = [o for o in observations if o.origin != "replica"]
                inside = read.log_start_offset <= offset < read.end_offset
                if clients and inside and offset not in held:
                    self.report(
                        LOST_WRITE,
                        read.partition,
                        offset,
                        clients[0].value,
                        f"offset {offset}, holding {_sources(clients)}, is missing from "
                        f"replica {read.replica}, whose log reaches offset {read.end_offset - 1}",
                    )

    def check_sessions(self) -> None:
        """nonmonotonic-poll and poll-skip, within each consumer session."""
        session: dict[int, int] = defaultdict(int)
        last: dict[tuple[int, int, TopicPartition], int] = {}
        for index, op in enumerate(self.operations):
            if isinstance(op, Assign):
                session[op.process] += 1
            if not isinstance(op, Poll):
                continue
            for record in op.records:
                key = (op.process, session[op.process], record.partition)
                previous = last.get(key)
                last[key] = record.offset
                if previous is None:
                    continue
                who = f"process {op.process} (session {session[op.process]}, poll #{index})"
                if record.offset <= previous:
                    self.report(
                        NONMONOTONIC_POLL,
                        record.partition,
                        record.offset,
                        record.value,
                        f"{who} read offset {record.offset} after offset {previous}",
                    )
                    continue
                known = self.seen[record.partition]
                skipped = [
                    o
                    for o in range(previous + 1, record.offset)
                    if o in known
                    and not (
                        op.read_committed
                        and all(self.hidden_from_read_committed(x.value) for x in known[o])
                    )
                ]
                if skipped:
                    self.report(
                        POLL_SKIP,
                        record.partition,
                        skipped[0],
                        None,
                        f"{who} read offset {previous}, then {record.offset}, skipping "
                        f"{len(skipped)} known record(s) from offset {skipped[0]}: "
                        f"{_sources(known[skipped[0]])}",
                    )

    def check_send_order(self) -> None:
        last: dict[tuple[int, TopicPartition], Send] = {}
        for op in self.operations:
            if not isinstance(op, Send) or op.outcome != "ok":
                continue
            assert op.offset is not None
            previous = last.get((op.process, op.partition))
            last[op.process, op.partition] = op
            if (
                previous is not None
                and previous.offset is not None
                and op.offset <= previous.offset
            ):
                self.report(
                    NONMONOTONIC_SEND,
                    op.partition,
                    op.offset,
                    op.value,
                    f"process {op.process} sent {previous.value!r} -> offset "
                    f"{previous.offset}, then {op.value!r} -> offset {op.offset}",
                )

    def check_transactions(self) -> None:
        """aborted-read and torn-transaction, for read_committed polls."""
        where: dict[Value, tuple[TopicPartition, int]] = {}
        for partition, seen_at in self.seen.items():
            for offset, observations in seen_at.items():
                for observation in observations:
                    where.setdefault(observation.value, (partition, offset))
        session: dict[int, int] = defaultdict(int)
        # (process, session, partition) -> offsets read, for the torn check below.
        read: dict[tuple[int, int, TopicPartition], set[int]] = defaultdict(set)
        for index, op in enumerate(self.operations):
            if isinstance(op, Assign):
                session[op.process] += 1
            if not isinstance(op, Poll) or not op.read_committed:
                continue
            for record in op.records:
                read[op.process, session[op.process], record.partition].add(record.offset)
                transaction = self.transaction_of.get(record.value)
                if transaction is not None and transaction.outcome == "fail":
                    self.report(
                        ABORTED_READ,
                        record.partition,
                        record.offset,
                        record.value,
                        f"read_committed poll #{index} of process {op.process} read "
                        f"{record.value!r} of a transaction process {transaction.process} "
                        "aborted",
                    )
        for transaction in {id(t): t for t in self.transaction_of.values()}.values():
            if transaction.outcome != "ok":
                continue
            by_partition: dict[TopicPartition, set[int]] = defaultdict(set)
            for value in transaction.values:
                if value in where:
                    partition, offset = where[value]
                    by_partition[partition].add(offset)
            for (process, number, partition), offsets in read.items():
                mine = by_partition.get(partition)
                if not mine or not offsets & mine or max(offsets) <= max(mine):
                    continue
                missing = sorted(mine - offsets)
                if missing:
                    self.report(
                        TORN_TRANSACTION,
                        partition,
                        missing[0],
                        None,
                        f"process {process} (session {number}) read part of a transaction "
                        f"process {transaction.process} committed and went past it without "
                        f"offsets {missing}",
                    )


def check(history: History, examples_max: int = EXAMPLES_PER_ANOMALY_MAX) -> CheckResult:
    """Every anomaly of ``history`` (see the module docstring), with counts of the work
    done. Raises ValueError when a value was sent twice (the test's mistake)."""
    return _Checker(history, examples_max).run()
