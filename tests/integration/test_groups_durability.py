"""Committed offsets and groups outlive the broker process: a clean restart (SIGTERM) and
a crash (SIGKILL) both bring back every committed offset from ``__consumer_offsets``,
which is itself a compacted topic that ordinary tools (kcat) can read.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import time
from collections.abc import Callable

import pytest
from broker_process import BrokerProcess
from client_helpers import (
    CLIENT_TIMEOUT_S,
    admin_client,
    create_topic,
    produce_and_flush,
    producer_config,
    unique_group_id,
)
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupState,
    Producer,
    TopicPartition,
)
from group_workers import (
    ContinuousProducer,
    all_processed,
    duplicates,
    split_evenly,
)

OFFSETS_TOPIC = "__consumer_offsets"
SESSION_TIMEOUT_MS = 6_000
HEARTBEAT_INTERVAL_MS = 1_000
GROUP_FORM_TIMEOUT_S = 30.0
KCAT = shutil.which("kcat") or shutil.which("kafkacat")

GROUP_BROKER_SETTINGS = {"group.initial.rebalance.delay.ms": "0"}

RESTARTS: dict[str, Callable[[BrokerProcess], None]] = {
    "sigterm": BrokerProcess.restart,
    "sigkill": BrokerProcess.kill9,
}


def group_consumer(bootstrap: str, group: str, **overrides) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            "fetch.wait.max.ms": 100,
            "socket.timeout.ms": 10_000,
            **overrides,
        }
    )


def first_offsets_read(consumer: Consumer, partitions: int, timeout_s: float) -> dict[int, int]:
    """Poll until a message of every partition arrived; the first offset of each."""
    first: dict[int, int] = {}
    deadline = time.monotonic() + timeout_s
    while len(first) < partitions and time.monotonic() < deadline:
        for message in consumer.consume(100, 0.2):
            assert message.error() is None, f"consumer error: {message.error()}"
            first.setdefault(message.partition(), message.offset())
    assert len(first) == partitions, f"read only partitions {sorted(first)} in {timeout_s}s"
    return first


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list:
    consumer = group_consumer(bootstrap, group)
    try:
        return [
            (tp.offset, tp.metadata)
            for tp in consumer.committed(
                [TopicPartition(topic, p) for p in range(partitions)], timeout=CLIENT_TIMEOUT_S
            )
        ]
    finally:
        consumer.close()


def listed_groups(bootstrap: str) -> dict[str, ConsumerGroupState]:
    admin = admin_client(bootstrap)  # must outlive the future
    result = admin.list_consumer_groups(request_timeout=15).result(timeout=CLIENT_TIMEOUT_S)
    assert not result.errors, result.errors
    return {listing.group_id: listing.state for listing in result.valid}


@pytest.mark.parametrize("restart", list(RESTARTS))
def test_committed_offsets_survive_a_broker_restart_and_the_group_resumes_there(
    broker_factory, topic, restart
):
    broker = broker_factory(GROUP_BROKER_SETTINGS)
    create_topic(broker.bootstrap, topic, num_partitions=2)
    producer = Producer(producer_config(broker.bootstrap, acks="all"))
    produce_and_flush(
        producer, topic, [{"partition": i % 2, "value": f"{i}".encode()} for i in range(200)]
    )
    group = unique_group_id()
    member = group_consumer(broker.bootstrap, group)
    member.subscribe([topic])
    try:
        first_offsets_read(member, 2, GROUP_FORM_TIMEOUT_S)
        member.commit(
            offsets=[TopicPartition(topic, 0, 37, "p0"), TopicPartition(topic, 1, 61, "p1")],
            asynchronous=False,
        )
    finally:
        member.close()
    assert committed_offsets(broker.bootstrap, group, topic, 2) == [(37, "p0"), (61, "p1")]

    RESTARTS[restart](broker)

    assert committed_offsets(broker.bootstrap, group, topic, 2) == [(37, "p0"), (61, "p1")], (
        f"committed offsets changed across a {restart} restart"
    )
    assert listed_groups(broker.bootstrap).get(group) == ConsumerGroupState.EMPTY, (
        f"the group is not listed as Empty after a {restart} restart"
    )
    resumed = group_consumer(broker.bootstrap, group)
    resumed.subscribe([topic])
    try:
        first = first_offsets_read(resumed, 2, GROUP_FORM_TIMEOUT_S)
    finally:
        resumed.close()
    assert first == {0: 37, 1: 61}, "a new member must resume exactly at the committed offsets"


@pytest.mark.parametrize("restart", list(RESTARTS))
def test_a_running_group_keeps_consuming_across_a_broker_restart_without_reprocessing(
    broker_factory, topic, restart, pool
):
    broker = broker_factory(GROUP_BROKER_SETTINGS)
    partitions = 4
    create_topic(broker.bootstrap, topic, num_partitions=partitions)
    group = unique_group_id()
    members = [
        pool.spawn(
            f"member-{i}",
            bootstrap=broker.bootstrap,
            topic=topic,
            group=group,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        )
        for i in range(2)
    ]
    pool.wait_until(split_evenly(members, partitions), GROUP_FORM_TIMEOUT_S, "a 2/2 split")

    def produce(tag: str) -> dict[tuple[int, int], str]:
        producer = Producer(producer_config(broker.bootstrap, acks="all"))
        delivered = produce_and_flush(
            producer,
            topic,
            [{"partition": i % partitions, "value": f"{tag}-{i}".encode()} for i in range(200)],
        )
        return {(d.partition, d.offset): (d.value or b"").decode() for d in delivered}

    before = produce("before")
    pool.wait_until(all_processed(pool, before), CLIENT_TIMEOUT_S, "messages before the restart")
    pool.wait_until(
        lambda: sum(m.committed().get(p, 0) for m in members for p in range(partitions)) == 200,
        CLIENT_TIMEOUT_S,
        "all processed messages committed",
    )

    RESTARTS[restart](broker)

    after = produce("after")
    pool.wait_until(all_processed(pool, after), 60.0, "messages after the restart")
    expected = {**before, **after}
    processed = [p for p in pool.processed() if (p.partition, p.offset) in expected]
    repeated = duplicates(processed)
    assert not repeated, (
        f"committed messages were processed again after a {restart} restart: "
        f"{sorted(repeated)[:10]}"
    )
    assert {(p.partition, p.offset): p.value for p in processed} == expected


@pytest.mark.parametrize("restart", list(RESTARTS))
def test_a_broker_restart_mid_stream_loses_no_message_and_no_acknowledged_commit(
    broker_factory, topic, restart, pool
):
    """Producer and group keep running while the broker restarts. Afterwards every
    delivered message was processed, and a message processed twice lies at or beyond
    the last commit acknowledged for its partition before the restart."""
    broker = broker_factory(GROUP_BROKER_SETTINGS)
    partitions = 4
    create_topic(broker.bootstrap, topic, num_partitions=partitions)
    group = unique_group_id()
    members = [
        pool.spawn(
            f"member-{i}",
            bootstrap=broker.bootstrap,
            topic=topic,
            group=group,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        )
        for i in range(2)
    ]
    pool.wait_until(split_evenly(members, partitions), GROUP_FORM_TIMEOUT_S, "a 2/2 split")

    with ContinuousProducer(broker.bootstrap, topic, partitions) as producer:
        pool.wait_until(
            lambda: all(len(m.of_kind("committed")) >= 10 for m in members),
            CLIENT_TIMEOUT_S,
            "each member to commit ten times",
        )
        with pool.lock:
            acknowledged = {
                p: max(m.committed().get(p, 0) for m in members) for p in range(partitions)
            }
        RESTARTS[restart](broker)
        marks = {m.name: len(m.events) for m in members}
        pool.wait_until(
            lambda: all(len(m.of_kind("committed", since=marks[m.name])) >= 10 for m in members),
            60.0,
            "each member to commit ten times after the restart",
        )
    delivered = producer.stop()

    pool.wait_until(all_processed(pool, delivered), 60.0, "every delivered message processed")
    processed = [p for p in pool.processed() if (p.partition, p.offset) in delivered]
    assert all(p.value == delivered[(p.partition, p.offset)] for p in processed)
    for (partition, offset), items in duplicates(processed).items():
        assert offset >= acknowledged[partition], (
            f"({partition}, {offset}) was processed again by {[i.worker for i in items]} "
            f"although offset {acknowledged[partition]} had been committed before the "
            f"{restart} restart"
        )


# ── __consumer_offsets itself ──────────────────────────────────────────────────────────


def offset_commit_key(key: bytes) -> tuple[str, str, int] | None:
    """(group, topic, partition) of an offset commit record key (versions 0 and 1);
    None for other records (group metadata is version 2)."""
    (version,) = struct.unpack_from(">h", key, 0)
    if version not in (0, 1):
        return None
    position = 2
    strings = []
    for _ in range(2):
        (length,) = struct.unpack_from(">h", key, position)
        position += 2
        strings.append(key[position : position + length].decode())
        position += length
    (partition,) = struct.unpack_from(">i", key, position)
    return strings[0], strings[1], partition


def committed_offset_in_value(value: bytes) -> int:
    """Every offset commit value version (0–3) starts with int16 version, int64 offset."""
    return struct.unpack_from(">q", value, 2)[0]


def kcat_offsets_topic_records(broker: BrokerProcess) -> list[tuple[int, int, int]]:
    """(offset, key length, value length) of every record of __consumer_offsets partition
    0, read by kcat from the beginning to the end."""
    assert KCAT is not None
    completed = subprocess.run(
        [
            KCAT,
            "-b",
            broker.bootstrap,
            "-X",
            "socket.timeout.ms=10000",
            "-C",
            "-t",
            OFFSETS_TOPIC,
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%o %K %S\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, f"kcat failed ({completed.returncode}): {completed.stderr}"
    return [tuple(map(int, line.split())) for line in completed.stdout.splitlines()]


def read_to_end(bootstrap: str, topic: str, partition: int) -> list:
    """Every message of the partition from the beginning up to its high watermark."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_group_id(),
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        _low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=CLIENT_TIMEOUT_S
        )
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        messages = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while (not messages or messages[-1].offset() < high - 1) and high > 0:
            assert time.monotonic() < deadline, f"did not reach offset {high - 1} of {topic}"
            for message in consumer.consume(1000, 0.2):
                assert message.error() is None, f"consumer error: {message.error()}"
                messages.append(message)
        return messages
    finally:
        consumer.close()


def offsets_topic_commits(broker: BrokerProcess, group: str) -> list[tuple[int, int | None]]:
    """(record offset, committed offset or None for a tombstone) of ``group``'s offset
    commit records in __consumer_offsets partition 0, decoded from the raw records."""
    found = []
    for message in read_to_end(broker.bootstrap, OFFSETS_TOPIC, 0):
        key = offset_commit_key(message.key())
        if key is not None and key[0] == group:
            value = message.value()
            committed = None if value is None else committed_offset_in_value(value)
            found.append((message.offset(), committed))
    return found


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
def test_consumer_offsets_topic_is_compacted_and_keeps_the_last_commit(broker_factory, topic):
    broker = broker_factory(
        {
            **GROUP_BROKER_SETTINGS,
            "offsets.topic.num.partitions": "1",
            "offsets.topic.segment.bytes": "16384",
            "log.cleaner.backoff.ms": "100",
        }
    )
    create_topic(broker.bootstrap, topic, num_partitions=1)
    group = unique_group_id()
    commits = 2_000
    committer = group_consumer(broker.bootstrap, group)
    try:
        for offset in range(1, commits):
            committer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=True)
            if offset % 100 == 0:
                committer.poll(0)  # serves commit callbacks
        committer.commit(offsets=[TopicPartition(topic, 0, commits)], asynchronous=False)
    finally:
        committer.close()

    records_bound = commits // 5
    deadline = time.monotonic() + 60
    records = kcat_offsets_topic_records(broker)
    while len(records) > records_bound and time.monotonic() < deadline:
        records = kcat_offsets_topic_records(broker)
    assert len(records) <= records_bound, (
        f"__consumer_offsets still holds {len(records)} records after {commits} commits of "
        "one key: it was not compacted within 60s"
    )
    assert all(key_bytes > 0 for _offset, key_bytes, _value_bytes in records), (
        "every record of __consumer_offsets has a key"
    )
    assert [offset for offset, *_ in records] == sorted({offset for offset, *_ in records})

    ours = offsets_topic_commits(broker, group)
    assert ours, "no offset commit record of the group survived compaction"
    assert ours[-1][1] == commits, f"the newest commit record holds {ours[-1]}"
    assert committed_offsets(broker.bootstrap, group, topic, 1)[0][0] == commits

    for restart in RESTARTS.values():
        restart(broker)
        assert committed_offsets(broker.bootstrap, group, topic, 1)[0][0] == commits, (
            "a compacted __consumer_offsets must replay to the last commit"
        )
