"""Storage under abuse: huge topic creations, many segments with few descriptors, a full
disk, damaged segment files. Each test drives a real broker process over real sockets
(raw requests where a client cannot express the input, confluent-kafka to consume).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from client_helpers import consume_exactly
from kafka_wire import (
    KafkaConnection,
    Record,
    api_versions_request,
    create_topics_request,
    encode_batch,
    metadata_request,
    only_partition,
    produce_request,
)
from kio.schema.create_partitions.v1 import request as create_partitions_v1

KAFKA_STORAGE_ERROR = 56
POLICY_VIOLATION = 44
OFFSETS_TOPIC_PARTITIONS = 50


def metadata_errors(connection: KafkaConnection, names: list[str], create: bool) -> dict[str, int]:
    response = connection.request(metadata_request(names, allow_auto_topic_creation=create))
    return {t.name: int(t.error_code) for t in response.topics}


# -- item: a large creation does not stall other clients ------------------------------


def round_trips_during(
    broker: BrokerProcess, action: Callable[[KafkaConnection], Any]
) -> tuple[Any, float, list[float]]:
    """Run ``action`` on one connection while another sends ApiVersions back to back:
    (its result, its duration in seconds, the other connection's round trips)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        with KafkaConnection(broker.host, broker.port, timeout_s=300) as connection:
            started = time.monotonic()
            outcome["result"] = action(connection)
            outcome["seconds"] = time.monotonic() - started

    round_trips: list[float] = []
    worker = threading.Thread(target=run)
    with KafkaConnection(broker.host, broker.port, timeout_s=300) as prober:
        worker.start()
        deadline = time.monotonic() + 300
        while worker.is_alive() and time.monotonic() < deadline and len(round_trips) < 100_000:
            started = time.monotonic()
            prober.request(api_versions_request())
            round_trips.append(time.monotonic() - started)
    worker.join(timeout=300)
    assert not worker.is_alive() and "result" in outcome
    return outcome["result"], outcome["seconds"], round_trips


def assert_not_stalled(what: str, seconds: float, round_trips: list[float]) -> None:
    slowest = max(round_trips)
    print(
        f"{what} took {seconds:.2f}s; {len(round_trips)} ApiVersions round trips "
        f"meanwhile, slowest {slowest * 1000:.0f} ms"
    )
    assert len(round_trips) >= 5
    # Blocked, the loop would hold every round trip for the whole operation; off the
    # loop the slowest one is a fraction of it (a quarter on an idle machine, up to a
    # third with the suite's other worker busy on the same two cores).
    assert slowest < seconds / 2


def test_metadata_creating_2000_topics_does_not_stall_other_clients(broker_factory, topic):
    """A Metadata request auto-creating 2,000 topics used to block the event loop for
    about a minute: every other client's requests waited behind it. Now the creation runs
    off the loop; another client's round trips stay far below the creation's duration,
    and every topic exists when the response that created it arrives."""
    broker = broker_factory()
    names = [f"{topic}-{i}" for i in range(2000)]
    errors, seconds, round_trips = round_trips_during(
        broker, lambda connection: metadata_errors(connection, names, create=True)
    )
    assert errors == dict.fromkeys(names, 0)
    with KafkaConnection(broker.host, broker.port) as connection:
        assert metadata_errors(connection, names, create=False) == dict.fromkeys(names, 0)
    assert_not_stalled("creating 2000 topics by Metadata", seconds, round_trips)


def test_produce_to_500_new_topics_does_not_stall_other_clients(broker_factory, topic):
    """A Produce naming 500 new topics creates them (one batch, off the loop) and appends
    to each; the records are there when the response comes, and another client's round
    trips meanwhile stay far below the request's duration."""
    broker = broker_factory()
    names = [f"{topic}-{i}" for i in range(500)]
    template = produce_request(names[0], 0, encode_batch([Record(b"k", b"v")]))
    request = type(template)(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=120),
        topic_data=tuple(
            type(template.topic_data[0])(
                name=name, partition_data=template.topic_data[0].partition_data
            )
            for name in names
        ),
    )
    response, seconds, round_trips = round_trips_during(
        broker, lambda connection: connection.request(request)
    )
    outcome = {
        r.name: [(int(p.error_code), int(p.base_offset)) for p in r.partition_responses]
        for r in response.responses
    }
    assert outcome == {name: [(0, 0)] for name in names}
    assert_not_stalled("a Produce to 500 new topics", seconds, round_trips)


# -- item: bounded descriptors, partition limit ---------------------------------------


def test_partitions_past_max_broker_partitions_are_refused_with_a_clear_error(
    broker_factory, topic
):
    broker = broker_factory({"max.broker.partitions": str(OFFSETS_TOPIC_PARTITIONS + 10)})
    with KafkaConnection(broker.host, broker.port) as connection:
        refused = only_topic(connection.request(create_topics_request(topic, 11)))
        assert int(refused.error_code) == POLICY_VIOLATION
        assert "max.broker.partitions=60" in refused.error_message
        fitting = only_topic(connection.request(create_topics_request(topic, 8)))
        assert int(fitting.error_code) == 0
        grow = create_partitions_v1.CreatePartitionsRequest(
            topics=(
                create_partitions_v1.CreatePartitionsTopic(name=topic, count=11, assignments=None),
            ),
            timeout=datetime.timedelta(seconds=10),
            validate_only=False,
        )
        grown = connection.request(grow).results[0]
        assert int(grown.error_code) == POLICY_VIOLATION
        assert "max.broker.partitions" in grown.error_message
        assert metadata_errors(connection, [f"{topic}-a", f"{topic}-b"], create=True) == {
            f"{topic}-a": 0,
            f"{topic}-b": 0,
        }
        assert metadata_errors(connection, [f"{topic}-c"], create=True) == {
            f"{topic}-c": POLICY_VIOLATION
        }
        assert metadata_errors(connection, [f"{topic}-c"], create=False) == {f"{topic}-c": 3}


def only_topic(response: Any) -> Any:
    (entry,) = response.topics
    return entry


class LimitedFilesBroker(BrokerProcess):
    """A broker whose process may open at most ``open_files`` descriptors, soft and hard
    (so the broker cannot raise it), set with prlimit(1)."""

    def __init__(self, *args: Any, open_files: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.open_files = open_files

    def command(self) -> list[str]:
        limit = f"--nofile={self.open_files}:{self.open_files}"
        return ["prlimit", limit, "--", *super().command()]


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_restart_with_more_segments_than_the_open_file_limit(tmp_path, topic):
    """Every segment used to keep its files open: a broker with more segments than its
    open-file limit could not even start again. Segments now open lazily and an LRU
    closes idle ones, so it restarts and serves every record within a low limit."""
    batches = 400
    data_dir = tmp_path / "data"
    broker = BrokerProcess(data_dir, overrides={"log.segment.bytes": "200"})
    broker.start()
    try:
        with KafkaConnection(broker.host, broker.port) as connection:
            assert (
                int(only_topic(connection.request(create_topics_request(topic, 1))).error_code) == 0
            )
            for i in range(batches):
                batch = encode_batch([Record(b"k", f"value-{i:04}".encode() * 8)])
                answer = only_partition(connection.request(produce_request(topic, 0, batch)))
                assert int(answer.error_code) == 0 and int(answer.base_offset) == i
    finally:
        broker.stop()
    segments = list((data_dir / f"{topic}-0").glob("*.log"))
    open_files = 256
    assert len(segments) > open_files
    limited = LimitedFilesBroker(data_dir, port=broker.port, open_files=open_files)
    limited.start()
    exit_codes: list[int | None] = []
    try:
        messages = consume_exactly(limited.bootstrap, [(topic, 0)], batches, timeout_s=120)
        assert [m.offset() for m in messages] == list(range(batches))
        assert messages[-1].value() == f"value-{batches - 1:04}".encode() * 8
        descriptors = open_descriptors(limited.pid)
        print(f"{len(segments)} segments served with {descriptors} descriptors open")
        assert descriptors < open_files * 3 // 4
    finally:
        exit_codes.append(limited.stop())
    assert exit_codes == [0]


# -- item: a full disk ----------------------------------------------------------------


@contextlib.contextmanager
def small_filesystem(path: Path, size_bytes: int, inodes: int | None = None) -> Iterator[Path]:
    """A real tmpfs of ``size_bytes`` (and at most ``inodes`` files) mounted at ``path``
    (needs root)."""
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size_bytes}" + (f",nr_inodes={inodes}" if inodes else "")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(filesystem: Path, size_bytes: int) -> Path:
    """Write a file until the filesystem of ``size_bytes`` is full (ENOSPC); return it."""
    filler = filesystem / "filler"
    chunk = b"\0" * 65536
    with filler.open("wb", buffering=0) as out, contextlib.suppress(OSError):
        for _ in range(size_bytes // len(chunk) + 16):
            out.write(chunk)
    with pytest.raises(OSError), (filesystem / "probe").open("wb", buffering=0) as probe:
        probe.write(chunk)
    return filler


def test_full_disk_answers_kafka_storage_error_and_leaves_no_ghost_topic(tmp_path, topic):
    disk_bytes = 8 * 1024 * 1024
    with small_filesystem(tmp_path / "disk", disk_bytes) as disk:
        broker = BrokerProcess(disk / "data")
        broker.start()
        exit_codes: list[int | None] = []
        try:
            filler = fill(disk, disk_bytes)
            created_name, auto_name = f"{topic}-created", f"{topic}-auto"
            with KafkaConnection(broker.host, broker.port) as connection:
                refused = only_topic(connection.request(create_topics_request(created_name, 3)))
                assert int(refused.error_code) == KAFKA_STORAGE_ERROR
                assert metadata_errors(connection, [auto_name], create=True) == {
                    auto_name: KAFKA_STORAGE_ERROR
                }
                # No ghost: what CreateTopics refused, Metadata does not list.
                assert metadata_errors(connection, [created_name, auto_name], create=False) == {
                    created_name: 3,
                    auto_name: 3,
                }
                leftovers = [p.name for p in (disk / "data").iterdir() if p.name.startswith(topic)]
                assert leftovers == []
                filler.unlink()
                again = only_topic(connection.request(create_topics_request(created_name, 3)))
                assert int(again.error_code) == 0
                assert metadata_errors(connection, [auto_name], create=True) == {auto_name: 0}
            assert broker.is_running
        finally:
            exit_codes.append(broker.stop())
        assert exit_codes == [0]
        broker.start()
        try:
            with KafkaConnection(broker.host, broker.port) as connection:
                assert metadata_errors(connection, [created_name, auto_name], create=False) == {
                    created_name: 0,
                    auto_name: 0,
                }
        finally:
            broker.stop()


def test_partition_directories_of_a_failed_creation_are_removed(tmp_path, topic):
    """A filesystem out of inodes fails a creation half way through its partition
    directories: the request gets KAFKA_STORAGE_ERROR, and what was made is removed (the
    inodes come back, so a smaller topic fits afterwards)."""
    with small_filesystem(tmp_path / "disk", 8 * 1024 * 1024, inodes=300) as disk:
        broker = BrokerProcess(disk / "data")
        broker.start()
        exit_codes: list[int | None] = []
        try:
            with KafkaConnection(broker.host, broker.port) as connection:
                refused = only_topic(connection.request(create_topics_request(topic, 400)))
                assert int(refused.error_code) == KAFKA_STORAGE_ERROR
                leftovers = [p.name for p in (disk / "data").iterdir() if p.name.startswith(topic)]
                assert leftovers == []
                assert metadata_errors(connection, [topic], create=False) == {topic: 3}
                fitting = only_topic(connection.request(create_topics_request(topic, 20)))
                assert int(fitting.error_code) == 0
            assert broker.is_running
        finally:
            exit_codes.append(broker.stop())
        assert exit_codes == [0]


# -- item: damaged segments -----------------------------------------------------------

RECORDS_PER_BATCH = 3
BATCHES = 40


def write_segments(broker: BrokerProcess, topic: str) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        assert int(only_topic(connection.request(create_topics_request(topic, 1))).error_code) == 0
        for i in range(BATCHES):
            records = [
                Record(b"k", f"batch-{i:03}-record-{j}".encode() * 4)
                for j in range(RECORDS_PER_BATCH)
            ]
            answer = only_partition(
                connection.request(produce_request(topic, 0, encode_batch(records)))
            )
            assert int(answer.error_code) == 0


def batch_positions(path: Path) -> list[tuple[int, int, int]]:
    """(position, size, base offset) of each batch in a segment file."""
    data = path.read_bytes()
    found = []
    position = 0
    while position + 12 <= len(data):
        base_offset = int.from_bytes(data[position : position + 8], "big", signed=True)
        size = 12 + int.from_bytes(data[position + 8 : position + 12], "big", signed=True)
        found.append((position, size, base_offset))
        position += size
    return found


@pytest.mark.parametrize("damage", ["torn_tail", "bad_magic"])
def test_damaged_closed_segment_is_served_up_to_its_last_whole_batch(broker_factory, topic, damage):
    """A closed segment whose last batch is torn (or has a header that does not parse):
    a fetch spanning it used to frame the torn bytes with the next segment's data, or
    fail with a bare KAFKA_STORAGE_ERROR. Now the whole batches before the damage are
    served, then the next segment from its base offset, as Kafka does; the damage is
    logged once with the file and position."""
    broker = broker_factory({"log.segment.bytes": "1200"})
    write_segments(broker, topic)
    assert broker.stop() == 0  # clean: the next start trusts the files
    directory = broker.data_dir / f"{topic}-0"
    segments = sorted(directory.glob("*.log"))
    assert len(segments) >= 4
    damaged = segments[1]
    position, size, lost_base = batch_positions(damaged)[-1]
    if damage == "torn_tail":
        os.truncate(damaged, position + size // 2)
    else:
        with damaged.open("r+b") as segment_file:
            segment_file.seek(position + 16)  # magic
            segment_file.write(b"\x07")
    broker.start()
    total = BATCHES * RECORDS_PER_BATCH
    expected = [o for o in range(total) if not lost_base <= o < lost_base + RECORDS_PER_BATCH]
    for _ in range(2):  # twice: the damage is logged once, not once per fetch
        messages = consume_exactly(broker.bootstrap, [(topic, 0)], len(expected), extra_wait_s=1)
        assert [m.offset() for m in messages] == expected
        for message in messages:
            batch_index = message.offset() // RECORDS_PER_BATCH
            assert message.value().startswith(f"batch-{batch_index:03}-".encode())
    log_lines = [line for line in broker.log_text().splitlines() if "damaged at position" in line]
    assert len(log_lines) == 1, log_lines
    assert damaged.name in log_lines[0] and f"position {position}" in log_lines[0]
