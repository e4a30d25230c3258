"""Deleting a hosted partition while the broker's background work holds its log: the
deletion waits for the flush lent to a worker thread (which then writes nothing more),
cancels a cleaning, closes the log without writing, renames the directory to Kafka's
``-delete`` name at once and removes it after ``file.delete.delay.ms``. Real logs,
real worker threads, a manual clock."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from pathlib import Path

from sluice.broker.fatal import FatalStorageStop
from sluice.broker.log_maintenance import CHECKPOINT_INTERVAL_MS, LogMaintenance
from sluice.broker.replication.partition import Partition
from sluice.broker.replication.purgatory import Purgatory
from sluice.broker.replication.replica_manager import ReplicaManager
from sluice.cluster.model import PartitionState, TopicMetadata
from sluice.common.clock import ManualClock
from sluice.common.config import BrokerConfig
from sluice.common.ids import TopicPartition
from sluice.protocol.records.builder import RecordInput, build_batch
from sluice.storage.checkpoint import read_offsets_checkpoint, write_file_atomically
from sluice.storage.checkpoint_writer import CheckpointWriter
from sluice.storage.log import PARTITION_CHECKPOINT_NAME
from sluice.storage.partition_dirs import is_deletion_dir_name, remove_deletion_dir

DELETE_DELAY_MS = 60_000
WORKER_DEADLINE_S = 30.0
"""Longest a held worker thread waits for the test (a bound, never a pause)."""
TOPIC_PARTITION = TopicPartition("orders", 0)


def _hosted(
    tmp_path: Path, configs: dict[str, str] | None = None
) -> tuple[ReplicaManager, Partition, ManualClock]:
    clock = ManualClock()
    replicas = ReplicaManager(
        0, tmp_path, clock, Purgatory(), {"file.delete.delay.ms": str(DELETE_DELAY_MS)}
    )
    state = PartitionState(replicas=(0,), leader=0, leader_epoch=0, isr=(0,), version=0)
    topic = TopicMetadata("orders", uuid.uuid4(), {0: state}, configs or {"flush.ms": "0"})
    replicas.install(topic, replicas.create_logs(topic))
    partition = replicas.get(TOPIC_PARTITION)
    return replicas, partition, clock


def _maintenance(tmp_path: Path, replicas: ReplicaManager, clock: ManualClock) -> LogMaintenance:
    stops: list[bool] = []
    fatal = FatalStorageStop(tmp_path, lambda: stops.append(True))
    config = BrokerConfig(data_dir=tmp_path, log_cleaner_io_max_bytes_per_second=1)
    return LogMaintenance(config, clock, replicas, fatal)


def _produce(partition: Partition, batches: int, key_count: int = 1) -> None:
    for n in range(batches):
        records = [RecordInput(b"k%d" % (n % key_count), b"v" * 100)]
        partition.append(bytearray(build_batch(records)), acks=1)


def _file_states(directory: Path) -> dict[str, tuple[int, int]]:
    return {
        name: ((stat := (directory / name).stat()).st_size, stat.st_mtime_ns)
        for name in os.listdir(directory)
    }


def test_a_deletion_waits_for_the_flush_in_flight_which_then_writes_nothing(
    tmp_path: Path,
) -> None:
    asyncio.run(_flush_then_delete(tmp_path))


async def _flush_then_delete(tmp_path: Path) -> None:
    replicas, partition, clock = _hosted(tmp_path)
    maintenance = _maintenance(tmp_path, replicas, clock)
    _produce(partition, 5)
    flushing = asyncio.create_task(maintenance.flush_due())
    while partition.dirty:  # until the flusher took it and lent it to a worker thread
        await asyncio.sleep(0)
    assert replicas.detach(TOPIC_PARTITION) is partition
    files_at_detach = _file_states(tmp_path / "orders-0")

    deleting = asyncio.create_task(replicas.delete_detached([partition]))
    await deleting
    assert flushing.done()  # the deletion came after the flush gave the log back
    assert maintenance._fatal.error is None
    assert not (tmp_path / "orders-0").exists()
    [renamed] = [p for p in tmp_path.iterdir() if is_deletion_dir_name(p.name)]
    assert renamed.name.startswith("orders-0.")
    # Neither the flush's completion nor the close wrote checkpoints or a snapshot.
    assert _file_states(renamed) == files_at_detach

    clock.advance(DELETE_DELAY_MS - 1)
    assert replicas.take_due_removals(clock.monotonic_ms()) == []
    clock.advance(1)
    [due] = replicas.take_due_removals(clock.monotonic_ms())
    assert due.path == renamed and due.open_files  # the segment file, open for reads
    assert remove_deletion_dir(due)
    assert not renamed.exists() and all(file.closed for file in due.open_files)


def test_a_deletion_waits_for_the_checkpoint_write_in_flight_on_a_worker_thread(
    tmp_path: Path,
) -> None:
    asyncio.run(_checkpoint_then_delete(tmp_path))


async def _checkpoint_then_delete(tmp_path: Path) -> None:
    """The flusher's checkpoint job is lent like its fsync: the deletion waits for the
    write held on the worker thread, and renames the directory only once it landed."""
    replicas, partition, clock = _hosted(tmp_path)
    maintenance = _maintenance(tmp_path, replicas, clock)
    started = threading.Event()
    release = threading.Event()

    def held_write(path: Path, data: bytes) -> None:
        if path.name == PARTITION_CHECKPOINT_NAME:
            started.set()
            assert release.wait(WORKER_DEADLINE_S), "the test never released the write"
        write_file_atomically(path, data)

    partition.log.checkpoint_writer = CheckpointWriter(held_write)
    _produce(partition, 5)
    clock.advance(CHECKPOINT_INTERVAL_MS)  # the partition's first checkpoint is due
    flushing = asyncio.create_task(maintenance.flush_due())
    assert await asyncio.to_thread(started.wait, WORKER_DEADLINE_S), "no checkpoint write"
    assert replicas.detach(TOPIC_PARTITION) is partition
    deleting = asyncio.create_task(replicas.delete_detached([partition]))
    returned = asyncio.ensure_future(partition.wait_until_returned())
    for _ in range(100):
        await asyncio.sleep(0)
    assert not returned.done() and not deleting.done(), "the log was taken from the writer"
    assert (tmp_path / "orders-0").exists()

    release.set()
    await deleting
    await flushing
    assert maintenance._fatal.error is None
    [renamed] = [p for p in tmp_path.iterdir() if is_deletion_dir_name(p.name)]
    assert read_offsets_checkpoint(renamed / PARTITION_CHECKPOINT_NAME) == {
        "log_start_offset": 0,
        "high_watermark": 5,
        "recovery_point": 5,
    }


def test_a_deletion_cancels_a_cleaning_in_flight(tmp_path: Path) -> None:
    asyncio.run(_clean_then_delete(tmp_path))


async def _clean_then_delete(tmp_path: Path) -> None:
    replicas, partition, clock = _hosted(
        tmp_path, {"cleanup.policy": "compact", "segment.bytes": "4096"}
    )
    maintenance = _maintenance(tmp_path, replicas, clock)
    _produce(partition, 400, key_count=3)
    partition.log.roll()

    async def clean() -> bool:
        with partition.lent_to_worker_thread():
            return await maintenance.clean(partition.log)

    cleaning = asyncio.create_task(clean())
    while partition.log.cleaning_plan is None:  # planned, and building on a worker thread
        await asyncio.sleep(0)
    assert replicas.detach(TOPIC_PARTITION) is partition
    # The build reads within 1 byte/s: without the cancellation it would take hours.
    await asyncio.wait_for(replicas.delete_detached([partition]), timeout=30)
    assert cleaning.done() and cleaning.result() is False
    [renamed] = [p for p in tmp_path.iterdir() if is_deletion_dir_name(p.name)]
    assert not [name for name in os.listdir(renamed) if name.endswith((".cleaned", ".swap"))]
