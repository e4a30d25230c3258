"""The delay scheduler with a manual clock and real partition logs: delays of days fire
at their time and not a millisecond before, memory holds only the near future whatever
the backlog, records fire once in due order, followers do not fire, a commit arms a
transaction's records."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from sluice.broker.extensions.delays import (
    LOAD_MAX,
    WINDOW_MS,
    DelayScheduler,
    park_again_before_retention,
    park_if_delayed,
)
from sluice.broker.replication.partition import Partition
from sluice.broker.replication.purgatory import Purgatory
from sluice.cluster.model import PartitionState
from sluice.common.clock import ManualClock
from sluice.common.config import TopicConfig
from sluice.common.ids import TopicPartition
from sluice.protocol.records.batch import parse_header
from sluice.protocol.records.builder import RecordInput, build_batch, decode_batches
from sluice.storage import PartitionLog

TOPIC_PARTITION = TopicPartition("jobs", 0)
DAY_MS = 86_400_000


class Replicas:
    def __init__(self, *partitions: Partition) -> None:
        self.partitions = {p.topic_partition: p for p in partitions}

    def __iter__(self) -> Iterator[Partition]:
        return iter(self.partitions.values())

    def find(self, topic_partition: TopicPartition) -> Partition | None:
        return self.partitions.get(topic_partition)


def leader(tmp_path: Path, clock: ManualClock, epoch: int = 0) -> Partition:
    log = PartitionLog.create(tmp_path / "jobs-0", TopicConfig(), clock)
    state = PartitionState(replicas=(0,), leader=0, leader_epoch=epoch, isr=(0,), version=0)
    return Partition(TOPIC_PARTITION, log, state, 0, Purgatory(), clock)


def produce(
    partition: Partition,
    scheduler: DelayScheduler,
    clock: ManualClock,
    values_and_delays: list[tuple[bytes, int]],
    schedule_id: bytes | None = None,
    **producer: int | bool,
) -> None:
    """What the produce path does: park the batch, append it, tell the scheduler."""
    extra = [] if schedule_id is None else [("x-sluice-schedule-id", schedule_id)]
    batch = build_batch(
        [
            RecordInput(b"k", value, headers=[("x-sluice-delay-ms", b"%d" % delay), *extra])
            for value, delay in values_and_delays
        ],
        base_timestamp_ms=clock.wall_ms(),
        **producer,  # type: ignore[arg-type]
    )
    parked = park_if_delayed(batch, parse_header(batch), partition.log.config, clock.wall_ms())
    assert parked is not None
    result = partition.append(bytearray(parked[0]), acks=1, parked=parked[1])
    scheduler.parked(
        TOPIC_PARTITION, [(d.due_ms, result.base_offset + i) for i, d in enumerate(parked[1])]
    )


def fired_values(partition: Partition) -> list[bytes | None]:
    log = partition.log
    data = b"".join(
        s.read()
        for s in log.read(log.log_start_offset, 1 << 30, max_offset=log.log_end_offset).slices
    )
    return [
        record.value
        for batch in decode_batches(data)
        if not batch.header.is_control
        for record in batch.records
    ]


def test_a_delay_of_days_fires_at_its_time_and_not_before(tmp_path: Path) -> None:
    clock = ManualClock()
    partition = leader(tmp_path, clock)
    scheduler = DelayScheduler(Replicas(partition), clock)
    produce(partition, scheduler, clock, [(b"in-3-days", 3 * DAY_MS), (b"in-1-day", DAY_MS)])
    scheduler.step(clock.wall_ms())
    assert scheduler.loaded == 0  # nothing due within the window: all of it on disk
    clock.advance(DAY_MS - 1)
    scheduler.step(clock.wall_ms())
    assert fired_values(partition) == []
    clock.advance(1)
    scheduler.step(clock.wall_ms())
    assert fired_values(partition) == [b"in-1-day"]
    clock.advance(2 * DAY_MS - 1)
    next_step = scheduler.step(clock.wall_ms())
    assert fired_values(partition) == [b"in-1-day"]
    assert next_step == clock.wall_ms() + 1  # it wakes exactly when the next is due
    clock.advance(1)
    scheduler.step(clock.wall_ms())
    assert fired_values(partition) == [b"in-1-day", b"in-3-days"]


def test_memory_holds_a_bounded_window_and_everything_fires_once_in_due_order(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    partition = leader(tmp_path, clock)
    scheduler = DelayScheduler(Replicas(partition), clock)
    count = LOAD_MAX * 3
    # Due times within the window, produced in reverse order of due time, in batches.
    for start in range(0, count, 1000):
        produce(
            partition,
            scheduler,
            clock,
            [(b"%d" % i, 1000 + (count - i)) for i in range(start, start + 1000)],
        )
    scheduler.step(clock.wall_ms())
    assert scheduler.loaded <= 2 * LOAD_MAX
    highest_loaded = scheduler.loaded
    while scheduler.fired_records < count:  # the log is read once, at the end
        clock.advance(100)
        scheduler.step(clock.wall_ms())
        highest_loaded = max(highest_loaded, scheduler.loaded)
        assert clock.wall_ms() < 1_700_000_000_000 + WINDOW_MS + 10 * count
    assert highest_loaded <= 2 * LOAD_MAX
    values = fired_values(partition)
    assert values == [b"%d" % i for i in reversed(range(count))]


def test_a_follower_does_not_fire_and_a_new_leader_does(tmp_path: Path) -> None:
    clock = ManualClock()
    partition = leader(tmp_path, clock)
    scheduler = DelayScheduler(Replicas(partition), clock)
    produce(partition, scheduler, clock, [(b"a", 500)])
    scheduler.step(clock.wall_ms())
    partition.update_state(
        PartitionState(replicas=(0, 1), leader=1, leader_epoch=1, isr=(0, 1), version=1)
    )
    clock.advance(1000)
    scheduler.step(clock.wall_ms())
    assert fired_values(partition) == []
    partition.update_state(
        PartitionState(replicas=(0, 1), leader=0, leader_epoch=2, isr=(0,), version=2)
    )
    scheduler.step(clock.wall_ms())
    assert fired_values(partition) == []  # not noticed before the next look at leaders
    scheduler.wake()  # what the broker does when it applies new metadata
    scheduler.step(clock.wall_ms())
    assert fired_values(partition) == [b"a"]
    clock.advance(1000)
    scheduler.step(clock.wall_ms())
    assert fired_values(partition) == [b"a"]


def test_a_commit_arms_records_that_were_already_due(tmp_path: Path) -> None:
    clock = ManualClock()
    partition = leader(tmp_path, clock)
    scheduler = DelayScheduler(Replicas(partition), clock)
    produce(
        partition,
        scheduler,
        clock,
        [(b"in-txn", 100)],
        producer_id=4,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    clock.advance(1000)
    scheduler.step(clock.wall_ms())
    assert fired_values(partition) == []
    partition.append_marker(producer_id=4, producer_epoch=0, committed=True, coordinator_epoch=0)
    scheduler.step(clock.wall_ms())
    assert fired_values(partition) == [b"in-txn"]


def test_a_replaced_record_does_not_fire_even_once_loaded(tmp_path: Path) -> None:
    clock = ManualClock()
    partition = leader(tmp_path, clock)
    scheduler = DelayScheduler(Replicas(partition), clock)
    produce(partition, scheduler, clock, [(b"old", 300)], schedule_id=b"s")
    scheduler.step(clock.wall_ms())
    assert scheduler.loaded == 1
    produce(partition, scheduler, clock, [(b"new", 600)], schedule_id=b"s")
    clock.advance(1000)
    scheduler.step(clock.wall_ms())
    assert fired_values(partition) == [b"new"]


def test_records_parked_faster_than_they_fire_stay_bounded_in_memory(tmp_path: Path) -> None:
    clock = ManualClock()
    partition = leader(tmp_path, clock)
    scheduler = DelayScheduler(Replicas(partition), clock)
    produce(partition, scheduler, clock, [(b"x", 20_000)])
    scheduler.step(clock.wall_ms())  # the window is loaded: later records are pushed
    for batch in range(30):
        produce(partition, scheduler, clock, [(b"%d-%d" % (batch, i), 1000) for i in range(1000)])
        assert scheduler.loaded <= 2 * LOAD_MAX + 1000
    clock.advance(1000)
    while len(fired_values(partition)) < 30_000:
        scheduler.step(clock.wall_ms())
    assert len(set(fired_values(partition))) == 30_000


def test_retention_keeps_a_pending_record_until_it_is_parked_again(tmp_path: Path) -> None:
    clock = ManualClock()
    config = TopicConfig(retention_ms=60_000, file_delete_delay_ms=0)
    log = PartitionLog.create(tmp_path / "jobs-0", config, clock)
    state = PartitionState(replicas=(0,), leader=0, leader_epoch=0, isr=(0,), version=0)
    partition = Partition(TOPIC_PARTITION, log, state, 0, Purgatory(), clock)
    scheduler = DelayScheduler(Replicas(partition), clock)
    produce(partition, scheduler, clock, [(b"in-2-days", 2 * DAY_MS)])
    log.roll()
    plain = build_batch([RecordInput(None, b"plain", timestamp_ms=clock.wall_ms())])
    partition.append(bytearray(plain), acks=1)
    log.roll()
    clock.advance(DAY_MS)
    assert log.apply_retention() == 0  # the parked record's segment must stay
    assert park_again_before_retention(partition, clock.wall_ms()) == 1
    assert log.apply_retention() == 2
    assert log.log_start_offset == 2 and log.delays.counts().pending == 1
    assert park_again_before_retention(partition, clock.wall_ms()) == 0
    clock.advance(DAY_MS)
    scheduler.step(clock.wall_ms())
    fired = [
        record
        for batch in decode_batches(b"".join(s.read() for s in log.read(2, 1 << 20).slices))
        if not batch.header.is_control
        for record in batch.records
    ]
    assert [record.value for record in fired] == [b"in-2-days"]
    assert dict(fired[0].headers)["x-sluice-delayed-from"] == b"2"  # its parked copy


def test_records_deleted_with_delete_records_are_not_delivered(tmp_path: Path) -> None:
    clock = ManualClock()
    partition = leader(tmp_path, clock)
    scheduler = DelayScheduler(Replicas(partition), clock)
    produce(partition, scheduler, clock, [(b"gone", 100), (b"also-gone", 200)])
    produce(partition, scheduler, clock, [(b"stays", 300)])
    scheduler.step(clock.wall_ms())
    partition.log.delete_records_before(2)
    clock.advance(1000)
    scheduler.step(clock.wall_ms())
    assert fired_values(partition) == [b"stays"]
