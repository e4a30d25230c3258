"""``sluice groups`` run as a user runs it (a subprocess) against a real broker, with real
confluent-kafka consumers as the group's members.

The broker runs with ``group.initial.rebalance.delay.ms=0`` so a group forms as soon as
its first member joins. Consumers either join the group (subscribe: an active member
that holds partitions) or only commit (assign: a "simple consumer" commit outside any
generation, which leaves the group Empty). Every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

import pytest
from broker_process import BrokerProcess
from client_helpers import (
    CLIENT_TIMEOUT_S,
    create_topic,
    produce_and_flush,
    producer_config,
    unique_group_id,
)
from confluent_kafka import Consumer, Message, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import AdminClient

from sluice.client.admin import Admin
from sluice.client.cluster import Cluster
from sluice.client.groups import OffsetAndMetadata
from sluice.common.bookkeeping_groups import BOOKKEEPING_METADATA, SPARK_GROUP_PREFIX
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition

COMMAND_TIMEOUT_S = 60.0
SESSION_TIMEOUT_MS = 6_000
RECORDS_PER_PARTITION = 10
FIRST_TIMESTAMP_MS = 1_704_067_200_000
"""2024-01-01T00:00:00Z: record i of a partition is written with this plus i seconds."""


@pytest.fixture(scope="module")
def broker(fast_groups_broker: BrokerProcess) -> BrokerProcess:
    return fast_groups_broker


@pytest.fixture
def group() -> str:
    return unique_group_id()


# ── running the command ──────────────────────────────────────────────────────────────────


def sluice(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ)
    env["SLUICE_BOOTSTRAP_SERVER"] = broker.bootstrap
    return subprocess.run(
        [sys.executable, "-m", "sluice", *args],
        capture_output=True,
        env=env,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def one_line_error(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout.decode())
    stderr = result.stderr.decode()
    assert "Traceback" not in stderr, stderr
    error_lines = [line for line in stderr.splitlines() if line.startswith("Error: ")]
    assert len(error_lines) == 1, stderr
    return error_lines[0]


def describe(broker: BrokerProcess, group: str, *extra: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(
        ok(sluice(broker, "groups", "describe", group, "--format", "json", *extra))
    )
    return document


def committed(broker: BrokerProcess, group: str) -> dict[tuple[str, int], int | None]:
    return {
        (row["topic"], row["partition"]): row["current_offset"]
        for row in describe(broker, group)["partitions"]
    }


def reset(broker: BrokerProcess, group: str, *args: str) -> str:
    return ok(sluice(broker, "groups", "reset-offsets", group, *args, "--execute"))


# ── records and consumers ────────────────────────────────────────────────────────────────


def topic_with_records(broker: BrokerProcess, topic: str, partitions: int = 2) -> None:
    """``RECORDS_PER_PARTITION`` records in each partition, record i at
    FIRST_TIMESTAMP_MS + i seconds."""
    create_topic(broker.bootstrap, topic, num_partitions=partitions)
    producer = Producer(producer_config(broker.bootstrap, acks="all"))
    produce_and_flush(
        producer,
        topic,
        (
            {
                "value": f"{p}-{i}".encode(),
                "partition": p,
                "timestamp": FIRST_TIMESTAMP_MS + i * 1000,
            }
            for p in range(partitions)
            for i in range(RECORDS_PER_PARTITION)
        ),
    )


def consumer_config(broker: BrokerProcess, group: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.bootstrap,
        "group.id": group,
        "client.id": "cli-groups-test",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": 1_000,
        "socket.timeout.ms": 10_000,
        "fetch.wait.max.ms": 100,
    }


def commit(consumer: Consumer, topic: str, offsets: Mapping[int, int]) -> None:
    consumer.commit(
        offsets=[ConfluentTopicPartition(topic, p, o) for p, o in offsets.items()],
        asynchronous=False,
    )


class GroupMember:
    """A confluent-kafka consumer that joined ``group`` (subscribed to ``topic``) and holds
    all its partitions. Records polled while it waited for them are kept, so that
    :meth:`first_message_of` misses none."""

    def __init__(self, broker: BrokerProcess, group: str, topic: str, partitions: int) -> None:
        self.consumer = Consumer(consumer_config(broker, group))
        self.received: list[Message] = []
        self.consumer.subscribe([topic])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(self.consumer.assignment()) < partitions:
            assert time.monotonic() < deadline, f"no assignment within {CLIENT_TIMEOUT_S}s"
            self._poll()

    def _poll(self) -> None:
        message = self.consumer.poll(0.2)
        if message is not None:
            assert message.error() is None, message.error()
            self.received.append(message)

    def first_message_of(self, topic: str, partition: int) -> Message:
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while time.monotonic() < deadline:
            for message in self.received:
                if (message.topic(), message.partition()) == (topic, partition):
                    return message
            self._poll()
        raise AssertionError(f"nothing from {topic}-{partition} within {CLIENT_TIMEOUT_S}s")

    def commit(self, topic: str, offsets: Mapping[int, int]) -> None:
        commit(self.consumer, topic, offsets)

    @property
    def member_id(self) -> str:
        return str(self.consumer.memberid())

    def close(self) -> None:
        self.consumer.close()


def commit_outside_the_group(
    broker: BrokerProcess, group: str, topic: str, offsets: Mapping[int, int]
) -> None:
    """Committed offsets for ``group`` without joining it (the group stays Empty)."""
    consumer = Consumer(consumer_config(broker, group))
    try:
        consumer.assign([ConfluentTopicPartition(topic, p) for p in offsets])
        commit(consumer, topic, offsets)
    finally:
        consumer.close()


async def alter_offsets(
    broker: BrokerProcess, group: str, offsets: Mapping[TopicPartition, int]
) -> None:
    async with Cluster(broker.bootstrap) as cluster:
        await Admin(cluster).alter_group_offsets(
            group, {tp: OffsetAndMetadata(offset) for tp, offset in offsets.items()}
        )


def wait_for_state(broker: BrokerProcess, group: str, state: str) -> dict[str, Any]:
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while True:
        document = describe(broker, group)
        if document["state"] == state:
            return document
        assert time.monotonic() < deadline, f"group still {document['state']}, not {state}"


# ── tests ────────────────────────────────────────────────────────────────────────────────


def test_an_active_group_is_listed_and_described_with_its_lag(
    broker: BrokerProcess, topic: str, group: str
) -> None:
    topic_with_records(broker, topic)
    consumer = GroupMember(broker, group, topic, partitions=2)
    try:
        consumer.first_message_of(topic, 0)
        consumer.commit(topic, {0: 4, 1: 7})
        member_id = consumer.member_id

        listed = json.loads(ok(sluice(broker, "groups", "list", "--format", "json")))
        assert {
            "group": group,
            "type": "classic",
            "state": "Stable",
            "protocol_type": "consumer",
            "bookkeeping": False,
        } in listed
        table = ok(sluice(broker, "groups", "list"))
        assert table.splitlines()[0].split() == ["GROUP", "TYPE", "STATE", "PROTOCOL", "TYPE"]
        assert [group, "classic", "Stable", "consumer"] in [
            line.split() for line in table.splitlines()
        ]

        document = describe(broker, group)
        assert document["state"] == "Stable"
        assert document["protocol_type"] == "consumer"
        assert document["protocol"] in ("range", "roundrobin", "cooperative-sticky")
        assert document["member_count"] == 1
        rows = {row["partition"]: row for row in document["partitions"]}
        assert [
            (rows[p]["current_offset"], rows[p]["log_end_offset"], rows[p]["lag"]) for p in (0, 1)
        ] == [
            (4, 10, 6),
            (7, 10, 3),
        ]
        assert {row["member_id"] for row in rows.values()} == {member_id}
        assert {row["client_id"] for row in rows.values()} == {"cli-groups-test"}
        assert document["total_lag"] == 9

        text = ok(sluice(broker, "groups", "describe", group))
        assert f"Group: {group}" in text
        assert "state: Stable" in text and "members: 1" in text
        lines = [line.split() for line in text.splitlines()]
        assert [topic, "0", "4", "10", "6", member_id, "cli-groups-test"] == lines[3][:7]
        assert text.rstrip().endswith("total lag: 9")

        members = describe(broker, group, "--members")
        (member,) = members["members"]
        assert member["member_id"] == member_id
        assert member["assignment"] == {topic: [0, 1]}
        members_text = ok(sluice(broker, "groups", "describe", group, "--members"))
        assert member_id in members_text and f"{topic}:0,1" in members_text
    finally:
        consumer.close()
    assert wait_for_state(broker, group, "Empty")["member_count"] == 0


def test_reset_is_a_dry_run_refused_while_active_then_applied(
    broker: BrokerProcess, topic: str, group: str
) -> None:
    topic_with_records(broker, topic)
    consumer = GroupMember(broker, group, topic, partitions=2)
    try:
        consumer.commit(topic, {0: 4, 1: 7})
        dry_run = sluice(
            broker, "groups", "reset-offsets", group, "--topic", f"{topic}:0", "--to-offset", "2"
        )
        plan = ok(dry_run)
        assert plan.splitlines()[0].split() == [
            "TOPIC",
            "PARTITION",
            "CURRENT",
            "OFFSET",
            "NEW",
            "OFFSET",
        ]
        assert plan.splitlines()[1].split() == [topic, "0", "4", "2"]
        assert "Dry run: nothing changed" in plan
        assert "1 active member(s) (state Stable)" in dry_run.stderr.decode()
        assert committed(broker, group) == {(topic, 0): 4, (topic, 1): 7}

        error = one_line_error(
            sluice(
                broker,
                "groups",
                "reset-offsets",
                group,
                "--topic",
                f"{topic}:0",
                "--to-offset",
                "2",
                "--execute",
            )
        )
        assert f"cannot reset the offsets of group {group!r}: it has 1 active member(s)" in error

        # The coordinator refuses too (the command checks first; a consumer may join
        # between its check and its commit).
        with pytest.raises(KafkaError, match=f"group {group!r} has active members") as refused:
            asyncio.run(alter_offsets(broker, group, {TopicPartition(topic, 0): 2}))
        assert refused.value.code == ErrorCode.unknown_member_id
        assert committed(broker, group) == {(topic, 0): 4, (topic, 1): 7}
    finally:
        consumer.close()

    applied = reset(broker, group, "--topic", f"{topic}:0", "--to-offset", "2")
    assert f"Reset the offsets of group {group} for 1 partition(s)." in applied
    assert committed(broker, group) == {(topic, 0): 2, (topic, 1): 7}

    resumed = GroupMember(broker, group, topic, partitions=2)
    try:
        assert resumed.first_message_of(topic, 0).offset() == 2
    finally:
        resumed.close()


RESET_TARGETS: list[tuple[tuple[str, ...], int]] = [
    (("--to-earliest",), 0),
    (("--to-latest",), 10),
    (("--to-offset", "4"), 4),
    (("--to-offset", "1000"), 10),
    (("--shift-by", "-3"), 2),
    (("--shift-by", "-100"), 0),
    (("--shift-by", "3"), 8),
    (("--shift-by", "100"), 10),
    (("--to-datetime", "2024-01-01T00:00:05Z"), 5),
    (("--to-datetime", "2024-01-01T02:00:03.500+02:00"), 4),
    (("--to-datetime", "2023-12-31T00:00:00Z"), 0),
    (("--to-datetime", "2024-06-01T00:00:00Z"), 10),  # after the last record
]
"""Each reset target and the offset it sets from offset 5 of a 10-record partition."""
RESET_TARGETS_AFTER_DELETION: list[tuple[tuple[str, ...], int]] = [
    (("--to-earliest",), 3),
    (("--to-offset", "1"), 3),
    (("--to-datetime", "2023-12-31T00:00:00Z"), 3),
    (("--shift-by", "-100"), 3),
]
"""The same from offset 5 once the records before offset 3 are deleted: inside the log."""


def resets_side_by_side(
    broker: BrokerProcess, topic: str, targets: list[tuple[tuple[str, ...], int]], group: str
) -> dict[str, int]:
    """Run ``sluice groups reset-offsets --execute`` once per target, each on a group of
    its own committed at offset 5 beforehand, the commands side by side (each is a
    process start; the groups are independent). The offsets the broker then stores, read
    back by another client (a confluent-kafka consumer per group), by target."""
    groups = {" ".join(target): f"{group}-{index}" for index, (target, _) in enumerate(targets)}

    async def commit_5() -> None:
        async with Cluster(broker.bootstrap) as cluster:
            admin = Admin(cluster)
            await asyncio.gather(
                *(
                    admin.alter_group_offsets(g, {TopicPartition(topic, 0): OffsetAndMetadata(5)})
                    for g in groups.values()
                )
            )

    asyncio.run(commit_5())
    env = {**os.environ, "SLUICE_BOOTSTRAP_SERVER": broker.bootstrap}
    command = [sys.executable, "-m", "sluice", "groups", "reset-offsets"]
    commands = [
        subprocess.Popen(
            [*command, groups[" ".join(target)], "--topic", topic, *target, "--execute"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for target, _ in targets
    ]
    try:
        for (target, _), running in zip(targets, commands, strict=True):
            _, stderr = running.communicate(timeout=COMMAND_TIMEOUT_S)
            assert running.returncode == 0, (target, stderr.decode())
    finally:
        for running in commands:
            if running.poll() is None:
                running.kill()
                running.wait()
    stored: dict[str, int] = {}
    for name, g in groups.items():
        reader = Consumer(consumer_config(broker, g))
        try:
            (offset,) = reader.committed(
                [ConfluentTopicPartition(topic, 0)], timeout=CLIENT_TIMEOUT_S
            )
        finally:
            reader.close()
        stored[name] = int(offset.offset)
    return stored


def test_every_reset_target_and_clamping(broker: BrokerProcess, topic: str, group: str) -> None:
    topic_with_records(broker, topic, partitions=1)
    commit_outside_the_group(broker, group, topic, {0: 5})
    assert describe(broker, group)["state"] == "Empty"

    expected = {" ".join(target): offset for target, offset in RESET_TARGETS}
    assert resets_side_by_side(broker, topic, RESET_TARGETS, group) == expected

    # Records before offset 3 deleted: the log starts at 3 and resets stay inside.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.delete_records([ConfluentTopicPartition(topic, 0, 3)])
    for future in futures.values():
        future.result(timeout=CLIENT_TIMEOUT_S)
    expected = {" ".join(target): offset for target, offset in RESET_TARGETS_AFTER_DELETION}
    assert resets_side_by_side(broker, topic, RESET_TARGETS_AFTER_DELETION, group) == expected


def test_a_reset_outside_the_log_warns_which_partitions_were_clamped_and_to_what(
    broker: BrokerProcess, topic: str, group: str
) -> None:
    topic_with_records(broker, topic, partitions=2)
    commit_outside_the_group(broker, group, topic, {0: 5, 1: 5})

    def warnings(*args: str) -> list[str]:
        result = sluice(broker, "groups", "reset-offsets", group, *args, "--execute")
        ok(result)
        return [line for line in result.stderr.decode().splitlines() if "Warning" in line]

    assert warnings("--topic", f"{topic}:0", "--to-offset", "1000") == [
        f"Warning: partition {topic}-0: offset 1000 is above its log end offset; set to 10 instead."
    ]
    assert warnings("--topic", topic, "--to-offset", "4") == []
    assert committed(broker, group) == {(topic, 0): 4, (topic, 1): 4}
    assert warnings("--topic", topic, "--shift-by", "-7") == [
        f"Warning: partition {topic}-{p}: offset -3 is below its log start offset; "
        "set to 0 instead."
        for p in (0, 1)
    ]
    assert warnings("--topic", topic, "--to-latest") == []
    # The dry run warns the same way, before anything changes.
    dry_run = sluice(broker, "groups", "reset-offsets", group, "--topic", topic, "--shift-by", "5")
    assert f"partition {topic}-1: offset 15 is above its log end offset" in ok(dry_run) + (
        dry_run.stderr.decode()
    )
    assert committed(broker, group) == {(topic, 0): 10, (topic, 1): 10}


def test_all_topics_and_partition_lists(broker: BrokerProcess, topic: str, group: str) -> None:
    other = f"{topic}-other"
    topic_with_records(broker, topic, partitions=3)
    topic_with_records(broker, other, partitions=1)
    commit_outside_the_group(broker, group, topic, {0: 1, 2: 1})
    commit_outside_the_group(broker, group, other, {0: 1})

    plan = ok(sluice(broker, "groups", "reset-offsets", group, "--all-topics", "--to-latest"))
    rows = [line.split() for line in plan.splitlines()[1:4]]
    assert rows == [[topic, "0", "1", "10"], [topic, "2", "1", "10"], [other, "0", "1", "10"]]

    reset(broker, group, "--topic", f"{topic}:1-2", "--to-offset", "6")
    assert committed(broker, group) == {(other, 0): 1, (topic, 0): 1, (topic, 1): 6, (topic, 2): 6}
    reset(broker, group, "--all-topics", "--shift-by", "2")
    assert committed(broker, group) == {(other, 0): 3, (topic, 0): 3, (topic, 1): 8, (topic, 2): 8}

    error = one_line_error(
        sluice(broker, "groups", "reset-offsets", group, "--topic", f"{topic}:7", "--to-latest")
    )
    assert f"topic {topic!r} has no partition 7" in error
    error = one_line_error(
        sluice(
            broker, "groups", "reset-offsets", group, "--topic", "no-such-topic-x", "--to-latest"
        )
    )
    assert "topic 'no-such-topic-x' does not exist" in error


def test_shifting_a_partition_without_a_committed_offset_is_refused(
    broker: BrokerProcess, topic: str, group: str
) -> None:
    topic_with_records(broker, topic, partitions=2)
    commit_outside_the_group(broker, group, topic, {0: 3})
    error = one_line_error(
        sluice(broker, "groups", "reset-offsets", group, "--topic", topic, "--shift-by", "1")
    )
    assert f"cannot shift partition {topic}-1 of group {group!r}" in error
    assert "no committed offset" in error


def test_a_group_is_deleted_only_when_empty(broker: BrokerProcess, topic: str, group: str) -> None:
    topic_with_records(broker, topic, partitions=1)
    consumer = GroupMember(broker, group, topic, partitions=1)
    try:
        consumer.commit(topic, {0: 3})
        error = one_line_error(sluice(broker, "groups", "delete", group))
        assert f"group {group!r} is not empty" in error
        assert describe(broker, group)["state"] == "Stable"
    finally:
        consumer.close()

    assert ok(sluice(broker, "groups", "delete", group)) == f"Deleted group {group}.\n"
    error = one_line_error(sluice(broker, "groups", "describe", group))
    assert f"group {group!r} does not exist" in error
    assert group not in ok(sluice(broker, "groups", "list"))
    error = one_line_error(sluice(broker, "groups", "delete", group))
    assert f"group {group!r} does not exist" in error


def test_delete_offsets(broker: BrokerProcess, topic: str, group: str) -> None:
    other = f"{topic}-other"
    topic_with_records(broker, topic, partitions=2)
    topic_with_records(broker, other, partitions=1)
    consumer = GroupMember(broker, group, topic, partitions=2)
    try:
        consumer.commit(topic, {0: 2, 1: 2})
        consumer.commit(other, {0: 5})
        error = one_line_error(sluice(broker, "groups", "delete-offsets", group, "--topic", topic))
        assert f"subscribe to topic {topic!r}" in error
        # Offsets of a topic no member subscribes to can go while the group is active.
        deleted = ok(sluice(broker, "groups", "delete-offsets", group, "--topic", other))
        assert f"for {other} partition(s) 0." in deleted
        assert committed(broker, group) == {(topic, 0): 2, (topic, 1): 2}
    finally:
        consumer.close()

    ok(sluice(broker, "groups", "delete-offsets", group, "--topic", f"{topic}:1"))
    assert committed(broker, group) == {(topic, 0): 2}
    ok(sluice(broker, "groups", "delete-offsets", group, "--topic", topic))
    described = sluice(broker, "groups", "describe", group, "--format", "json")
    if described.returncode == 0:  # an empty group without offsets may be dropped at once
        assert json.loads(described.stdout)["partitions"] == []
    else:
        assert f"group {group!r} does not exist" in one_line_error(described)


def test_an_unknown_group_is_one_clear_line(broker: BrokerProcess, group: str) -> None:
    error = one_line_error(sluice(broker, "groups", "describe", group))
    assert error == f"Error: group {group!r} does not exist (list groups with `sluice groups list`)"
    error = one_line_error(sluice(broker, "groups", "delete-offsets", group, "--topic", "t:0"))
    assert f"group {group!r} does not exist" in error


def test_a_group_that_consumes_and_never_commits_has_an_unknown_lag_not_0(
    broker: BrokerProcess, topic: str, group: str
) -> None:
    """Kafka's tool prints ``-`` as CURRENT-OFFSET and LAG of a partition without a
    committed offset; a consumer that reads everything and never commits must not look
    caught up."""
    topic_with_records(broker, topic)
    consumer = GroupMember(broker, group, topic, partitions=2)
    try:
        consumer.first_message_of(topic, 0)
        consumer.first_message_of(topic, 1)
        document = describe(broker, group)
        assert document["state"] == "Stable"
        assert [
            (row["partition"], row["current_offset"], row["log_end_offset"], row["lag"])
            for row in document["partitions"]
        ] == [(0, None, 10, None), (1, None, 10, None)]
        assert document["total_lag"] is None
        assert document["partitions_without_committed_offset"] == 2

        text = ok(sluice(broker, "groups", "describe", group))
        lines = [line.split() for line in text.splitlines()]
        assert [topic, "0", "-", "10", "-"] == lines[3][:5]
        assert text.rstrip().endswith(
            "total lag: - (2 partition(s) without a committed offset: lag unknown)"
        )

        consumer.commit(topic, {0: 10})  # one partition committed, the other still unknown
        document = describe(broker, group)
        assert [row["lag"] for row in document["partitions"]] == [0, None]
        assert (document["total_lag"], document["partitions_without_committed_offset"]) == (0, 1)
    finally:
        consumer.close()


def test_bookkeeping_groups_are_hidden_unless_asked_for_and_show_no_lag(
    broker: BrokerProcess, topic: str, group: str
) -> None:
    """Spark's exactly-once sink commits batch ids as offsets (group ``sluice-spark-…``,
    metadata ``sluice:bookkeeping``): such a group is no consumer and has no lag."""
    topic_with_records(broker, topic)
    spark_group = f"{SPARK_GROUP_PREFIX}{group}-0"
    marked_group = f"{group}-progress"
    partition = TopicPartition(topic, 0)

    async def commit_progress() -> None:
        async with Cluster(broker.bootstrap) as cluster:
            admin = Admin(cluster)
            await admin.alter_group_offsets(spark_group, {partition: OffsetAndMetadata(3)})
            await admin.alter_group_offsets(
                marked_group, {partition: OffsetAndMetadata(3, metadata=BOOKKEEPING_METADATA)}
            )
            await admin.alter_group_offsets(group, {partition: OffsetAndMetadata(3)})

    asyncio.run(commit_progress())
    listed = sluice(broker, "groups", "list", "--format", "json")
    shown = {entry["group"] for entry in json.loads(ok(listed))}
    assert group in shown and spark_group not in shown and marked_group not in shown
    assert "bookkeeping group(s) hidden (--all shows them)" in listed.stderr.decode()

    every = json.loads(ok(sluice(broker, "groups", "list", "--all", "--format", "json")))
    marks = {entry["group"]: entry["bookkeeping"] for entry in every}
    assert (marks[group], marks[spark_group], marks[marked_group]) == (False, True, True)
    table = ok(sluice(broker, "groups", "list", "--all"))
    assert [spark_group, "classic", "Empty", "-", "bookkeeping"] in [
        line.split() for line in table.splitlines()
    ]

    for bookkeeping in (spark_group, marked_group):
        document = describe(broker, bookkeeping)
        assert document["bookkeeping"] is True
        ((row),) = document["partitions"]
        assert (row["current_offset"], row["log_end_offset"], row["lag"]) == (3, 10, None)
        assert document["total_lag"] is None
        text = ok(sluice(broker, "groups", "describe", bookkeeping))
        assert "bookkeeping group" in text and "total lag" not in text
    assert describe(broker, group)["total_lag"] == 7
