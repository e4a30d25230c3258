"""The history checker of the replication fault tests: each anomaly found in a small
hand-made history (and nothing else found), valid histories from a simulated correct
log, one injected anomaly found in them, and the offline replica reader. Pure: no
ZooKeeper, no broker."""

from __future__ import annotations

import dataclasses
import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_INVALID, Message
from fault_workload import Deliveries
from history import (
    ABORTED_READ,
    DUPLICATE,
    INCONSISTENT_OFFSETS,
    LOST_WRITE,
    NONMONOTONIC_POLL,
    NONMONOTONIC_SEND,
    OUTCOMES,
    POLL_SKIP,
    REPLICA_DIVERGENCE,
    TORN_TRANSACTION,
    FinalRead,
    History,
    Operation,
    Poll,
    Send,
    TopicPartition,
    Value,
    check,
    read_replica_log,
)

from sluice.common.clock import ManualClock
from sluice.common.config import TopicConfig
from sluice.protocol.records.batch import set_base_offset
from sluice.protocol.records.builder import (
    ControlRecordType,
    RecordInput,
    build_batch,
    build_control_batch,
)
from sluice.storage import PartitionLog

P = TopicPartition("t", 0)
Q = TopicPartition("t", 1)
REPLICAS = (1, 2, 3)


def replicas_holding(
    partition: TopicPartition, records: list[tuple[int, Value]], high_watermark: int
) -> list[FinalRead]:
    return [FinalRead(partition, replica, tuple(records), high_watermark) for replica in REPLICAS]


def valid_history() -> History:
    """Two producers, two consumers (one re-assigned), three agreeing replicas; offset 2
    of p is a transaction marker (sparse), an info send landed, a failed one did too."""
    history = History()
    history.send(1, "ok", P, "a", 0)
    history.send(2, "ok", P, "b", 1)
    history.send(1, "ok", Q, "c", 0)
    history.send(2, "info", P, "d")
    history.send(1, "fail", Q, "e")
    history.send(1, "ok", P, "f", 4)
    history.send(2, "fail", P, "g")
    history.poll(10, [(P, 0, "a"), (Q, 0, "c")])
    history.poll(10, [(P, 1, "b"), (P, 3, "d")])
    history.poll(10, [])
    history.poll(10, [(P, 4, "f")])
    history.poll(11, [(Q, 0, "c"), (Q, 1, "e")])
    history.assign(11)
    history.poll(11, [(Q, 0, "c")])
    for read in replicas_holding(P, [(0, "a"), (1, "b"), (3, "d"), (4, "f")], 5):
        history.final_read(read)
    for read in replicas_holding(Q, [(0, "c"), (1, "e")], 2):
        history.final_read(read)
    return history


def test_a_valid_history_is_valid_and_counts_the_work() -> None:
    result = check(valid_history())
    assert result.valid, result.summary()
    assert (result.sends_ok, result.sends_info, result.sends_failed) == (4, 1, 2)
    assert (result.failed_but_present, result.info_present) == (1, 1)
    assert (result.polls_ok, result.records_polled, result.values_read) == (6, 8, 6)
    assert result.summary().startswith("valid")


def test_the_history_round_trips_through_json(tmp_path: Path) -> None:
    history = valid_history()
    history.dump(tmp_path / "history.json")
    loaded = History.load(tmp_path / "history.json")
    assert loaded.operations == history.operations
    assert loaded.final_reads == history.final_reads


def test_several_threads_append_to_one_history() -> None:
    history = History()

    def produce(process: int) -> None:
        for i in range(200):
            history.send(process, "ok", P, f"{process}-{i}", i)

    threads = [threading.Thread(target=produce, args=(process,)) for process in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(history.operations) == 800


def assert_only(history: History, kind: str) -> str:
    result = check(history)
    assert result.anomaly_kinds == {kind}, result.summary()
    return result.summary()


def transactional_history() -> History:
    """Producer 1 commits T1 (a, b at o0-o1; marker o2), aborts T2 (c at o3; marker o4),
    commits T3 (d at o5); a read_committed consumer reads a, b, d."""
    history = History()
    for value, offset in (("a", 0), ("b", 1), ("c", 3), ("d", 5)):
        history.send(1, "ok", P, value, offset)
    history.transaction(1, "ok", ["a", "b"])
    history.transaction(1, "fail", ["c"])
    history.transaction(1, "ok", ["d"])
    history.poll(10, [(P, 0, "a"), (P, 1, "b")], read_committed=True)
    history.poll(10, [(P, 5, "d")], read_committed=True)
    for read in replicas_holding(P, [(0, "a"), (1, "b"), (3, "c"), (5, "d")], 7):
        history.final_read(read)
    return history


def test_a_read_committed_reader_skipping_an_aborted_transaction_is_valid() -> None:
    result = check(transactional_history())
    assert result.valid, result.summary()


def test_a_transactional_history_round_trips_through_json(tmp_path: Path) -> None:
    history = transactional_history()
    history.dump(tmp_path / "history.json")
    assert History.load(tmp_path / "history.json").operations == history.operations


def test_aborted_read_a_read_committed_poll_returns_an_aborted_value() -> None:
    history = transactional_history()
    history.assign(10)
    history.poll(10, [(P, 3, "c")], read_committed=True)
    summary = assert_only(history, ABORTED_READ)
    assert "read 'c' of a transaction process 1 aborted" in summary


def test_a_read_uncommitted_poll_may_return_an_aborted_value() -> None:
    history = transactional_history()
    history.poll(11, [(P, 0, "a"), (P, 1, "b"), (P, 3, "c"), (P, 5, "d")])
    assert check(history).valid


def test_torn_transaction_part_of_a_committed_transaction_then_past_it() -> None:
    history = History()
    for value, offset in (("a", 0), ("b", 1), ("x", 3)):
        history.send(1, "ok", P, value, offset)
    history.transaction(1, "ok", ["a", "b"])
    history.transaction(1, "ok", ["x"])
    history.poll(11, [(P, 0, "a"), (P, 1, "b"), (P, 3, "x")], read_committed=True)
    history.poll(10, [(P, 0, "a")], read_committed=True)
    history.assign(10)  # a new session may start anywhere: nothing torn in either
    history.poll(10, [(P, 3, "x")], read_committed=True)
    assert check(history).valid
    history.assign(12)
    history.poll(12, [(P, 0, "a"), (P, 3, "x")], read_committed=True)
    result = check(history)
    # Reading past part of a transaction also skips a known record: both are named.
    assert result.anomaly_kinds == {TORN_TRANSACTION, POLL_SKIP}, result.summary()
    summary = result.summary()
    assert "process 12 (session 1) read part of a transaction" in summary
    assert "without offsets [1]" in summary


def test_lost_write_an_acknowledged_value_nobody_read_below_a_read_offset() -> None:
    history = History()
    history.send(1, "ok", P, "a", 0)
    history.send(1, "ok", P, "b", 1)
    history.send(1, "ok", P, "c", 2)
    history.poll(10, [(P, 0, "a")])
    history.assign(10)
    history.poll(10, [(P, 2, "c")])
    summary = assert_only(history, LOST_WRITE)
    assert "'b' acknowledged to process 1 at offset 1 was never read" in summary


def test_lost_write_an_acknowledged_value_missing_from_one_replica() -> None:
    history = History()
    history.send(1, "ok", P, "a", 0)
    history.send(1, "ok", P, "b", 1)
    history.send(1, "ok", P, "c", 2)
    history.final_read(FinalRead(P, 1, ((0, "a"), (1, "b"), (2, "c")), 3))
    history.final_read(FinalRead(P, 2, ((0, "a"), (2, "c")), 3))
    history.final_read(FinalRead(P, 3, ((0, "a"),), 1))  # lagging: ends before offset 1
    summary = assert_only(history, LOST_WRITE)
    assert "missing from replica 2" in summary
    assert "replica 3" not in summary


def test_lost_write_a_polled_record_missing_from_one_replica() -> None:
    history = History()
    history.send(1, "info", P, "a")
    history.send(1, "info", P, "b")
    history.poll(10, [(P, 0, "a"), (P, 1, "b")])
    history.final_read(FinalRead(P, 1, ((0, "a"), (1, "b")), 2))
    history.final_read(FinalRead(P, 2, ((1, "b"),), 2))
    summary = assert_only(history, LOST_WRITE)
    assert "offset 0, holding 'a' by poll #2 of process 10, is missing from replica 2" in summary


def test_an_unacknowledged_write_may_be_lost() -> None:
    history = History()
    history.send(1, "info", P, "a")
    history.send(1, "fail", P, "b")
    history.send(1, "ok", P, "c", 0)
    history.poll(10, [(P, 0, "c")])
    assert check(history).valid


def test_duplicate_one_value_at_two_offsets() -> None:
    history = History()
    history.send(1, "info", P, "a")
    history.send(1, "ok", P, "b", 1)
    history.poll(10, [(P, 0, "a"), (P, 1, "b"), (P, 2, "a")])
    summary = assert_only(history, DUPLICATE)
    assert "'a' is at t-0 offset 0, t-0 offset 2" in summary


def test_inconsistent_offsets_an_ack_and_a_poll_disagree() -> None:
    history = History()
    history.send(1, "ok", P, "a", 0)
    history.send(2, "info", P, "b")
    history.poll(10, [(P, 0, "b")])
    history.final_read(FinalRead(P, 1, ((0, "a"),), 1))
    summary = assert_only(history, INCONSISTENT_OFFSETS)
    assert "'a' by ack to process 1, replica 1; 'b' by poll #2 of process 10" in summary


def test_inconsistent_offsets_a_poll_contradicts_an_uncommitted_replica_tail() -> None:
    history = History()
    history.send(1, "info", P, "a")
    history.send(2, "info", P, "b")
    history.poll(10, [(P, 0, "a")])
    history.final_read(FinalRead(P, 1, ((0, "b"),), 0))
    assert_only(history, INCONSISTENT_OFFSETS)


def test_replica_divergence_below_the_high_watermark() -> None:
    history = History()
    history.send(1, "info", P, "a")
    history.send(2, "info", P, "b")
    history.final_read(FinalRead(P, 1, ((0, "a"),), 1))
    history.final_read(FinalRead(P, 2, ((0, "b"),), 0))
    summary = assert_only(history, REPLICA_DIVERGENCE)
    assert "offset 0 (below the high watermark 1) holds 'a' by replica 1; 'b' by replica 2" in (
        summary
    )


def test_replicas_may_differ_in_an_uncommitted_tail() -> None:
    history = History()
    history.send(1, "ok", P, "a", 0)
    history.send(1, "info", P, "b")
    history.send(2, "info", P, "c")
    history.final_read(FinalRead(P, 1, ((0, "a"), (1, "b")), 1))
    history.final_read(FinalRead(P, 2, ((0, "a"), (1, "c")), 1))
    assert check(history).valid


def test_nonmonotonic_poll_within_a_session_only() -> None:
    history = History()
    history.send(1, "ok", P, "a", 0)
    history.send(1, "ok", P, "b", 1)
    history.poll(10, [(P, 0, "a"), (P, 1, "b")])
    history.assign(10)
    history.poll(10, [(P, 0, "a")])  # a new session may start over
    history.poll(10, [(P, 1, "b")])
    history.poll(10, [(P, 1, "b")])
    summary = assert_only(history, NONMONOTONIC_POLL)
    assert "process 10 (session 1, poll #6) read offset 1 after offset 1" in summary


def test_poll_skip_over_a_known_record_but_not_over_a_sparse_offset() -> None:
    history = History()
    history.send(1, "ok", P, "a", 0)
    history.send(1, "ok", P, "b", 1)
    history.send(1, "ok", P, "c", 3)  # offset 2 holds a transaction marker
    history.poll(10, [(P, 0, "a"), (P, 1, "b"), (P, 3, "c")])
    history.poll(11, [(P, 0, "a")])
    history.poll(11, [(P, 3, "c")])
    summary = assert_only(history, POLL_SKIP)
    assert "process 11 (session 0, poll #5) read offset 0, then 3, skipping 1" in summary


def test_nonmonotonic_send_per_producer_and_partition() -> None:
    history = History()
    history.send(1, "ok", P, "a", 1)
    history.send(2, "ok", P, "b", 2)  # another producer: no order between them
    history.send(1, "ok", Q, "c", 0)  # another partition
    history.send(1, "ok", P, "d", 0)
    summary = assert_only(history, NONMONOTONIC_SEND)
    assert "process 1 sent 'a' -> offset 1, then 'd' -> offset 0" in summary


def test_examples_are_capped_but_all_anomalies_counted() -> None:
    history = History()
    for i in range(30):
        history.send(1, "ok", P, i, 30 - i)
    result = check(history, examples_max=3)
    assert result.anomaly_counts == {NONMONOTONIC_SEND: 29}
    assert len(result.examples[NONMONOTONIC_SEND]) == 3


def test_a_value_sent_twice_is_the_tests_mistake() -> None:
    history = History()
    history.send(1, "info", P, "a")
    history.send(1, "info", P, "a")
    with pytest.raises(ValueError, match="sent twice"):
        check(history)


# -- randomized: a simulated correct log, then one injected anomaly ---------------------

PARTITIONS = (P, Q)
PRODUCERS = (1, 2, 3)
CONSUMERS = (10, 11)
STEPS = 300
SEEDS = range(40)
INJECTED = "injected"
OUTCOME_WEIGHTS = (8, 1, 1)  # ok, fail, info: the order of OUTCOMES


def simulate(rng: random.Random) -> History:
    """Producers append to a correct log (acknowledged sends always, unknown and failed
    ones sometimes, transaction markers now and then), consumers read it in order and
    sometimes start a new session anywhere; three replicas end with the log, one maybe
    lagging."""
    logs: dict[TopicPartition, list[Value | None]] = {p: [] for p in PARTITIONS}
    positions = {(c, p): 0 for c in CONSUMERS for p in PARTITIONS}
    history = History()
    for step in range(STEPS):
        choice = rng.random()
        if choice < 0.45:
            partition = rng.choice(PARTITIONS)
            outcome = rng.choices(OUTCOMES, OUTCOME_WEIGHTS)[0]
            appended = outcome == "ok" or rng.random() < (0.5 if outcome == "info" else 0.2)
            offset = len(logs[partition])
            if appended:
                logs[partition].append(step)
            process = rng.choice(PRODUCERS)
            history.send(process, outcome, partition, step, offset if outcome == "ok" else None)
        elif choice < 0.5:
            logs[rng.choice(PARTITIONS)].append(None)  # a transaction marker
        elif choice < 0.92:
            consumer = rng.choice(CONSUMERS)
            records: list[tuple[TopicPartition, int, Value]] = []
            for partition in PARTITIONS:
                start = positions[consumer, partition]
                end = min(len(logs[partition]), start + rng.randint(0, 6))
                records.extend(
                    (partition, offset, value)
                    for offset, value in enumerate(logs[partition][start:end], start)
                    if value is not None
                )
                positions[consumer, partition] = end
            history.poll(consumer, records)
        else:
            consumer = rng.choice(CONSUMERS)
            history.assign(consumer)
            for partition in PARTITIONS:
                positions[consumer, partition] = rng.randint(0, len(logs[partition]))
    for partition, log in logs.items():
        records_all = [(offset, value) for offset, value in enumerate(log) if value is not None]
        for replica in REPLICAS:
            end = len(log)
            if replica == 3 and rng.random() < 0.5:
                end = rng.randint(0, len(log))  # a lagging follower
            held = tuple((offset, value) for offset, value in records_all if offset < end)
            history.final_read(FinalRead(partition, replica, held, end, 0, end))
    return history


def inject_lost_write(rng: random.Random, ops: list[Operation], reads: list[FinalRead]) -> bool:
    highest = {r.partition: r.end_offset - 1 for r in reads if r.replica == 1}
    candidates = [
        op
        for op in ops
        if isinstance(op, Send)
        and op.outcome == "ok"
        and op.offset is not None
        and op.offset < highest[op.partition] - 1
    ]
    if not candidates:
        return False
    lost = rng.choice(candidates).value
    for i, op in enumerate(ops):
        if isinstance(op, Poll):
            ops[i] = Poll(op.process, op.outcome, tuple(r for r in op.records if r.value != lost))
    for i, read in enumerate(reads):
        records = tuple(r for r in read.records if r[1] != lost)
        reads[i] = dataclasses.replace(read, records=records)
    return True


def polls_with_records(ops: list[Operation], at_least: int = 1) -> list[int]:
    return [i for i, op in enumerate(ops) if isinstance(op, Poll) and len(op.records) >= at_least]


def inject_duplicate(rng: random.Random, ops: list[Operation], reads: list[FinalRead]) -> bool:
    polls = polls_with_records(ops)
    if not polls:
        return False
    op = ops[rng.choice(polls)]
    assert isinstance(op, Poll)
    value = rng.choice(op.records).value
    read = next(r for r in reads if r.replica == 1 and r.partition == P)
    end = read.end_offset
    reads[reads.index(read)] = FinalRead(P, 1, (*read.records, (end, value)), end + 1, 0, end + 1)
    return True


def inject_inconsistent_offset(
    rng: random.Random, ops: list[Operation], reads: list[FinalRead]
) -> bool:
    polls = polls_with_records(ops)
    if not polls:
        return False
    index = rng.choice(polls)
    op = ops[index]
    assert isinstance(op, Poll)
    records = list(op.records)
    at = rng.randrange(len(records))
    records[at] = records[at]._replace(value=INJECTED)
    ops[index] = Poll(op.process, op.outcome, tuple(records))
    return True


def inject_nonmonotonic_poll(
    rng: random.Random, ops: list[Operation], reads: list[FinalRead]
) -> bool:
    polls = polls_with_records(ops)
    if not polls:
        return False
    index = rng.choice(polls)
    op = ops[index]
    assert isinstance(op, Poll)
    ops[index] = Poll(op.process, op.outcome, (*op.records, op.records[-1]))
    return True


def inject_poll_skip(rng: random.Random, ops: list[Operation], reads: list[FinalRead]) -> bool:
    candidates = [
        (i, j)
        for i, op in enumerate(ops)
        if isinstance(op, Poll)
        for j in range(1, len(op.records) - 1)
        if op.records[j - 1].partition == op.records[j].partition == op.records[j + 1].partition
    ]
    if not candidates:
        return False
    index, at = rng.choice(candidates)
    op = ops[index]
    assert isinstance(op, Poll)
    ops[index] = Poll(op.process, op.outcome, op.records[:at] + op.records[at + 1 :])
    return True


def inject_nonmonotonic_send(
    rng: random.Random, ops: list[Operation], reads: list[FinalRead]
) -> bool:
    sends = [(i, op) for i, op in enumerate(ops) if isinstance(op, Send) and op.outcome == "ok"]
    pairs = [
        (i, j)
        for n, (i, first) in enumerate(sends)
        for j, second in sends[n + 1 :]
        if (first.process, first.partition) == (second.process, second.partition)
    ]
    if not pairs:
        return False
    i, j = rng.choice(pairs)
    ops[i], ops[j] = ops[j], ops[i]
    return True


def inject_replica_divergence(
    rng: random.Random, ops: list[Operation], reads: list[FinalRead]
) -> bool:
    read = next(r for r in reads if r.replica == 2 and r.records)
    records = list(read.records)
    at = rng.randrange(len(records))
    records[at] = (records[at][0], INJECTED)
    reads[reads.index(read)] = dataclasses.replace(read, records=tuple(records))
    return True


Injection = Callable[[random.Random, list[Operation], list[FinalRead]], bool]
INJECTIONS: dict[str, Injection] = {
    LOST_WRITE: inject_lost_write,
    DUPLICATE: inject_duplicate,
    INCONSISTENT_OFFSETS: inject_inconsistent_offset,
    NONMONOTONIC_POLL: inject_nonmonotonic_poll,
    POLL_SKIP: inject_poll_skip,
    NONMONOTONIC_SEND: inject_nonmonotonic_send,
    REPLICA_DIVERGENCE: inject_replica_divergence,
}


@pytest.mark.parametrize("seed", SEEDS)
def test_a_simulated_correct_log_is_valid_and_an_injected_anomaly_is_found(seed: int) -> None:
    rng = random.Random(seed)
    history = simulate(rng)
    result = check(history)
    assert result.valid, f"seed {seed}\n{result.summary()}"
    assert result.sends_ok > 0 and result.values_read > 0, f"seed {seed}: no work done"

    kind = list(INJECTIONS)[seed % len(INJECTIONS)]
    ops, reads = history.operations, history.final_reads
    assert INJECTIONS[kind](rng, ops, reads), f"seed {seed}: nowhere to inject {kind}"
    result = check(History(ops, reads))
    assert kind in result.anomaly_kinds, f"seed {seed}, injected {kind}\n{result.summary()}"


# -- the offline replica reader ---------------------------------------------------------


def test_read_replica_log_returns_every_data_record_to_the_log_end(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    config = TopicConfig(segment_bytes=1024)  # several segments
    log = PartitionLog.create(directory, config, ManualClock())
    expected: list[tuple[int, bytes | None]] = []
    for i in range(40):
        values = [b"v%d-%d" % (i, j) for j in range(3)]
        batch = bytearray(build_batch([RecordInput(key=None, value=v) for v in values]))
        result = log.append(batch, leader_epoch=0)
        expected.extend(zip(range(result.base_offset, result.last_offset + 1), values, strict=True))
        if i == 20:
            marker = bytearray(
                build_control_batch(
                    ControlRecordType.ABORT,
                    producer_id=7,
                    producer_epoch=0,
                    coordinator_epoch=0,
                    timestamp_ms=0,
                )
            )
            set_base_offset(marker, log.log_end_offset)
            log.append_as_follower(marker)
    log.update_high_watermark(100)
    log.close()
    files_before = sorted((p.name, p.stat().st_size) for p in directory.iterdir())

    replica = read_replica_log(directory)

    assert replica.records == expected
    assert (replica.log_start_offset, replica.high_watermark, replica.log_end_offset) == (
        0,
        100,
        121,
    )
    assert sorted((p.name, p.stat().st_size) for p in directory.iterdir()) == files_before
    read = replica.final_read(P, 1, lambda value: (value or b"").decode())
    assert read.records[0] == (0, "v0-0") and read.end_offset == 121


def _delivered(value: str, offset: int) -> Message:
    """A delivery report's message as confluent-kafka hands it to the callback (an
    offset below 0 reads as None, as librdkafka's invalid offset does)."""
    return Message(topic="t", partition=0, offset=offset, value=value.encode())


def test_a_success_reported_without_an_offset_is_checked_as_acknowledged() -> None:
    """librdkafka acknowledges, without an offset, the messages of a request whose
    outcome it never learned once a later batch of the same idempotent producer
    succeeds: recorded (not a crash of the producer's callback) and checked at the end."""
    partition = TopicPartition("t", 0)
    history = History()
    deliveries = Deliveries(history)
    deliveries.on_delivery(0, None, _delivered("a", 0))
    deliveries.on_delivery(0, None, _delivered("b", OFFSET_INVALID))
    assert deliveries.acknowledged_without_offset == [(0, partition, "b")]
    held = FinalRead(partition, 0, ((0, "a"), (1, "b")), high_watermark=2)
    history.final_read(held)
    result = check(history)
    deliveries.check_acknowledged_without_offset(result)
    assert result.valid, result.summary()
    assert result.sends_ok == 1

    history = History()
    deliveries = Deliveries(history)
    deliveries.on_delivery(0, None, _delivered("a", 0))
    deliveries.on_delivery(0, None, _delivered("b", OFFSET_INVALID))
    history.final_read(FinalRead(partition, 0, ((0, "a"), (1, "b")), high_watermark=1))
    result = check(history)
    deliveries.check_acknowledged_without_offset(result)
    assert result.anomaly_kinds == {LOST_WRITE}, result.summary()
