"""A broker whose disk fails: it stops with one clear line, a non-zero status and no
clean-shutdown marker, and the next start recovers without losing acknowledged data.

The faults are real ones the kernel hands to the real broker process:

- A failed fsync: the sandboxes these tests run in have no device-mapper (no ``error``
  or ``flakey`` target), so a small C shim (``native/disk_faults.c``), compiled here
  with gcc and loaded with LD_PRELOAD, makes the first fsync()/fdatasync() on a file in
  the broker's data directory return EIO once a trigger file exists. The broker's own
  code path (Python's ``os.fdatasync`` → the C library) sees exactly what a failing disk
  returns; later fsyncs succeed, as they do on Linux once the error has been reported.
- A disk that turns read-only under a running broker: a read-only remount is refused
  while files are open for writing, so the same shim makes every write and every open
  for writing fail with EROFS, as after the kernel remounts a filesystem read-only on
  an error. A data directory that is read-only at start is a real read-only bind mount.
- A full disk: a real tmpfs of 2 MiB.

Mounting needs root (CAP_SYS_ADMIN); those tests are skipped without it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess, BrokerStartError
from client_helpers import (
    DeliveryFailedError,
    consume_exactly,
    create_topic,
    produce_and_flush,
    producer_config,
)
from confluent_kafka import KafkaException, Producer
from disk_faults import FLUSH_MS, faulty_broker

from sluice.storage.log import PARTITION_CHECKPOINT_NAME

CLEAN_SHUTDOWN_MARKER = ".clean-shutdown"
EXIT_DEADLINE_S = 30.0


def wait_for_exit(broker: BrokerProcess, timeout_s: float = EXIT_DEADLINE_S) -> int:
    """Poll until the broker process has ended on its own; its exit status."""
    deadline = time.monotonic() + timeout_s
    while broker.is_running and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the process with a deadline
    assert not broker.is_running, f"the broker still runs {timeout_s}s later:\n{broker.log_tail()}"
    exit_code = broker.stop()
    assert exit_code is not None
    return exit_code


def assert_one_line_fatal_error(log_text: str, *words: str) -> str:
    """The log ends with exactly one ``Error:`` line holding ``words``, and has no
    traceback anywhere."""
    assert "Traceback" not in log_text, log_text
    error_lines = [line for line in log_text.splitlines() if line.startswith("Error: ")]
    assert len(error_lines) == 1, log_text
    for word in words:
        assert word in error_lines[0], error_lines[0]
    return error_lines[0]


def test_failed_fsync_stops_the_broker_without_the_marker_and_the_next_start_recovers(
    tmp_path: Path, disk_faults_shim: Path, topic: str
) -> None:
    data_dir = tmp_path / "data"
    trigger = tmp_path / "fault-now"
    broker = faulty_broker(data_dir, disk_faults_shim, "fsync-eio", trigger)
    broker.start()
    try:
        create_topic(broker.bootstrap, topic)
        producer = Producer(producer_config(broker.bootstrap, acks="all"))
        before = produce_and_flush(
            producer, topic, [{"value": b"before-%d" % i} for i in range(20)]
        )
        trigger.touch()
        after = produce_and_flush(producer, topic, [{"value": b"after-%d" % i} for i in range(20)])
        exit_code = wait_for_exit(broker)
    finally:
        broker.stop()

    log_text = broker.log_text()
    assert exit_code != 0, log_text
    assert not (data_dir / CLEAN_SHUTDOWN_MARKER).exists(), log_text
    assert_one_line_fatal_error(log_text, "fsync", f"{topic}-0", "Input/output error")

    broker.environment.clear()
    broker.start()
    try:
        assert "no clean-shutdown marker: recovering" in broker.log_text().split("start #2")[1]
        acknowledged = [(d.offset, d.value) for d in before + after]
        messages = consume_exactly(broker.bootstrap, [(topic, 0)], len(acknowledged))
        assert [(m.offset(), m.value()) for m in messages] == acknowledged
    finally:
        assert broker.stop() == 0
    assert (data_dir / CLEAN_SHUTDOWN_MARKER).exists()


def test_failed_fsync_of_a_checkpoint_written_off_the_loop_stops_the_broker(
    tmp_path: Path, disk_faults_shim: Path, topic: str
) -> None:
    """The flusher writes the partition checkpoint on a worker thread: its failed fsync
    is as fatal as on the loop, names the partition, and loses nothing acknowledged."""
    data_dir = tmp_path / "data"
    trigger = tmp_path / "fault-now"
    broker = faulty_broker(
        data_dir,
        disk_faults_shim,
        "fsync-eio",
        trigger,
        environment={"DISK_FAULT_SUFFIX": f"/{topic}-0/{PARTITION_CHECKPOINT_NAME}.tmp"},
    )
    broker.start()
    try:
        create_topic(broker.bootstrap, topic)
        trigger.touch()
        producer = Producer(producer_config(broker.bootstrap, acks="all"))
        acknowledged = produce_and_flush(
            producer, topic, [{"value": b"value-%d" % i} for i in range(20)]
        )
        exit_code = wait_for_exit(broker)
    finally:
        broker.stop()

    log_text = broker.log_text()
    assert exit_code != 0, log_text
    assert not (data_dir / CLEAN_SHUTDOWN_MARKER).exists(), log_text
    assert_one_line_fatal_error(log_text, "checkpoints", f"{topic}-0", "Input/output error")

    broker.environment.clear()
    broker.start()
    try:
        messages = consume_exactly(broker.bootstrap, [(topic, 0)], len(acknowledged))
        assert [(m.offset(), m.value()) for m in messages] == [
            (d.offset, d.value) for d in acknowledged
        ]
    finally:
        assert broker.stop() == 0


def test_failed_fsync_before_an_acknowledgement_stops_the_broker(
    tmp_path: Path, disk_faults_shim: Path, topic: str
) -> None:
    """flush.ms=0: the broker fsyncs before it acknowledges. A failed fsync there must
    not be answered and then forgotten: KAFKA_STORAGE_ERROR is retriable, the client's
    retry is appended and its fsync succeeds over the lost pages, so the record is
    acknowledged behind a possible hole. It stops the broker like a failed periodic
    flush. The one failing fsync may also be the flusher's, which runs every 100 ms here
    (of the segment on a worker thread, or of a checkpoint): then the produce's own fsync
    must fail too rather than succeed over the lost pages (storage.log.FsyncGuard), or,
    when the failure was another file's, it succeeded for real. Either way, a record
    acknowledged is there after the restart."""
    data_dir = tmp_path / "data"
    trigger = tmp_path / "fault-now"
    broker = faulty_broker(data_dir, disk_faults_shim, "fsync-eio", trigger)
    broker.start()
    try:
        create_topic(broker.bootstrap, topic, config={"flush.ms": "0"})
        producer = Producer(producer_config(broker.bootstrap, acks="all"))
        before = produce_and_flush(producer, topic, [{"value": b"before-%d" % i} for i in range(5)])
        trigger.touch()
        try:
            late = produce_and_flush(producer, topic, [{"value": b"late"}], timeout_s=10)
        except DeliveryFailedError:
            late = []  # not acknowledged
        exit_code = wait_for_exit(broker)
    finally:
        broker.stop()
    log_text = broker.log_text()
    assert exit_code != 0, log_text
    assert not (data_dir / CLEAN_SHUTDOWN_MARKER).exists(), log_text
    # The failed fsync names the partition, or the data directory when it was the
    # flusher's write of the directory's own checkpoints.
    error = assert_one_line_fatal_error(log_text, str(data_dir), "Input/output error")
    assert f"{topic}-0" in error or "could not write to" in error, error

    broker.environment.clear()
    broker.start()
    try:
        acknowledged = before + late
        messages = consume_exactly(broker.bootstrap, [(topic, 0)], len(acknowledged))
        assert [(m.offset(), m.value()) for m in messages][: len(acknowledged)] == [
            (d.offset, d.value) for d in acknowledged
        ]
    finally:
        assert broker.stop() == 0


@contextlib.contextmanager
def mounted(arguments: list[str], target: Path) -> Iterator[None]:
    """``mount arguments target`` for the duration; skips the test when not allowed."""
    result = subprocess.run(
        ["mount", *arguments, str(target)], check=False, capture_output=True, text=True
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount here: {result.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


def test_read_only_data_dir_is_one_line_and_no_marker(tmp_path: Path, topic: str) -> None:
    """A data directory with data, then made read-only (a read-only bind mount of it):
    the broker refuses to start with one line naming the directory and the cause."""
    source = tmp_path / "data-rw"
    broker = BrokerProcess(source)
    broker.start()
    try:
        create_topic(broker.bootstrap, topic)
        produce_and_flush(Producer(producer_config(broker.bootstrap)), topic, [{"value": b"v"}])
    finally:
        assert broker.stop() == 0
    (source / CLEAN_SHUTDOWN_MARKER).unlink()  # as after a crash: the start must recover

    read_only = tmp_path / "data-ro"
    read_only.mkdir()
    with mounted(["--bind", "-o", "ro", str(source)], read_only):
        broker_on_read_only = BrokerProcess(read_only, port=broker.port)
        with pytest.raises(BrokerStartError):
            broker_on_read_only.start()
        log_text = broker_on_read_only.log_text()
        assert broker_on_read_only.last_exit_code not in (0, None), log_text
        assert_one_line_fatal_error(log_text, str(read_only), "Read-only file system")
        assert not (read_only / CLEAN_SHUTDOWN_MARKER).exists()


def test_disk_turning_read_only_ends_the_broker_with_one_line_and_no_marker(
    tmp_path: Path, disk_faults_shim: Path, topic: str
) -> None:
    data_dir = tmp_path / "data"
    trigger = tmp_path / "fault-now"
    broker = faulty_broker(data_dir, disk_faults_shim, "read-only", trigger)
    broker.start()
    try:
        create_topic(broker.bootstrap, topic)
        producer = Producer(producer_config(broker.bootstrap, acks="all"))
        before = produce_and_flush(
            producer, topic, [{"value": b"before-%d" % i} for i in range(20)]
        )
        trigger.touch()
        with pytest.raises(AssertionError):  # not acknowledged, whichever way it fails
            produce_and_flush(producer, topic, [{"value": b"refused"}], timeout_s=10)
    finally:
        exit_code = broker.stop()
    log_text = broker.log_text()
    assert exit_code not in (0, None), log_text
    assert not (data_dir / CLEAN_SHUTDOWN_MARKER).exists(), log_text
    assert_one_line_fatal_error(log_text, "Read-only file system", str(data_dir))

    broker.environment.clear()
    broker.start()
    try:
        assert "no clean-shutdown marker: recovering" in broker.log_text().split("start #2")[1]
        messages = consume_exactly(broker.bootstrap, [(topic, 0)], len(before))
        assert [(m.offset(), m.value()) for m in messages] == [(d.offset, d.value) for d in before]
    finally:
        assert broker.stop() == 0


def test_full_disk_ends_the_broker_with_one_line_and_no_marker(tmp_path: Path, topic: str) -> None:
    """The data directory is a 2 MiB tmpfs. Producing until it is full gives the
    producer errors; stopping the broker then cannot close its logs: it must end with
    one clear line, a non-zero status and no marker, never a traceback. Once the disk has
    room again (the tmpfs is grown), the next start recovers every acknowledged record."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    with mounted(["-t", "tmpfs", "-o", "size=2m", "tmpfs"], data_dir):
        broker = BrokerProcess(
            data_dir,
            overrides={"offsets.topic.num.partitions": "1", "log.flush.interval.ms": str(FLUSH_MS)},
        )
        broker.start()
        create_topic(broker.bootstrap, topic)
        producer = Producer(producer_config(broker.bootstrap, acks="all"))
        acknowledged: list[tuple[int, bytes | None]] = []
        value = os.urandom(8 * 1024)
        for _ in range(1000):  # 8 MiB at most, four times the disk
            try:
                delivered = produce_and_flush(producer, topic, [{"value": value}], timeout_s=10)
            except (AssertionError, KafkaException):
                break
            acknowledged.extend((d.offset, d.value) for d in delivered)
        else:
            pytest.fail("2 MiB of tmpfs never filled up")
        assert acknowledged, broker.log_text()
        exit_code = broker.stop()
        log_text = broker.log_text()
        assert exit_code not in (0, None), log_text
        assert not (data_dir / CLEAN_SHUTDOWN_MARKER).exists(), log_text
        assert_one_line_fatal_error(log_text, "No space left on device", "free space")

        subprocess.run(["mount", "-o", "remount,size=16m", str(data_dir)], check=True)
        broker.start()
        try:
            assert "recovering" in broker.log_text().split("start #2")[1]
            messages = consume_exactly(broker.bootstrap, [(topic, 0)], len(acknowledged))
            assert [(m.offset(), m.value()) for m in messages] == acknowledged
        finally:
            assert broker.stop() == 0
